#include "core/auth.hpp"

#include <sodium.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>

#include "core/check.hpp"
#include "core/config.hpp"

namespace shoal::auth {

static_assert(kMacBytes == crypto_auth_hmacsha256_BYTES);

namespace {

std::string read_key() {
  std::string key = config::get("SHOAL_AUTH_KEY");
  const std::string file = config::get("SHOAL_AUTH_KEY_FILE");
  if (key.empty() && !file.empty()) {
    std::ifstream in(file, std::ios::binary);
    SHOAL_CHECK(in.good(), InvalidArgument,
                "cannot read SHOAL_AUTH_KEY_FILE '"
                    << file << "': give a readable file holding the job's secret");
    key.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    while (!key.empty() && (key.back() == '\n' || key.back() == '\r')) key.pop_back();
    SHOAL_CHECK(!key.empty(), InvalidArgument, "SHOAL_AUTH_KEY_FILE '" << file << "' is empty");
  }
  return key;
}

void ensure_sodium() {
  static const int ok = sodium_init();
  SHOAL_CHECK(ok >= 0, Internal, "libsodium failed to initialise: no authentication possible");
}

}  // namespace

const std::string& job_key(bool warn_if_none) {
  static const std::string key = read_key();
  static std::once_flag warned;
  if (key.empty() && warn_if_none)
    std::call_once(warned, [] {
      SHOAL_WARN(
          "no SHOAL_AUTH_KEY: this job's connections are open to any process that reaches its "
          "ports "
          "(set SHOAL_AUTH_KEY or SHOAL_AUTH_KEY_FILE on every rank; docs/reliability.md)");
    });
  return key;
}

void random_nonce(uint8_t* out) {
  ensure_sodium();
  randombytes_buf(out, kNonceBytes);
}

void mac(uint8_t out[kMacBytes], const std::string& key, const char* label,
         std::initializer_list<std::string_view> parts) {
  ensure_sodium();
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, reinterpret_cast<const unsigned char*>(key.data()), key.size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(label),
                                std::strlen(label) + 1);
  for (std::string_view p : parts)
    crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(p.data()), p.size());
  crypto_auth_hmacsha256_final(&st, out);
}

bool same_mac(const uint8_t* a, const uint8_t* b) { return crypto_verify_32(a, b) == 0; }

}  // namespace shoal::auth
