// Authentication of transport connections: with the job's shared secret (auth::job_key():
// SHOAL_AUTH_KEY or SHOAL_AUTH_KEY_FILE) both ends of every mesh connection prove that they know
// it, by an HMAC-SHA256 challenge-response (core/auth) over fresh nonces, before the acceptor takes
// the connection and before any frame is read. Nothing is encrypted: see docs/reliability.md.
//
//   connector -> acceptor   Hello (reserved has kHelloAuth), nonce_c (32 bytes)
//   acceptor  -> connector  nonce_a (32), HMAC(key, "shoal-acceptor" | hello | acceptor rank |
//   nonce_c | nonce_a) connector -> acceptor   HMAC(key, "shoal-connector" | hello | acceptor rank
//   | nonce_c | nonce_a)
// Distinct labels keep one side's answer from serving as the other's (reflection).
#pragma once

#include <string>

#include "core/auth.hpp"
#include "transport/frame.hpp"
#include "transport/tcp/socket.hpp"

namespace shoal::transport::tcp {

/// Hello::reserved bit: the connector authenticates (its nonce follows the Hello).
inline constexpr uint32_t kHelloAuth = 1;

/// Connector side, after writing `hello` (with kHelloAuth) to `fd` of rank `peer` at `where`.
/// Throws UnauthorizedError naming `peer` when the other end cannot prove it knows `key`,
/// PeerFailureError when it breaks off (it refused us: its log says why).
void authenticate_to(int fd, const Hello& hello, int peer, const std::string& where,
                     const std::string& key, Clock::time_point deadline);

/// Acceptor side (this is `rank`), after reading `hello` from `fd`: true when the connector
/// proved it knows `key`; otherwise false with the reason in `why`.
bool authenticate_from(int fd, const Hello& hello, int rank, const std::string& key,
                       Clock::time_point deadline, std::string& why);

}  // namespace shoal::transport::tcp
