// The SHOAL_* settings table and its parsers (src/core/config.cpp).
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "shoal/error.hpp"
#include "support/env.hpp"
#include "support/temp_file.hpp"

namespace shoal {
namespace {

using shoal::testing::ScopedEnv;
using shoal::testing::TempFile;

using namespace std::chrono_literals;

// Expects an InvalidArgumentError whose message names `variable`.
template <class F>
void expect_invalid_naming(F&& f, const std::string& variable, const std::string& value) {
  try {
    f();
    ADD_FAILURE() << variable << "='" << value << "' was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find(variable), std::string::npos)
        << "message does not name " << variable << ": " << e.what();
  }
}

TEST(Config, TableIsWellFormed) {
  const auto& table = config::settings();
  ASSERT_FALSE(table.empty());
  std::set<std::string> names;
  const std::set<std::string> types = {"int",     "int or auto",     "bytes",  "bytes or auto",
                                       "seconds", "seconds or auto", "string", "enum"};
  for (const auto& s : table) {
    const std::string name = s.name;
    EXPECT_EQ(name.rfind("SHOAL_", 0), 0u) << name;
    EXPECT_TRUE(names.insert(name).second) << "declared twice: " << name;
    EXPECT_TRUE(types.count(s.type)) << name << " has type " << s.type;
    EXPECT_NE(s.default_value, nullptr) << name;
    EXPECT_NE(std::string(s.doc), "") << name << " has no doc line";
  }
}

// Every default parses as its declared type, with the variable unset.
TEST(Config, DefaultsParseAsTheirTypes) {
  for (const auto& s : config::settings()) {
    ScopedEnv unset(s.name, std::nullopt);
    EXPECT_EQ(config::get(s.name), s.default_value) << s.name;
    const std::string type = s.type;
    if (type == "int") {
      EXPECT_NO_THROW(config::get_int(s.name)) << s.name;
    } else if (type == "bytes") {
      EXPECT_NO_THROW(config::get_bytes(s.name)) << s.name;
    } else if (type == "seconds") {
      EXPECT_NO_THROW(config::get_duration(s.name)) << s.name;
    } else if (type == "seconds or auto") {
      EXPECT_NO_THROW(config::get_duration_or_auto(s.name)) << s.name;
    } else if (type == "int or auto") {
      EXPECT_NO_THROW(config::get_int_or_auto(s.name)) << s.name;
    } else if (type == "bytes or auto") {
      EXPECT_NO_THROW(config::get_bytes_or_auto(s.name)) << s.name;
    }
  }
}

TEST(Config, DefaultsFromTheTable) {
  ScopedEnv a("SHOAL_CHUNK_BYTES", std::nullopt), b("SHOAL_TIMEOUT", std::nullopt),
      c("SHOAL_CONNECT_RETRY_MS", std::nullopt), d("SHOAL_MAX_FRAME", std::nullopt);
  EXPECT_EQ(config::get_bytes("SHOAL_CHUNK_BYTES"), 512u << 10);
  EXPECT_EQ(config::get_bytes("SHOAL_MAX_FRAME"), 16ull << 30);
  EXPECT_EQ(config::get_duration("SHOAL_TIMEOUT"), 300s);
  EXPECT_EQ(config::get_int("SHOAL_CONNECT_RETRY_MS"), 5000);
}

TEST(Config, EmptyValueMeansDefault) {
  ScopedEnv e("SHOAL_CHUNK_BYTES", "");
  EXPECT_EQ(config::get("SHOAL_CHUNK_BYTES"), "512K");
  EXPECT_EQ(config::get_bytes("SHOAL_CHUNK_BYTES"), 512u << 10);
}

TEST(Config, EnvironmentOverridesDefault) {
  ScopedEnv e("SHOAL_DEBUG", "TRACE");
  EXPECT_EQ(config::get("SHOAL_DEBUG"), "TRACE");
}

TEST(Config, BytesSuffixesArePowersOf1024) {
  const std::pair<const char*, uint64_t> cases[] = {{"0", 0},
                                                    {"4096", 4096},
                                                    {"4K", 4096},
                                                    {"4k", 4096},
                                                    {"4KB", 4096},
                                                    {"4KiB", 4096},
                                                    {"16M", 16ull << 20},
                                                    {"16m", 16ull << 20},
                                                    {"16MiB", 16ull << 20},
                                                    {"2G", 2ull << 30},
                                                    {"2GB", 2ull << 30},
                                                    {"2GiB", 2ull << 30},
                                                    {"1.5K", 1536},
                                                    {"0.5M", 512ull << 10}};
  for (const auto& [text, want] : cases) {
    ScopedEnv e("SHOAL_CHUNK_BYTES", text);
    EXPECT_EQ(config::get_bytes("SHOAL_CHUNK_BYTES"), want) << text;
    EXPECT_EQ(config::parse_bytes(text, "what"), want) << text;
  }
}

TEST(Config, FormattedBytesReadBack) {
  const std::vector<std::pair<uint64_t, std::string>> cases = {
      {0, "0"},           {8, "8"},
      {1000, "1000"},     {1024, "1K"},
      {1536, "1536"},     {16ull << 20, "16M"},
      {3ull << 30, "3G"}, {5ull << 40, "5120G"}};
  for (const auto& [bytes, text] : cases) {
    EXPECT_EQ(config::format_bytes(bytes), text);
    EXPECT_EQ(config::parse_bytes(config::format_bytes(bytes), "what"), bytes) << text;
  }
}

TEST(Config, BadBytesThrowNamingTheVariable) {
  for (const char* bad : {"abc", "12X", "-1", "4T", "K", "4 K", "nan"}) {
    ScopedEnv e("SHOAL_SOCKET_BUFFER", bad);
    expect_invalid_naming([] { config::get_bytes("SHOAL_SOCKET_BUFFER"); }, "SHOAL_SOCKET_BUFFER",
                          bad);
  }
  expect_invalid_naming([] { config::parse_bytes("lots", "--max-bytes"); }, "--max-bytes", "lots");
  {
    ScopedEnv beat("SHOAL_HEARTBEAT", "soon");
    expect_invalid_naming([] { config::get_duration_or_auto("SHOAL_HEARTBEAT"); },
                          "SHOAL_HEARTBEAT", "soon");
  }
  {
    ScopedEnv beat("SHOAL_HEARTBEAT", "2.5");
    EXPECT_EQ(config::get_duration_or_auto("SHOAL_HEARTBEAT"), 2500ms);
  }
  {
    ScopedEnv unset("SHOAL_HEARTBEAT", std::nullopt);
    EXPECT_EQ(config::get_duration_or_auto("SHOAL_HEARTBEAT"), std::nullopt);
  }
  {
    ScopedEnv spin("SHOAL_SPIN_US", "briefly");
    expect_invalid_naming([] { config::get_int_or_auto("SHOAL_SPIN_US"); }, "SHOAL_SPIN_US",
                          "briefly");
  }
  {
    ScopedEnv spin("SHOAL_SPIN_US", "200");
    EXPECT_EQ(config::get_int_or_auto("SHOAL_SPIN_US"), 200);
  }
  {
    ScopedEnv unset("SHOAL_SPIN_US", std::nullopt);
    EXPECT_EQ(config::get_int_or_auto("SHOAL_SPIN_US"), std::nullopt);
  }
  {
    ScopedEnv buf("SHOAL_SOCKET_BUFFER", "8M");
    EXPECT_EQ(config::get_bytes_or_auto("SHOAL_SOCKET_BUFFER"), 8u << 20);
  }
  {
    ScopedEnv unset("SHOAL_SOCKET_BUFFER", std::nullopt);
    EXPECT_EQ(config::get_bytes_or_auto("SHOAL_SOCKET_BUFFER"), std::nullopt);
  }
  {
    ScopedEnv buf("SHOAL_SOCKET_BUFFER", "big");
    expect_invalid_naming([] { config::get_bytes_or_auto("SHOAL_SOCKET_BUFFER"); },
                          "SHOAL_SOCKET_BUFFER", "big");
  }
}

// A size beyond uint64_t must be refused, not converted: casting such a double is undefined
// behaviour ("inf", "1e30"), and a multiplied one wraps ("20000000000G").
TEST(Config, HugeOrInfiniteSizesThrow) {
  for (const char* bad : {"inf", "1e30", "20000000000G"}) {
    ScopedEnv e("SHOAL_SOCKET_BUFFER", bad);
    expect_invalid_naming([] { config::get_bytes("SHOAL_SOCKET_BUFFER"); }, "SHOAL_SOCKET_BUFFER",
                          bad);
  }
}

TEST(Config, DurationsAreSecondsWithFractions) {
  const std::pair<const char*, std::chrono::milliseconds> cases[] = {
      {"2", 2000ms}, {"0.5", 500ms}, {"0.25", 250ms}, {"1.5", 1500ms}, {"0", 0ms}, {"90", 90s}};
  for (const auto& [text, want] : cases) {
    ScopedEnv e("SHOAL_TIMEOUT", text);
    EXPECT_EQ(config::get_duration("SHOAL_TIMEOUT"), want) << text;
  }
}

TEST(Config, BadDurationsThrowNamingTheVariable) {
  for (const char* bad : {"abc", "-1", "5s", "1m", "0.5 "}) {
    ScopedEnv e("SHOAL_TIMEOUT", bad);
    expect_invalid_naming([] { config::get_duration("SHOAL_TIMEOUT"); }, "SHOAL_TIMEOUT", bad);
  }
}

TEST(Config, IntegersParseAndBadOnesThrowNamingTheVariable) {
  {
    ScopedEnv e("SHOAL_CONNECT_RETRY_MS", "250");
    EXPECT_EQ(config::get_int("SHOAL_CONNECT_RETRY_MS"), 250);
  }
  {
    ScopedEnv e("SHOAL_CONNECT_RETRY_MS", "-3");
    EXPECT_EQ(config::get_int("SHOAL_CONNECT_RETRY_MS"), -3);
  }
  for (const char* bad : {"12x", "abc", "1.5", "0x10 "}) {
    ScopedEnv e("SHOAL_CONNECT_RETRY_MS", bad);
    expect_invalid_naming([] { config::get_int("SHOAL_CONNECT_RETRY_MS"); },
                          "SHOAL_CONNECT_RETRY_MS", bad);
  }
}

// A name missing from the table is a bug in the caller. config.hpp documents
// InvalidArgumentError, config.cpp raises InternalError: accept any shoal::Error that names it.
// The settings the docs call equal on all ranks are the ones a new communicator compares.
TEST(Config, SettingsThatMustBeEqualOnAllRanksAreAgreed) {
  for (const auto& s : config::settings()) {
    const std::string doc = s.doc;
    const bool says = doc.find("on all ranks") !=
                      std::string::npos;  // "Equal on all ranks", "Same contents on ..."
    const bool secret =
        std::string(s.name).find("AUTH") != std::string::npos;  // proven by the handshake instead
    EXPECT_EQ(s.agreed != config::Agreement::none, says && !secret) << s.name;
  }
  EXPECT_EQ(config::agreed_fingerprints().size(), config::agreed_settings().size());
}

TEST(Config, AgreedFingerprintsFollowValuesAndFileContents) {
  ScopedEnv smoothing("SHOAL_TUNE_SMOOTHING", std::nullopt), file("SHOAL_TUNE_FILE", std::nullopt);
  const auto agreed = config::agreed_settings();
  auto index = [&](const char* name) {
    for (size_t i = 0; i < agreed.size(); ++i)
      if (std::string(agreed[i]->name) == name) return i;
    ADD_FAILURE() << name << " is not agreed";
    return size_t{0};
  };
  const size_t smooth = index("SHOAL_TUNE_SMOOTHING"), tune = index("SHOAL_TUNE_FILE");
  const auto base = config::agreed_fingerprints();
  {
    ScopedEnv one("SHOAL_TUNE_SMOOTHING", "1");
    const auto changed = config::agreed_fingerprints();
    EXPECT_NE(changed[smooth], base[smooth]);
    for (size_t i = 0; i < base.size(); ++i) {
      if (i == smooth) continue;
      EXPECT_EQ(changed[i], base[i]) << agreed[i]->name;
    }
  }
  // The file's contents count, not its path; an unreadable file differs from a readable one.
  const TempFile a(R"({"tables": []})"), same(R"({"tables": []})"), other(R"({"tables": [ ]})");
  auto tune_hash = [&](const std::string& path) {
    ScopedEnv env("SHOAL_TUNE_FILE", path);
    return config::agreed_fingerprints()[tune];
  };
  EXPECT_EQ(tune_hash(a.path), tune_hash(same.path));
  EXPECT_NE(tune_hash(a.path), tune_hash(other.path));
  EXPECT_NE(tune_hash(a.path), tune_hash(a.path + ".missing"));
  EXPECT_NE(tune_hash(a.path), base[tune]);  // no file at all
}

TEST(Config, UndeclaredNameThrows) {
  try {
    config::get("SHOAL_NO_SUCH_SETTING");
    ADD_FAILURE() << "undeclared setting was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("SHOAL_NO_SUCH_SETTING"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace shoal
