#include "transport/tcp/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "core/check.hpp"
#include "core/config.hpp"

namespace shoal::transport::tcp {

// Every up IPv4 interface address, in the kernel's order.
static std::vector<InterfaceAddress> interface_addresses() {
  std::vector<InterfaceAddress> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || (a->ifa_flags & IFF_UP) == 0) continue;
    InterfaceAddress ia;
    ia.name = a->ifa_name;
    ia.address = reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr;
    ia.netmask = a->ifa_netmask ? reinterpret_cast<sockaddr_in*>(a->ifa_netmask)->sin_addr.s_addr
                                : 0xffffffffu;
    if ((a->ifa_flags & IFF_LOOPBACK) != 0) ia.name = "lo";
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &ia.address, buf, sizeof buf);
    ia.ip = buf;
    out.push_back(ia);
  }
  freeifaddrs(list);
  return out;
}

static bool resolve_ipv4(const std::string& host, in_addr& out) {
  if (inet_pton(AF_INET, host.c_str(), &out) == 1) return true;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return false;
  out = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return true;
}

// The local address the kernel would use to reach `host` (a UDP connect sends nothing).
static std::string route_to(const std::string& host) {
  in_addr dst{};
  if (host.empty() || !resolve_ipv4(host, dst)) return {};
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {};
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(9);
  sa.sin_addr = dst;
  std::string found;
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
    sockaddr_in me{};
    socklen_t len = sizeof me;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0) {
      char buf[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &me.sin_addr, buf, sizeof buf);
      found = buf;
    }
  }
  close(fd);
  return found;
}

std::vector<InterfaceAddress> choose_rail_addresses(bool single_host,
                                                    const std::string& store_host) {
  const auto all = interface_addresses();
  const auto max_rails =
      static_cast<size_t>(std::max<int64_t>(1, config::get_int("SHOAL_SOCKET_RAILS")));
  std::vector<InterfaceAddress> rails;
  auto add = [&](const InterfaceAddress& a) {
    for (const auto& r : rails)
      if (r.address == a.address) return;
    if (rails.size() < max_rails) rails.push_back(a);
  };
  std::string ifnames = config::get("SHOAL_SOCKET_IFNAME");
  if (!ifnames.empty()) {
    std::stringstream ss(ifnames);
    std::string name;
    while (std::getline(ss, name, ','))
      for (const auto& a : all)
        if (a.name == name) add(a);
    SHOAL_CHECK(!rails.empty(), InvalidArgument,
                "SHOAL_SOCKET_IFNAME=" << ifnames
                                       << " names no interface with an IPv4 address on this host; "
                                          "list the interfaces with `ip -4 addr`");
    return rails;
  }
  InterfaceAddress loopback{"lo", "127.0.0.1", htonl(INADDR_LOOPBACK), htonl(0xff000000u)};
  if (single_host) return {loopback};
  std::string primary = route_to(store_host);
  for (const auto& a : all)
    if (a.ip == primary && a.name != "lo") add(a);
  for (const auto& a : all)
    if (a.name != "lo") add(a);
  if (rails.empty()) rails.push_back(loopback);
  return rails;
}

int listen_on(const std::string& ip, uint16_t& port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  SHOAL_CHECK(fd >= 0, Internal, "socket(): " << strerror(errno));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  if (inet_pton(AF_INET, ip.c_str(), &sa.sin_addr) != 1) {
    close(fd);
    SHOAL_THROW(InvalidArgument, "cannot listen on '" << ip << "': not an IPv4 address");
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(fd, 1024) != 0) {
    int e = errno;
    close(fd);
    SHOAL_THROW(Internal, "cannot listen on " << ip << ": " << strerror(e));
  }
  socklen_t len = sizeof sa;
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  port = ntohs(sa.sin_port);
  return fd;
}

int connect_with_retry(const std::string& ip, uint16_t port, Clock::time_point deadline,
                       const std::string& what) {
  in_addr addr{};
  SHOAL_CHECK(resolve_ipv4(ip, addr), InvalidArgument, "cannot resolve " << ip << " of " << what);
  auto backoff = std::chrono::milliseconds(10);
  const auto max_backoff = std::chrono::milliseconds(config::get_int("SHOAL_CONNECT_RETRY_MS"));
  std::string last;
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    SHOAL_CHECK(fd >= 0, Internal, "socket(): " << strerror(errno));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr = addr;
    if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) return fd;
    last = strerror(errno);
    close(fd);
    auto now = Clock::now();
    if (now >= deadline)
      SHOAL_THROW(Timeout, "could not connect to " << what << " at " << ip << ":" << port << " ("
                                                   << last << ") before the timeout; is it running "
                                                   << "and reachable? (SHOAL_TIMEOUT)");
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, max_backoff);
  }
}

