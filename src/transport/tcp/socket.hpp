// Socket helpers for the TCP transport: choosing the address to listen on, listening,
// connecting with back-off, and blocking I/O with a deadline for the handshake.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace shoal::transport::tcp {

using Clock = std::chrono::steady_clock;

/// IPv4 address this rank listens on. Order: SHOAL_SOCKET_IFNAME (first listed interface
/// that exists), 127.0.0.1 when every rank is on this host, the interface that routes to
/// `store_host`, the first non-loopback interface that is up, 127.0.0.1.
std::string choose_listen_address(bool single_host, const std::string& store_host);

/// Listening socket on ip:0 (non-blocking, CLOEXEC); returns fd and sets the chosen port.
int listen_on(const std::string& ip, uint16_t& port);

/// Connects to ip:port, retrying with exponential back-off until `deadline`. Throws
/// TimeoutError naming `what` (e.g. "rank 3") on failure.
int connect_with_retry(const std::string& ip, uint16_t port, Clock::time_point deadline,
                       const std::string& what);

/// TCP_NODELAY, SO_SNDBUF/SO_RCVBUF (SHOAL_SOCKET_BUFFER), O_NONBLOCK.
void configure_data_socket(int fd);

/// Blocking-style full read/write on a possibly non-blocking fd, bounded by `deadline`.
/// Returns false on EOF/error/timeout (errno-like text in `error`).
bool write_all(int fd, const void* data, size_t len, Clock::time_point deadline, std::string& error);
bool read_all(int fd, void* data, size_t len, Clock::time_point deadline, std::string& error);

}  // namespace shoal::transport::tcp
