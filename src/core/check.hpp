// The one checking macro and the logging helpers of the library.
#pragma once

#include <sstream>
#include <string>

#include "shoal/error.hpp"

/// Throws the shoal::Error subclass for `code` when `cond` is false; the message is streamed:
///   SHOAL_CHECK(n >= 0, InvalidArgument, "count " << n << " is negative");
#define SHOAL_CHECK(cond, code, msg)                                         \
  do {                                                                       \
    if (!(cond)) [[unlikely]] {                                              \
      std::ostringstream shoal_check_os_;                                    \
      shoal_check_os_ << msg;                                                \
      ::shoal::throw_error(::shoal::ErrorCode::code, shoal_check_os_.str()); \
    }                                                                        \
  } while (0)

/// Throws unconditionally, with an optional peer rank.
#define SHOAL_THROW(code, msg, ...)                                                       \
  do {                                                                                    \
    std::ostringstream shoal_check_os_;                                                   \
    shoal_check_os_ << msg;                                                               \
    ::shoal::throw_error(::shoal::ErrorCode::code, shoal_check_os_.str(), ##__VA_ARGS__); \
  } while (0)

namespace shoal::log {

enum class Level { Warn = 0, Info = 1, Trace = 2 };
/// The level set by SHOAL_DEBUG (read once).
Level level();
void write(Level level, const std::string& message);
/// Sets the "[shoal rank N]" prefix of this process's lines.
void set_rank(int rank);

}  // namespace shoal::log

#define SHOAL_LOG(lvl, msg)                                               \
  do {                                                                    \
    if (::shoal::log::level() >= ::shoal::log::Level::lvl) {              \
      std::ostringstream shoal_log_os_;                                   \
      shoal_log_os_ << msg;                                               \
      ::shoal::log::write(::shoal::log::Level::lvl, shoal_log_os_.str()); \
    }                                                                     \
  } while (0)
#define SHOAL_WARN(msg) SHOAL_LOG(Warn, msg)
#define SHOAL_INFO(msg) SHOAL_LOG(Info, msg)
#define SHOAL_TRACE(msg) SHOAL_LOG(Trace, msg)
