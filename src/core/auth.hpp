// The job's shared secret and the HMAC-SHA256 challenge-response pieces every authenticated
// connection uses (the mesh's in transport/tcp/auth, the TCP store's in store/tcp_store). With
// SHOAL_AUTH_KEY (or SHOAL_AUTH_KEY_FILE) set, both ends prove they know the secret over fresh
// nonces; the secret never travels. Nothing is encrypted: see docs/reliability.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace shoal::auth {

inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;

/// The job's shared secret, read once (empty: none). Without one, the first call with
/// `warn_if_none` warns, once per process, that any process reaching the job's ports can join
/// its connections (the ranks' mesh does; a launcher hosting the store need not repeat it).
const std::string& job_key(bool warn_if_none = true);

/// Fills `out` with kNonceBytes random bytes.
void random_nonce(uint8_t* out);

/// HMAC-SHA256 under `key` of `label` (with its terminating zero, so labels never run into
/// the data) followed by `parts`.
void mac(uint8_t out[kMacBytes], const std::string& key, const char* label,
         std::initializer_list<std::string_view> parts);

/// Constant-time comparison of two MACs.
bool same_mac(const uint8_t* a, const uint8_t* b);

/// `n` bytes at `p` as a string_view, for mac()'s parts.
inline std::string_view bytes_of(const void* p, size_t n) {
  return {static_cast<const char*>(p), n};
}

}  // namespace shoal::auth
