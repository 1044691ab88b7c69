#include "transport/tcp/auth.hpp"

#include <sodium.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>

#include "core/check.hpp"
#include "core/config.hpp"

namespace shoal::transport::tcp {

namespace {

constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = crypto_auth_hmacsha256_BYTES;

std::string read_key() {
  std::string key = config::get("SHOAL_AUTH_KEY");
  const std::string file = config::get("SHOAL_AUTH_KEY_FILE");
  if (key.empty() && !file.empty()) {
    std::ifstream in(file, std::ios::binary);
    SHOAL_CHECK(in.good(), InvalidArgument,
                "cannot read SHOAL_AUTH_KEY_FILE '" << file << "': give a readable file holding the job's secret");
    key.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    while (!key.empty() && (key.back() == '\n' || key.back() == '\r')) key.pop_back();
    SHOAL_CHECK(!key.empty(), InvalidArgument, "SHOAL_AUTH_KEY_FILE '" << file << "' is empty");
  }
  return key;
}

void mac(uint8_t out[kMacBytes], const std::string& key, const char* label, const Hello& hello, int32_t acceptor,
         const uint8_t* nonce_c, const uint8_t* nonce_a) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, reinterpret_cast<const unsigned char*>(key.data()), key.size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(label), std::strlen(label) + 1);
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(&hello), sizeof hello);
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(&acceptor), sizeof acceptor);
  crypto_auth_hmacsha256_update(&st, nonce_c, kNonceBytes);
  crypto_auth_hmacsha256_update(&st, nonce_a, kNonceBytes);
  crypto_auth_hmacsha256_final(&st, out);
}

void ensure_sodium() {
  static const int ok = sodium_init();
  SHOAL_CHECK(ok >= 0, Internal, "libsodium failed to initialise: no authentication possible");
}

}  // namespace

const std::string& auth_key() {
  static const std::string key = [] {
    std::string k = read_key();
    if (k.empty())
      SHOAL_WARN("no SHOAL_AUTH_KEY: this job's connections are open to any process that reaches its ports "
                 "(set SHOAL_AUTH_KEY or SHOAL_AUTH_KEY_FILE on every rank; docs/reliability.md)");
    return k;
  }();
  return key;
}

void authenticate_to(int fd, const Hello& hello, int peer, const std::string& where, const std::string& key,
                     Clock::time_point deadline) {
  ensure_sodium();
  uint8_t nonce_c[kNonceBytes], reply[kNonceBytes + kMacBytes], expected[kMacBytes], answer[kMacBytes];
  randombytes_buf(nonce_c, sizeof nonce_c);
  std::string err;
  if (!write_all(fd, nonce_c, sizeof nonce_c, deadline, err) || !read_all(fd, reply, sizeof reply, deadline, err))
    SHOAL_THROW(PeerFailure, "rank " << peer << " at " << where << " broke off the authentication (" << err
                                     << "): its SHOAL_AUTH_KEY differs from this rank's or it has none; its log says",
                peer);
  mac(expected, key, "shoal-acceptor", hello, peer, nonce_c, reply);
  if (crypto_verify_32(expected, reply + kNonceBytes) != 0)
    SHOAL_THROW(Unauthorized, "the process at " << where << " (rank " << peer
                                                << "'s address) did not prove it knows SHOAL_AUTH_KEY: a stranger, "
                                                   "or a rank with another key",
                peer);
  mac(answer, key, "shoal-connector", hello, peer, nonce_c, reply);
  if (!write_all(fd, answer, sizeof answer, deadline, err))
    SHOAL_THROW(PeerFailure, "rank " << peer << " at " << where << " broke off the authentication (" << err << ")",
                peer);
}

bool authenticate_from(int fd, const Hello& hello, int rank, const std::string& key, Clock::time_point deadline,
                       std::string& why) {
  ensure_sodium();
  uint8_t nonce_c[kNonceBytes], out[kNonceBytes + kMacBytes], expected[kMacBytes], answer[kMacBytes];
  std::string err;
  if (!read_all(fd, nonce_c, sizeof nonce_c, deadline, err)) {
    why = "no authentication nonce (" + err + ")";
    return false;
  }
  randombytes_buf(out, kNonceBytes);
  mac(out + kNonceBytes, key, "shoal-acceptor", hello, rank, nonce_c, out);
  if (!write_all(fd, out, sizeof out, deadline, err) || !read_all(fd, answer, sizeof answer, deadline, err)) {
    why = "the peer broke off the authentication (" + err + "): its key differs";
    return false;
  }
  mac(expected, key, "shoal-connector", hello, rank, nonce_c, out);
  if (crypto_verify_32(expected, answer) != 0) {
    why = "it did not prove it knows SHOAL_AUTH_KEY (a stranger, or a rank with another key)";
    return false;
  }
  return true;
}

}  // namespace shoal::transport::tcp
