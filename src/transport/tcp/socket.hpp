// Socket helpers for the TCP transport: choosing the address to listen on, listening,
// connecting with back-off, and blocking I/O with a deadline for the handshake.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shoal::transport::tcp {

using Clock = std::chrono::steady_clock;

/// An IPv4 address of this host's interface `name`, with its netmask (network byte order).
struct InterfaceAddress {
  std::string name, ip;
  uint32_t address = 0, netmask = 0;
  bool same_subnet(uint32_t other) const { return (address & netmask) == (other & netmask); }
};

/// The addresses this rank uses for TCP, one per NIC ("rail"); the first is the primary, the
/// one it listens on and connects from as before multi-rail. SHOAL_SOCKET_IFNAME: every listed
/// interface that exists, in order. Otherwise the primary is 127.0.0.1 when every rank is on
/// this host, else the interface that routes to `store_host` (else the first non-loopback
/// interface that is up, else 127.0.0.1), followed, on several hosts, by the other up,
/// non-loopback interfaces; at most SHOAL_SOCKET_RAILS in all.
std::vector<InterfaceAddress> choose_rail_addresses(bool single_host,
                                                    const std::string& store_host);

/// Listening socket on ip:0 (non-blocking, CLOEXEC); returns fd and sets the chosen port.
/// "0.0.0.0" listens on every interface (several rails).
int listen_on(const std::string& ip, uint16_t& port);

/// Connects to ip:port, retrying with exponential back-off until `deadline`. Throws
/// TimeoutError naming `what` (e.g. "rank 3") on failure.
int connect_with_retry(const std::string& ip, uint16_t port, Clock::time_point deadline,
                       const std::string& what);

/// True when the other end of the connected TCP socket `fd` sent FIN or RST (TCP_INFO state).
bool peer_closed(int fd);
/// Closes `fd` after reading and dropping, until `deadline`, what the peer still sends, until it
/// closes too. For a socket whose write side was shut after an abort frame: closed with unread
/// data it would be reset, and a reset makes the peer drop the abort frame still in its receive
/// queue (it would blame a broken pipe instead of the cause).
void close_after_draining(int fd, std::chrono::steady_clock::time_point deadline);
/// How long a stream whose write side was shut drains before it closes.
inline constexpr std::chrono::milliseconds kDrainOnClose{300};

/// Round trips under this are a LAN's: one connection per rail and a fixed 4 MiB buffer fill
/// them, as every figure on links without delay was measured.
inline constexpr std::chrono::microseconds kLanRtt{2000};

/// The smoothed round-trip time the kernel holds for the connected TCP socket `fd` (right
/// after the handshake: its SYN's round trip); zero when unknown.
std::chrono::microseconds measured_rtt(int fd);

/// The congestion control `fd`'s data connections run: SHOAL_TCP_CC, else the socket's own
/// (the kernel's default); empty when unknown.
std::string data_congestion_control(int fd);

/// Connections per rail to a peer whose round trip is `rtt` (SHOAL_SOCKET_STREAMS): the
/// setting, or with auto 1 under kLanRtt, else 2 under BBR (`congestion_control` bbr*), else
/// one per 25 ms, 2 to 8.
int streams_for(std::chrono::microseconds rtt, std::string_view congestion_control = "");

/// SO_SNDBUF/SO_RCVBUF for a connection whose round trip is `rtt` (SHOAL_SOCKET_BUFFER): the
/// setting, or with auto 4 MiB under kLanRtt, else 0: the kernel's autotuning, which a fixed
/// buffer turns off (4 MiB caps a stream at 335 Mbit/s at 100 ms).
uint64_t socket_buffer_for(std::chrono::microseconds rtt);

/// TCP_NODELAY, SO_SNDBUF/SO_RCVBUF (socket_buffer_for the measured round trip), the congestion
/// control (SHOAL_TCP_CC; InvalidArgumentError naming what the kernel offers when it refuses it),
/// O_NONBLOCK.
void configure_data_socket(int fd);

/// Blocking-style full read/write on a possibly non-blocking fd, bounded by `deadline`.
/// Returns false on EOF/error/timeout (errno-like text in `error`).
bool write_all(int fd, const void* data, size_t len, Clock::time_point deadline,
               std::string& error);
bool read_all(int fd, void* data, size_t len, Clock::time_point deadline, std::string& error);

}  // namespace shoal::transport::tcp
