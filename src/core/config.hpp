// Every SHOAL_* setting, declared once: name, type, default, one-line doc.
// Values are read from the environment the first time they are needed.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shoal::config {

/// Whether every rank of a communicator must hold a setting equal: a new communicator compares
/// them (comm/agreement.hpp) and fails its first call, naming the rank and the setting, where
/// they differ (they decide which algorithm or path a call takes; ranks that differ would
/// otherwise mismatch at some later call, or hang).
enum class Agreement : uint8_t {
  none,
  value,          // the setting's value
  file_contents,  // the contents of the file it names (the paths may differ)
};

struct Setting {
  const char* name;
  const char*
      type;  // "int", "int or auto", "bytes", "seconds", "seconds or auto", "string", "enum"
  const char* default_value;
  const char* doc;
  Agreement agreed = Agreement::none;
};

/// The table of all settings, in the order shoal-info prints them.
const std::vector<Setting>& settings();

/// The settings whose Agreement is not none, in table order.
std::vector<const Setting*> agreed_settings();
/// Per agreed setting, in that order, a 64-bit hash of what must be equal on this process: the
/// value as get() returns it, or the named file's bytes (an unreadable file hashes as such).
std::vector<uint64_t> agreed_fingerprints();

/// Raw value: the environment's if set and non-empty, else the table's default.
/// Throws InternalError for a name missing from the table (a bug in shoal).
std::string get(const char* name);
/// Whether the environment sets `name` (non-empty), rather than the default applying.
bool is_set(const char* name);
/// Parsed values; malformed input raises InvalidArgumentError naming the variable.
int64_t get_int(const char* name);
/// Accepts K/M/G suffixes (powers of 1024).
uint64_t get_bytes(const char* name);
/// Seconds, fractions allowed ("0.5").
std::chrono::milliseconds get_duration(const char* name);
/// A "seconds or auto" setting: nullopt for "auto" (the caller derives the value).
std::optional<std::chrono::milliseconds> get_duration_or_auto(const char* name);
/// An "int or auto" setting: nullopt for "auto".
std::optional<int64_t> get_int_or_auto(const char* name);
/// A "bytes or auto" setting: nullopt for "auto".
std::optional<uint64_t> get_bytes_or_auto(const char* name);

/// Parses "64", "4K", "16M", "1G" (powers of 1024); nullopt-like failure throws.
uint64_t parse_bytes(const std::string& text, const char* what);
/// What parse_bytes reads back: "64", "4K", "16M", "1G" (the largest unit that divides `bytes`).
std::string format_bytes(uint64_t bytes);
/// The whole of `text` as a finite number ("5e-6", "2"); nullopt when it is not one.
std::optional<double> parse_number(const std::string& text);

}  // namespace shoal::config
