#include "transport/tcp/auth.hpp"

#include "core/auth.hpp"
#include "core/check.hpp"

namespace shoal::transport::tcp {

namespace {

using auth::bytes_of;
using auth::kMacBytes;
using auth::kNonceBytes;

void mac(uint8_t out[kMacBytes], const std::string& key, const char* label, const Hello& hello,
         int32_t acceptor, const uint8_t* nonce_c, const uint8_t* nonce_a) {
  auth::mac(out, key, label,
            {bytes_of(&hello, sizeof hello), bytes_of(&acceptor, sizeof acceptor),
             bytes_of(nonce_c, kNonceBytes), bytes_of(nonce_a, kNonceBytes)});
}

}  // namespace

void authenticate_to(int fd, const Hello& hello, int peer, const std::string& where,
                     const std::string& key, Clock::time_point deadline) {
  uint8_t nonce_c[kNonceBytes], reply[kNonceBytes + kMacBytes], expected[kMacBytes],
      answer[kMacBytes];
  auth::random_nonce(nonce_c);
  std::string err;
  if (!write_all(fd, nonce_c, sizeof nonce_c, deadline, err) ||
      !read_all(fd, reply, sizeof reply, deadline, err))
    SHOAL_THROW(
        PeerFailure,
        "rank " << peer << " at " << where << " broke off the authentication (" << err
                << "): its SHOAL_AUTH_KEY differs from this rank's or it has none; its log says",
        peer);
  mac(expected, key, "shoal-acceptor", hello, peer, nonce_c, reply);
  if (!auth::same_mac(expected, reply + kNonceBytes))
    SHOAL_THROW(
        Unauthorized,
        "the process at " << where << " (rank " << peer
                          << "'s address) did not prove it knows SHOAL_AUTH_KEY: a stranger, "
                             "or a rank with another key",
        peer);
  mac(answer, key, "shoal-connector", hello, peer, nonce_c, reply);
  if (!write_all(fd, answer, sizeof answer, deadline, err))
    SHOAL_THROW(
        PeerFailure,
        "rank " << peer << " at " << where << " broke off the authentication (" << err << ")",
        peer);
}

bool authenticate_from(int fd, const Hello& hello, int rank, const std::string& key,
                       Clock::time_point deadline, std::string& why) {
  uint8_t nonce_c[kNonceBytes], out[kNonceBytes + kMacBytes], expected[kMacBytes],
      answer[kMacBytes];
  std::string err;
  if (!read_all(fd, nonce_c, sizeof nonce_c, deadline, err)) {
    why = "no authentication nonce (" + err + ")";
    return false;
  }
  auth::random_nonce(out);
  mac(out + kNonceBytes, key, "shoal-acceptor", hello, rank, nonce_c, out);
  if (!write_all(fd, out, sizeof out, deadline, err) ||
      !read_all(fd, answer, sizeof answer, deadline, err)) {
    why = "the peer broke off the authentication (" + err + "): its key differs";
    return false;
  }
  mac(expected, key, "shoal-connector", hello, rank, nonce_c, out);
  if (!auth::same_mac(expected, answer)) {
    why = "it did not prove it knows SHOAL_AUTH_KEY (a stranger, or a rank with another key)";
    return false;
  }
  return true;
}

}  // namespace shoal::transport::tcp
