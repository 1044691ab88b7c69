#include "core/check.hpp"

#include <strings.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/config.hpp"

namespace shoal {

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidArgument:
      return "InvalidArgument";
    case ErrorCode::Timeout:
      return "Timeout";
    case ErrorCode::PeerFailure:
      return "PeerFailure";
    case ErrorCode::Mismatch:
      return "Mismatch";
    case ErrorCode::Aborted:
      return "Aborted";
    case ErrorCode::Unauthorized:
      return "Unauthorized";
    case ErrorCode::Internal:
      return "Internal";
  }
  return "Unknown";
}

void throw_error(ErrorCode code, const std::string& message, int peer) {
  switch (code) {
    case ErrorCode::InvalidArgument:
      throw InvalidArgumentError(message, peer);
    case ErrorCode::Timeout:
      throw TimeoutError(message, peer);
    case ErrorCode::PeerFailure:
      throw PeerFailureError(message, peer);
    case ErrorCode::Mismatch:
      throw MismatchError(message, peer);
    case ErrorCode::Aborted:
      throw AbortedError(message, peer);
    case ErrorCode::Unauthorized:
      throw UnauthorizedError(message, peer);
    case ErrorCode::Internal:
      break;
  }
  throw InternalError(message, peer);
}

namespace log {

static std::atomic<int> g_rank{-1};

Level level() {
  static const Level lvl = [] {
    const std::string v = config::get("SHOAL_DEBUG");
    if (strcasecmp(v.c_str(), "TRACE") == 0) return Level::Trace;
    if (strcasecmp(v.c_str(), "INFO") == 0) return Level::Info;
    return Level::Warn;
  }();
  return lvl;
}

void set_rank(int rank) { g_rank.store(rank); }

void write(Level lvl, const std::string& message) {
  static const char* names[] = {"WARN", "INFO", "TRACE"};
  char line[256];
  int r = g_rank.load();
  if (r >= 0)
    std::snprintf(line, sizeof line, "[shoal %s rank %d pid %d] ", names[static_cast<int>(lvl)], r,
                  getpid());
  else
    std::snprintf(line, sizeof line, "[shoal %s pid %d] ", names[static_cast<int>(lvl)], getpid());
  std::string out = line + message + "\n";
  ssize_t ignored = ::write(2, out.data(), out.size());
  (void)ignored;
}

}  // namespace log
}  // namespace shoal