namespace {
std::optional<tcp_info> tcp_info_of(int fd) {
  tcp_info info{};
  socklen_t len = sizeof info;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return std::nullopt;
  return info;
}

std::string available_congestion_controls() {
  std::ifstream in("/proc/sys/net/ipv4/tcp_available_congestion_control");
  std::string list;
  std::getline(in, list);
  return list.empty() ? "unknown" : list;
}
}  // namespace

std::chrono::microseconds measured_rtt(int fd) {
  const auto info = tcp_info_of(fd);
  return std::chrono::microseconds(info ? info->tcpi_rtt : 0);
}

std::string data_congestion_control(int fd) {
  const std::string set = config::get("SHOAL_TCP_CC");
  if (!set.empty()) return set;
  char name[32] = {};
  socklen_t len = sizeof name;
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "";
  return std::string(name, strnlen(name, std::min<size_t>(len, sizeof name)));
}

int streams_for(std::chrono::microseconds rtt, std::string_view congestion_control) {
  if (const auto set = config::get_int_or_auto("SHOAL_SOCKET_STREAMS")) {
    SHOAL_CHECK(*set >= 1 && *set <= 16, InvalidArgument,
                "SHOAL_SOCKET_STREAMS=" << *set << ": use 1 to 16 connections per rail, or auto");
    return static_cast<int>(*set);
  }
  if (rtt < kLanRtt) return 1;
  // BBR paces at the rate it measures: loss and the round trip do not bound one stream, while a
  // frame striped over more waits for each one's ramp (docs/cluster.md: 2 beat 4 and 8 at 80
  // and 200 ms). Two, so that one recovering a loss does not stall the pair.
  if (congestion_control.starts_with("bbr")) return 2;
  // A loss- or window-bound stream's goodput falls as 1/RTT: more of them keep a long path full.
  const auto per_25ms = (rtt.count() + 24999) / 25000;
  return static_cast<int>(std::clamp<int64_t>(per_25ms, 2, 8));
}

uint64_t socket_buffer_for(std::chrono::microseconds rtt) {
  if (const auto set = config::get_bytes_or_auto("SHOAL_SOCKET_BUFFER")) return *set;
  // Long paths keep the autotuning, which follows the window the path needs.
  return rtt < kLanRtt ? 4u << 20 : 0;
}

void configure_data_socket(int fd) {
  // Over long lossy paths the congestion control decides a stream's goodput (docs/cluster.md).
  const std::string cc = config::get("SHOAL_TCP_CC");
  if (!cc.empty() && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc.data(),
                                static_cast<socklen_t>(cc.size())) != 0)
    SHOAL_THROW(InvalidArgument,
                "SHOAL_TCP_CC=" << cc << ": the kernel refuses it (" << strerror(errno)
                                << "); this one offers: " << available_congestion_controls());
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const uint64_t buf = socket_buffer_for(measured_rtt(fd));
  if (buf > 0) {
    int b = static_cast<int>(std::min<uint64_t>(buf, 1u << 30));
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof b);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof b);
  }
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

static int ms_until(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms < 0 ? 0 : static_cast<int>(std::min<int64_t>(ms, 1000));
}

bool write_all(int fd, const void* data, size_t len, Clock::time_point deadline,
               std::string& error) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (Clock::now() >= deadline) {
        error = "timed out";
        return false;
      }
      pollfd pfd{fd, POLLOUT, 0};
      poll(&pfd, 1, ms_until(deadline));
      continue;
    }
    error = n == 0 ? "connection closed" : strerror(errno);
    return false;
  }
  return true;
}

bool read_all(int fd, void* data, size_t len, Clock::time_point deadline, std::string& error) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (Clock::now() >= deadline) {
        error = "timed out";
        return false;
      }
      pollfd pfd{fd, POLLIN, 0};
      poll(&pfd, 1, ms_until(deadline));
      continue;
    }
    error = n == 0 ? "connection closed by peer" : strerror(errno);
    return false;
  }
  return true;
}

void close_after_draining(int fd, std::chrono::steady_clock::time_point deadline) {
  char sink[65536];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break;  // closed, or reset
  }
  close(fd);
}

bool peer_closed(int fd) {
  const auto info = tcp_info_of(fd);
  if (!info) return false;
  switch (info->tcpi_state) {
    case TCP_CLOSE_WAIT:  // FIN received
    case TCP_LAST_ACK:
    case TCP_CLOSING:
    case TCP_TIME_WAIT:
    case TCP_CLOSE:  // reset
      return true;
    default:
      return false;
  }
}

}  // namespace shoal::transport::tcp
