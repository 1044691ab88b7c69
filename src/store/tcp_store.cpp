// TcpStore: client and server of the wire protocol of torch.distributed.TCPStore (torch 2.x),
// so shoal ranks can join the store torchrun's agent hosts and torch can use ours.
//
// The protocol, as torch 2.x speaks it (its classic and libuv servers alike; checked against the
// installed torch by tests/tools/test_store_torch_interop.sh). All integers are native-endian
// (little on every platform we build for), exactly as torch's tcputil::sendValue writes them:
//   request  = u8 query, then its arguments
//   string   = u64 length, bytes          (keys and values alike)
//   key list = u64 count, count strings
//   VALIDATE 0    u32 0x3C85F7CE            -> (no reply); a client's first request, a wrong
//                                              number closes it (torch 1.13 had no handshake)
//   SET 1         key, value                -> (no reply)
//   COMPARE_SET 2 key, expected, desired    -> value now stored (or `expected` if the key is
//                                              absent and `expected` non-empty, torch's quirk)
//   GET 3         key                       -> value; a missing key closes the connection, so
//                                              clients always WAIT first
//   ADD 4         key, i64 delta            -> i64 new value; stored as decimal text
//   CHECK 5       key list                  -> u8 0 READY / 1 NOT_READY
//   WAIT 6        key list                  -> u8 0 STOP_WAITING, once every key exists
//   GETNUMKEYS 7                            -> i64
//   DELETE_KEY 8  key                       -> i64 number deleted (0 or 1)
//   APPEND 9      key, value                -> (no reply); appends to the value (or sets it)
//   MULTI_GET 10  key list                  -> one value per key (missing key: as GET)
//   MULTI_SET 11  u64 count, count (key, value) pairs -> (no reply)
//   CANCEL_WAIT 12                          -> u8 1 WAIT_CANCELED (this client's waits dropped)
//   PING 13       u32 nonce                 -> u32 nonce (torch's client pings after VALIDATE)
// Torch's client puts "/" in front of every user key (its internal "init/" counter has none);
// ours does the same, so `set("k")` from shoal and `get("k")` from torch meet.
//
// With a secret (Options::auth_key, by default SHOAL_AUTH_KEY), a connection must first prove
// it knows it, with a query byte torch never sends; anything else first closes the client:
//   client -> server   u8 AUTH (0xA5), nonce_c (32 random bytes)
//   server -> client   nonce_s (32), HMAC(key, "shoal-store-server" | nonce_c | nonce_s)
//   client -> server   HMAC(key, "shoal-store-client" | nonce_c | nonce_s)
//   server -> client   u8 0 (admitted)
// Both sides check the other's MAC, so neither a stranger client nor a stranger server passes.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/auth.hpp"
#include "core/check.hpp"
#include "core/config.hpp"
#include "shoal/store.hpp"
#include "store/tcp_store_fuzz.hpp"

namespace shoal {
namespace {

using Clock = std::chrono::steady_clock;

enum class Query : uint8_t {
  Validate = 0,
  Set = 1,
  CompareSet = 2,
  Get = 3,
  Add = 4,
  Check = 5,
  Wait = 6,
  GetNumKeys = 7,
  DeleteKey = 8,
  Append = 9,
  MultiGet = 10,
  MultiSet = 11,
  CancelWait = 12,
  Ping = 13,
  Authenticate = 0xA5,  // shoal's, never torch's: see the top of this file
};
constexpr uint32_t kValidationMagic = 0x3C85F7CE;
constexpr uint8_t kAuthAdmitted = 0;
constexpr const char* kServerLabel = "shoal-store-server";
constexpr const char* kClientLabel = "shoal-store-client";
constexpr uint8_t kCheckReady = 0;
constexpr uint8_t kCheckNotReady = 1;
constexpr uint8_t kStopWaiting = 0;
constexpr uint8_t kWaitCanceled = 1;
constexpr const char* kKeyPrefix = "/";

// Bounds on what one request may announce; beyond them the request is garbage or hostile.
constexpr uint64_t kMaxKeyBytes = 64 << 10;
constexpr uint64_t kMaxKeysPerQuery = 1 << 20;

std::string errno_text(int err) { return std::strerror(err); }

std::string seconds_text(Milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

// A deadline that saturates instead of overflowing for huge timeouts.
Clock::time_point deadline_after(Milliseconds timeout) {
  if (timeout.count() < 0) timeout = Milliseconds(0);
  if (timeout > std::chrono::hours(24 * 365 * 100)) return Clock::time_point::max();
  return Clock::now() + timeout;
}

int ms_left(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;
  auto left = std::chrono::duration_cast<Milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<int64_t>(left + 1, 1 << 30));
}

std::string keys_text(const std::vector<std::string>& keys) {
  std::string out;
  const size_t shown = std::min<size_t>(keys.size(), 5);
  for (size_t i = 0; i < shown; ++i) out += (i ? ", '" : "'") + keys[i] + "'";
  if (keys.size() > shown) out += " and " + std::to_string(keys.size() - shown) + " more";
  return out;
}

bool parse_i64(const Bytes& text, int64_t& out) {
  const char* b = reinterpret_cast<const char*>(text.data());
  const char* e = b + text.size();
  auto r = std::from_chars(b, e, out);
  return r.ec == std::errc() && r.ptr == e && b != e;
}

// ---- encoding ----

class Writer {
 public:
  void u8(uint8_t v) { buf_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) { raw(&v, sizeof v); }
  void u64(uint64_t v) { raw(&v, sizeof v); }
  void i64(int64_t v) { raw(&v, sizeof v); }
  void str(std::string_view s) {
    u64(s.size());
    buf_.append(s);
  }
  void bytes(const Bytes& b) {
    u64(b.size());
    raw(b.data(), b.size());
  }
  std::string& buffer() { return buf_; }

 private:
  void raw(const void* p, size_t n) { buf_.append(static_cast<const char*>(p), n); }
  std::string buf_;
};

// Reads one request from a buffer that may hold only part of it.
class Reader {
 public:
  enum class Status { Ok, Incomplete, Bad };
  Reader(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  Status u8(uint8_t& v) {
    if (pos_ + 1 > n_) return Status::Incomplete;
    v = p_[pos_++];
    return Status::Ok;
  }
  Status u32(uint32_t& v) {
    if (pos_ + 4 > n_) return Status::Incomplete;
    std::memcpy(&v, p_ + pos_, 4);
    pos_ += 4;
    return Status::Ok;
  }
  Status u64(uint64_t& v) {
    if (pos_ + 8 > n_) return Status::Incomplete;
    std::memcpy(&v, p_ + pos_, 8);
    pos_ += 8;
    return Status::Ok;
  }
  Status i64(int64_t& v) {
    uint64_t u;
    if (Status s = u64(u); s != Status::Ok) return s;
    std::memcpy(&v, &u, 8);
    return Status::Ok;
  }
  // A length-prefixed string no longer than `limit`; records `why` when it is longer.
  Status str(std::string& out, uint64_t limit, std::string& why) {
    uint64_t len;
    if (Status s = u64(len); s != Status::Ok) return s;
    if (len > limit) {
      why = "announced a string of " + std::to_string(len) + " bytes (limit " +
            std::to_string(limit) + ")";
      return Status::Bad;
    }
    if (pos_ + len > n_) return Status::Incomplete;
    out.assign(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return Status::Ok;
  }
  Status raw(uint8_t* out, size_t n) {
    if (pos_ + n > n_) return Status::Incomplete;
    std::memcpy(out, p_ + pos_, n);
    pos_ += n;
    return Status::Ok;
  }
  Status bytes(Bytes& out, uint64_t limit, std::string& why) {
    uint64_t len;
    if (Status s = u64(len); s != Status::Ok) return s;
    if (len > limit) {
      why = "announced a value of " + std::to_string(len) + " bytes (limit " +
            std::to_string(limit) + ", SHOAL_STORE_MAX_VALUE)";
      return Status::Bad;
    }
    if (pos_ + len > n_) return Status::Incomplete;
    out.assign(p_ + pos_, p_ + pos_ + len);
    pos_ += len;
    return Status::Ok;
  }
  // A count of keys, at most kMaxKeysPerQuery.
  Status key_count(uint64_t& n, std::string& why) {
    if (Status s = u64(n); s != Status::Ok) return s;
    if (n > kMaxKeysPerQuery) {
      why = "announced " + std::to_string(n) + " keys (limit " + std::to_string(kMaxKeysPerQuery) +
            ")";
      return Status::Bad;
    }
    return Status::Ok;
  }
  // A key list: a count, then that many keys.
  Status key_list(std::vector<std::string>& keys, std::string& why) {
    uint64_t n;
    if (Status s = key_count(n, why); s != Status::Ok) return s;
    keys.resize(n);
    for (auto& k : keys)
      if (Status s = str(k, kMaxKeyBytes, why); s != Status::Ok) return s;
    return Status::Ok;
  }
  size_t consumed() const { return pos_; }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
};

#define SHOAL_READ(expr)                                                 \
  do {                                                                   \
    if (Reader::Status s_ = (expr); s_ != Reader::Status::Ok) return s_; \
  } while (0)

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
}

bool is_wildcard(const std::string& host) {
  return host.empty() || host == "*" || host == "0.0.0.0" || host == "::";
}

// ======================================================================================
// Server: one thread, epoll over the listening socket, a wake-up eventfd and every client.
// ======================================================================================

class Server {
 public:
  // `key`: the secret clients must prove they know before any request (empty: none).
  Server(const std::string& host, uint16_t port, std::string key);
  // Detached: no listening socket and no thread; the caller adds clients and dispatches their
  // events (tests/fuzz drives the request handling this way).
  struct Detached {};
  Server(Detached, std::string key);
  ~Server();
  uint64_t add_client(int fd, const std::string& peer);
  void dispatch(uint64_t id, uint32_t events);
  uint16_t port() const { return port_; }
  // Where the hosting process's own client connects.
  std::string local_address() const { return loopback_; }

 private:
  struct Wait {
    std::unordered_set<std::string> missing;
  };
  struct Client {
    int fd = -1;
    uint64_t id = 0;
    std::string peer;
    std::vector<uint8_t> in;
    size_t in_pos = 0;
    std::string out;
    size_t out_pos = 0;
    bool polling_out = false;
    std::vector<Wait> waits;
    bool validated = false;  // sent VALIDATE with torch's number
    enum class Auth : uint8_t { admitted, want_hello, want_proof };
    Auth auth = Auth::admitted;
    uint8_t nonce_c[auth::kNonceBytes] = {};
    uint8_t nonce_s[auth::kNonceBytes] = {};
  };

  void run();
  void accept_all();
  void on_readable(Client& c);
  void on_writable(Client& c);
  Reader::Status handle(Client& c, Reader& r, std::string& why);
  Reader::Status authenticate(Client& c, Reader& r, std::string& why);
  void reply(Client& c, const std::string& data);
  void flush(Client& c);
  void close_client(uint64_t id, const std::string& why, bool warn);
  void do_set(const std::string& key, Bytes value);
  void drop_waits(Client& c);

  int listen_fd_ = -1;
  int wake_fd_ = -1;
  int epoll_fd_ = -1;
  uint16_t port_ = 0;
  std::string loopback_ = "127.0.0.1";
  uint64_t max_value_;
  std::string key_;
  std::atomic<bool> stop_{false};
  std::thread thread_;

  uint64_t next_id_ = 2;  // 0: the listening socket, 1: the wake-up eventfd
  std::unordered_map<uint64_t, Client> clients_;
  std::unordered_map<std::string, Bytes> data_;
  std::unordered_map<std::string, std::unordered_set<uint64_t>> waiters_;
  std::vector<uint64_t> to_close_;
};

Server::Server(const std::string& host, uint16_t port, std::string key) : key_(std::move(key)) {
  max_value_ = config::get_bytes("SHOAL_STORE_MAX_VALUE");
  // torch binds every interface; so do we, unless the host is a numeric loopback address
  // (then only loopback clients could use the address anyway, and nothing is exposed).
  // Binding a host name instead would break on Debian, whose /etc/hosts maps the machine's
  // own name to 127.0.1.1.
  bool v6 = true;
  bool wildcard = false;
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
  in_addr a4{};
  in6_addr a6{};
  if (!is_wildcard(host) && inet_pton(AF_INET, host.c_str(), &a4) == 1 &&
      (ntohl(a4.s_addr) >> 24) == 127) {
    v6 = false;
    auto* sin = reinterpret_cast<sockaddr_in*>(&addr);
    sin->sin_family = AF_INET;
    sin->sin_addr = a4;
    sin->sin_port = htons(port);
    addr_len = sizeof *sin;
    loopback_ = host;
  } else if (!is_wildcard(host) && inet_pton(AF_INET6, host.c_str(), &a6) == 1 &&
             IN6_IS_ADDR_LOOPBACK(&a6)) {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&addr);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_addr = a6;
    sin6->sin6_port = htons(port);
    addr_len = sizeof *sin6;
    loopback_ = "::1";
  } else {
    wildcard = true;
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&addr);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_addr = in6addr_any;
    sin6->sin6_port = htons(port);
    addr_len = sizeof *sin6;
  }

  auto try_bind = [&](int family) -> int {
    int fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    int one = 1, zero = 0;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (family == AF_INET6 &&
        !IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr))
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);  // dual stack
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), addr_len) != 0 ||
        ::listen(fd, SOMAXCONN) != 0) {
      int err = errno;
      ::close(fd);
      return -err;
    }
    return fd;
  };
  int fd = try_bind(v6 ? AF_INET6 : AF_INET);
  if (wildcard && (fd == -EAFNOSUPPORT || fd == -EADDRNOTAVAIL)) {
    // No IPv6 on this machine: fall back to every IPv4 interface.
    addr = {};
    auto* sin = reinterpret_cast<sockaddr_in*>(&addr);
    sin->sin_family = AF_INET;
    sin->sin_addr.s_addr = htonl(INADDR_ANY);
    sin->sin_port = htons(port);
    addr_len = sizeof *sin;
    fd = try_bind(AF_INET);
  }
  if (fd < 0) {
    int err = -fd;
    SHOAL_CHECK(
        err != EADDRINUSE, InvalidArgument,
        "cannot host the TCP store on port "
            << port
            << ": the port is already in use (another job "
               "or a previous run that has not exited). Choose another port (MASTER_PORT, or the "
               "port of SHOAL_STORE_ADDR), or pass port 0 to pick a free one");
    SHOAL_THROW(Internal, "cannot host the TCP store on port " << port << ": " << errno_text(err));
  }
  listen_fd_ = fd;
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_len);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);

  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (wake_fd_ < 0 || epoll_fd_ < 0) {
    int err = errno;
    if (wake_fd_ >= 0) ::close(wake_fd_);
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    ::close(listen_fd_);
    SHOAL_THROW(Internal, "TCP store server: eventfd/epoll_create failed: " << errno_text(err));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.u64 = 1;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  thread_ = std::thread([this] { run(); });
  SHOAL_INFO("TCP store listening on port " << port_);
}

Server::~Server() {
  stop_.store(true);
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    ssize_t ignored = ::write(wake_fd_, &one, sizeof one);
    (void)ignored;
  }
  if (thread_.joinable()) thread_.join();
  for (auto& [id, c] : clients_) ::close(c.fd);
  clients_.clear();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  ::close(epoll_fd_);
}

Server::Server(Detached, std::string key) : key_(std::move(key)) {
  max_value_ = config::get_bytes("SHOAL_STORE_MAX_VALUE");
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  SHOAL_CHECK(epoll_fd_ >= 0, Internal,
              "TCP store server: epoll_create failed: " << errno_text(errno));
}

void Server::run() {
  std::vector<epoll_event> events(256);
  while (!stop_.load()) {
    int n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      SHOAL_WARN("TCP store server: epoll_wait failed: " << errno_text(errno) << "; retrying");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    for (int i = 0; i < n && !stop_.load(); ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == 0) {
        try {
          accept_all();
        } catch (const std::exception& e) {
          SHOAL_WARN("TCP store server: accepting a client failed: " << e.what());
        }
        continue;
      }
      if (id == 1) continue;  // woken to stop
      dispatch(id, events[i].events);
    }
  }
}

void Server::dispatch(uint64_t id, uint32_t events) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;  // closed earlier in this batch
  Client& c = it->second;
  try {
    if (events & EPOLLOUT) on_writable(c);
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(c);
  } catch (const std::exception& e) {
    // Nothing a client sends may bring the server down: drop that client only.
    to_close_.push_back(id);
    SHOAL_WARN("TCP store server: closing client " << c.peer << ": " << e.what());
  }
  for (uint64_t dead : to_close_) close_client(dead, "", false);
  to_close_.clear();
}

void Server::accept_all() {
  for (;;) {
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
        return;
      SHOAL_WARN(
          "TCP store server: accept failed: "
          << errno_text(errno)
          << (errno == EMFILE || errno == ENFILE ? " (raise the open-file limit, ulimit -n)" : ""));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    set_nodelay(fd);
    char host[INET6_ADDRSTRLEN] = "?";
    uint16_t port = 0;
    if (peer.ss_family == AF_INET6) {
      auto* s = reinterpret_cast<sockaddr_in6*>(&peer);
      inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof host);
      port = ntohs(s->sin6_port);
    } else if (peer.ss_family == AF_INET) {
      auto* s = reinterpret_cast<sockaddr_in*>(&peer);
      inet_ntop(AF_INET, &s->sin_addr, host, sizeof host);
      port = ntohs(s->sin_port);
    }
    add_client(fd, std::string(host) + ":" + std::to_string(port));
  }
}

uint64_t Server::add_client(int fd, const std::string& peer) {
  const uint64_t id = next_id_++;
  Client& c = clients_[id];
  c.fd = fd;
  c.id = id;
  c.peer = peer;
  c.auth = key_.empty() ? Client::Auth::admitted : Client::Auth::want_hello;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = id;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    SHOAL_WARN("TCP store server: epoll_ctl failed for " << c.peer << ": " << errno_text(errno));
    ::close(fd);
    clients_.erase(id);
    return 0;
  }
  SHOAL_TRACE("TCP store server: client " << c.peer << " connected");
  return id;
}

void Server::on_readable(Client& c) {
  constexpr size_t kChunk = 256 << 10;
  if (c.in_pos > 0 && c.in_pos == c.in.size()) {
    c.in.clear();
    c.in_pos = 0;
  }
  size_t old = c.in.size();
  c.in.resize(old + kChunk);
  ssize_t got = ::recv(c.fd, c.in.data() + old, kChunk, 0);
  if (got <= 0) {
    c.in.resize(old);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    const bool mid_request = c.in.size() > c.in_pos;
    close_client(c.id, got == 0 ? "closed the connection" : errno_text(errno), mid_request);
    return;
  }
  c.in.resize(old + static_cast<size_t>(got));

  const uint64_t id = c.id;
  while (c.in_pos < c.in.size()) {
    Reader r(c.in.data() + c.in_pos, c.in.size() - c.in_pos);
    std::string why;
    Reader::Status s = handle(c, r, why);
    if (s == Reader::Status::Incomplete) break;
    if (s == Reader::Status::Bad) {
      close_client(id, why, true);
      return;
    }
    c.in_pos += r.consumed();
    if (!clients_.count(id)) return;  // closed while replying
  }
  // Compact so a long-lived connection does not grow its buffer.
  if (c.in_pos > (1 << 20) || c.in_pos == c.in.size()) {
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(c.in_pos));
    c.in_pos = 0;
  }
}

// The server's side of the handshake at the top of this file; a request before it, or a proof
// that fails, closes the client with a warning naming its address.
Reader::Status Server::authenticate(Client& c, Reader& r, std::string& why) {
  using auth::bytes_of;
  if (c.auth == Client::Auth::want_hello) {
    uint8_t q;
    SHOAL_READ(r.u8(q));
    if (q != static_cast<uint8_t>(Query::Authenticate)) {
      why = "it sent request " + std::to_string(q) +
            " without authenticating: SHOAL_AUTH_KEY is set, so every store client must prove it "
            "knows "
            "it (torch's TCPStore cannot; SHOAL_STORE_AUTH=0 opens the store to it, "
            "docs/reliability.md)";
      return Reader::Status::Bad;
    }
    SHOAL_READ(r.raw(c.nonce_c, auth::kNonceBytes));
    uint8_t out[auth::kNonceBytes + auth::kMacBytes];
    auth::random_nonce(c.nonce_s);
    std::memcpy(out, c.nonce_s, auth::kNonceBytes);
    auth::mac(out + auth::kNonceBytes, key_, kServerLabel,
              {bytes_of(c.nonce_c, auth::kNonceBytes), bytes_of(c.nonce_s, auth::kNonceBytes)});
    c.auth = Client::Auth::want_proof;
    reply(c, std::string(reinterpret_cast<const char*>(out), sizeof out));
    return Reader::Status::Ok;
  }
  uint8_t proof[auth::kMacBytes], expected[auth::kMacBytes];
  SHOAL_READ(r.raw(proof, sizeof proof));
  auth::mac(expected, key_, kClientLabel,
            {bytes_of(c.nonce_c, auth::kNonceBytes), bytes_of(c.nonce_s, auth::kNonceBytes)});
  if (!auth::same_mac(proof, expected)) {
    why = "it did not prove it knows SHOAL_AUTH_KEY (a stranger, or a process with another key)";
    return Reader::Status::Bad;
  }
  c.auth = Client::Auth::admitted;
  reply(c, std::string(1, static_cast<char>(kAuthAdmitted)));
  return Reader::Status::Ok;
}

Reader::Status Server::handle(Client& c, Reader& r, std::string& why) {
  if (c.auth != Client::Auth::admitted) return authenticate(c, r, why);
  uint8_t q;
  SHOAL_READ(r.u8(q));
  if (!c.validated && q != static_cast<uint8_t>(Query::Validate) &&
      q != static_cast<uint8_t>(Query::Authenticate)) {
    why = "its first request (" + std::to_string(q) +
          ") is not VALIDATE: not a torch 2.x TCPStore client (torch 1.13's protocol has no "
          "handshake and is "
          "not spoken here)";
    return Reader::Status::Bad;
  }
  switch (static_cast<Query>(q)) {
    case Query::Validate: {
      uint32_t magic;
      SHOAL_READ(r.u32(magic));
      if (magic != kValidationMagic) {
        why = "it sent VALIDATE with " + std::to_string(magic) +
              " instead of torch's number (not a TCPStore client)";
        return Reader::Status::Bad;
      }
      c.validated = true;
      return Reader::Status::Ok;
    }
    case Query::Ping: {
      uint32_t nonce;
      SHOAL_READ(r.u32(nonce));
      Writer w;
      w.u32(nonce);
      reply(c, w.buffer());
      return Reader::Status::Ok;
    }
    case Query::Append: {
      std::string key;
      Bytes value;
      SHOAL_READ(r.str(key, kMaxKeyBytes, why));
      SHOAL_READ(r.bytes(value, max_value_, why));
      auto it = data_.find(key);
      if (it != data_.end()) {
        if (it->second.size() + value.size() > max_value_) {
          why = "APPEND to key '" + key + "' would pass " + std::to_string(max_value_) +
                " bytes (SHOAL_STORE_MAX_VALUE)";
          return Reader::Status::Bad;
        }
        Bytes joined = it->second;
        joined.insert(joined.end(), value.begin(), value.end());
        value = std::move(joined);
      }
      do_set(key, std::move(value));
      return Reader::Status::Ok;
    }
    case Query::MultiSet: {
      uint64_t n;
      SHOAL_READ(r.key_count(n, why));
      std::vector<std::pair<std::string, Bytes>> kv(n);
      for (auto& [k, v] : kv) {
        SHOAL_READ(r.str(k, kMaxKeyBytes, why));
        SHOAL_READ(r.bytes(v, max_value_, why));
      }
      for (auto& [k, v] : kv) do_set(k, std::move(v));
      return Reader::Status::Ok;
    }
    case Query::MultiGet: {
      std::vector<std::string> keys;
      SHOAL_READ(r.key_list(keys, why));
      Writer w;
      for (const auto& k : keys) {
        auto it = data_.find(k);
        if (it == data_.end()) {
          why = "MULTI_GET of missing key '" + k +
                "' (clients must WAIT first; torch closes the connection too)";
          return Reader::Status::Bad;
        }
        w.bytes(it->second);
      }
      reply(c, w.buffer());
      return Reader::Status::Ok;
    }
    case Query::CancelWait: {
      drop_waits(c);
      reply(c, std::string(1, static_cast<char>(kWaitCanceled)));
      return Reader::Status::Ok;
    }
    case Query::Set: {
      std::string key;
      Bytes value;
      SHOAL_READ(r.str(key, kMaxKeyBytes, why));
      SHOAL_READ(r.bytes(value, max_value_, why));
      do_set(key, std::move(value));
      return Reader::Status::Ok;
    }
    case Query::CompareSet: {
      std::string key;
      Bytes expected, desired;
      SHOAL_READ(r.str(key, kMaxKeyBytes, why));
      SHOAL_READ(r.bytes(expected, max_value_, why));
      SHOAL_READ(r.bytes(desired, max_value_, why));
      Writer w;
      auto it = data_.find(key);
      if (it == data_.end()) {
        if (expected.empty()) {
          w.bytes(desired);
          do_set(key, std::move(desired));
        } else {
          w.bytes(expected);  // torch 1.13 answers this way for an absent key
        }
      } else if (it->second == expected) {
        w.bytes(desired);
        do_set(key, std::move(desired));
      } else {
        w.bytes(it->second);
      }
      reply(c, w.buffer());
      return Reader::Status::Ok;
    }
    case Query::Get: {
      std::string key;
      SHOAL_READ(r.str(key, kMaxKeyBytes, why));
      auto it = data_.find(key);
      if (it == data_.end()) {
        why = "GET of missing key '" + key +
              "' (clients must WAIT first; torch closes the connection too)";
        return Reader::Status::Bad;
      }
      Writer w;
      w.bytes(it->second);
      reply(c, w.buffer());
      return Reader::Status::Ok;
    }
    case Query::Add: {
      std::string key;
      int64_t delta;
      SHOAL_READ(r.str(key, kMaxKeyBytes, why));
      SHOAL_READ(r.i64(delta));
      int64_t value = 0;
      auto it = data_.find(key);
      if (it != data_.end() && !parse_i64(it->second, value)) {
        why = "ADD to key '" + key + "' whose value is not an integer";
        return Reader::Status::Bad;
      }
      value = static_cast<int64_t>(static_cast<uint64_t>(value) + static_cast<uint64_t>(delta));
      Writer w;
      w.i64(value);
      reply(c, w.buffer());
      std::string text = std::to_string(value);
      do_set(key, Bytes(text.begin(), text.end()));
      return Reader::Status::Ok;
    }
    case Query::Check:
    case Query::Wait: {
      std::vector<std::string> keys;
      SHOAL_READ(r.key_list(keys, why));
      Wait wait;
      for (auto& k : keys)
        if (!data_.count(k)) wait.missing.insert(std::move(k));
      if (static_cast<Query>(q) == Query::Check) {
        reply(c, std::string(
                     1, static_cast<char>(wait.missing.empty() ? kCheckReady : kCheckNotReady)));
      } else if (wait.missing.empty()) {
        reply(c, std::string(1, static_cast<char>(kStopWaiting)));
      } else {
        for (const auto& k : wait.missing) waiters_[k].insert(c.id);
        c.waits.push_back(std::move(wait));
      }
      return Reader::Status::Ok;
    }
    case Query::GetNumKeys: {
      Writer w;
      w.i64(static_cast<int64_t>(data_.size()));
      reply(c, w.buffer());
      return Reader::Status::Ok;
    }
    case Query::DeleteKey: {
      std::string key;
      SHOAL_READ(r.str(key, kMaxKeyBytes, why));
      auto it = data_.find(key);
      int64_t deleted = 0;
      if (it != data_.end()) {
        data_.erase(it);
        deleted = 1;
      }
      Writer w;
      w.i64(deleted);
      reply(c, w.buffer());
      return Reader::Status::Ok;
    }
    case Query::Authenticate:
      why =
          "it asked to authenticate, but this store has no secret (SHOAL_AUTH_KEY must be the same "
          "on "
          "every process of the job, or unset on all; SHOAL_STORE_AUTH=0 on this one opens its "
          "store)";
      return Reader::Status::Bad;
  }
  why = "unknown query type " + std::to_string(q) + " (not a torch 2.x TCPStore client?)";
  return Reader::Status::Bad;
}

void Server::do_set(const std::string& key, Bytes value) {
  data_[key] = std::move(value);
  // Wake every waiter whose last missing key this was.
  if (auto w = waiters_.find(key); w != waiters_.end()) {
    std::unordered_set<uint64_t> ids = std::move(w->second);
    waiters_.erase(w);
    for (uint64_t id : ids) {
      auto cit = clients_.find(id);
      if (cit == clients_.end()) continue;
      Client& c = cit->second;
      for (auto wit = c.waits.begin(); wit != c.waits.end();) {
        if (wit->missing.erase(key) && wit->missing.empty()) {
          reply(c, std::string(1, static_cast<char>(kStopWaiting)));
          wit = c.waits.erase(wit);
        } else {
          ++wit;
        }
      }
    }
  }
}

void Server::drop_waits(Client& c) {
  for (const auto& w : c.waits)
    for (const auto& k : w.missing)
      if (auto wit = waiters_.find(k); wit != waiters_.end()) {
        wit->second.erase(c.id);
        if (wit->second.empty()) waiters_.erase(wit);
      }
  c.waits.clear();
}

void Server::reply(Client& c, const std::string& data) {
  if (c.out_pos > 0 && c.out_pos == c.out.size()) {
    c.out.clear();
    c.out_pos = 0;
  }
  c.out += data;
  flush(c);
}

void Server::flush(Client& c) {
  while (c.out_pos < c.out.size()) {
    ssize_t sent = ::send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos,
                          MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      to_close_.push_back(c.id);  // closed after the current request, by run()
      return;
    }
    c.out_pos += static_cast<size_t>(sent);
  }
  const bool pending = c.out_pos < c.out.size();
  if (pending && c.out.size() - c.out_pos > 4 * max_value_ + (64 << 20)) {
    SHOAL_WARN("TCP store server: client " << c.peer << " does not read its replies; closing it");
    to_close_.push_back(c.id);
    return;
  }
  if (pending != c.polling_out) {
    epoll_event ev{};
    ev.events = EPOLLIN | (pending ? uint32_t{EPOLLOUT} : 0u);
    ev.data.u64 = c.id;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
    c.polling_out = pending;
  }
  if (!pending) {
    c.out.clear();
    c.out_pos = 0;
  }
}

void Server::on_writable(Client& c) { flush(c); }

void Server::close_client(uint64_t id, const std::string& why, bool warn) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  Client& c = it->second;
  if (warn)
    SHOAL_WARN("TCP store server: closing client " << c.peer << ": " << why);
  else if (!why.empty())
    SHOAL_TRACE("TCP store server: client " << c.peer << " " << why);
  drop_waits(c);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
  ::close(c.fd);
  clients_.erase(it);
}

}  // namespace

namespace store_fuzz {

void serve_requests(const uint8_t* data, size_t size) {
  // Input: chunks. A chunk's first byte b picks the client (b & 1), whether the client reads
  // its replies (b & 2), whether it then closes (b & 4); the next byte is the chunk's length.
  // The first chunk's b & 8: the server has a secret, so clients must authenticate first (the
  // input cannot answer a random challenge: it exercises the refusals).
  Server server{Server::Detached{}, size > 0 && (data[0] & 8) ? "fuzz-secret" : ""};
  int ends[2] = {-1, -1};  // the clients' sides of the socket pairs
  uint64_t ids[2] = {0, 0};
  char sink[4096];
  auto open_client = [&](int who) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) return false;
    ends[who] = sv[1];
    ids[who] = server.add_client(sv[0], "fuzz-client-" + std::to_string(who));
    return true;
  };
  size_t i = 0;
  while (i + 2 <= size) {
    const uint8_t b = data[i];
    const size_t len = std::min<size_t>(data[i + 1], size - i - 2);
    const int who = b & 1;
    i += 2;
    if (ends[who] < 0 && !open_client(who)) break;
    for (size_t off = 0; off < len;) {
      ssize_t n = ::send(ends[who], data + i + off, len - off, MSG_NOSIGNAL);
      if (n <= 0) break;  // the server closed this client
      off += static_cast<size_t>(n);
      server.dispatch(ids[who], EPOLLIN);
    }
    i += len;
    if (b & 2) {
      while (::recv(ends[who], sink, sizeof sink, 0) > 0) {
      }
      server.dispatch(ids[who], EPOLLOUT);
    }
    if (b & 4) {
      ::shutdown(ends[who], SHUT_WR);
      server.dispatch(ids[who], EPOLLIN);
      ::close(ends[who]);
      ends[who] = -1;
    }
  }
  // The rest as one client's last bytes.
  if (i < size && (ends[0] >= 0 || open_client(0))) {
    if (::send(ends[0], data + i, size - i, MSG_NOSIGNAL) > 0) server.dispatch(ids[0], EPOLLIN);
  }
  for (int fd : ends)
    if (fd >= 0) ::close(fd);
}

}  // namespace store_fuzz

// ======================================================================================
// Client
// ======================================================================================

struct TcpStore::Impl {
  std::string host;          // as given (for messages)
  std::string connect_host;  // where the client connects
  uint16_t port = 0;
  Options options;
  std::string key;  // the secret this client proves it knows (empty: none)
  std::unique_ptr<Server> server;

  std::mutex mu;
  int fd = -1;
  bool lost = false;  // the connection broke (not by our own timeout): reconnect only once, quickly

  std::string address() const {
    return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
           std::to_string(port);
  }

  void disconnect() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }

  // One connection attempt to every address of the host; returns the fd or -1 with `why`.
  int try_connect(Clock::time_point deadline, std::string& why) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const std::string service = std::to_string(port);
    int rc = ::getaddrinfo(connect_host.c_str(), service.c_str(), &hints, &res);
    if (rc != 0) {
      why = "cannot resolve '" + connect_host + "': " + gai_strerror(rc);
      return -1;
    }
    int result = -1;
    for (addrinfo* ai = res; ai && result < 0; ai = ai->ai_next) {
      int s =
          ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
      if (s < 0) {
        why = errno_text(errno);
        continue;
      }
      if (::connect(s, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
        why = errno_text(errno);
        ::close(s);
        continue;
      }
      pollfd p{s, POLLOUT, 0};
      int left = ms_left(deadline);
      int pr = ::poll(&p, 1, left < 0 ? 10000 : std::min(left, 10000));
      int err = 0;
      socklen_t len = sizeof err;
      if (pr <= 0) {
        why = pr == 0 ? "connection attempt timed out" : errno_text(errno);
        ::close(s);
        continue;
      }
      ::getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        why = errno_text(err);
        ::close(s);
        continue;
      }
      // Blocking from here on; every wait goes through poll() with the call's deadline.
      ::fcntl(s, F_SETFL, ::fcntl(s, F_GETFL) & ~O_NONBLOCK);
      set_nodelay(s);
      result = s;
    }
    ::freeaddrinfo(res);
    return result;
  }

  // Connects, retrying with capped exponential back-off (and jitter) until `deadline`.
  void connect(Clock::time_point deadline, Milliseconds budget) {
    const auto cap = Milliseconds(std::max<int64_t>(10, config::get_int("SHOAL_CONNECT_RETRY_MS")));
    Milliseconds backoff(10);
    std::minstd_rand rng(std::random_device{}());
    std::string why;
    for (;;) {
      fd = try_connect(deadline, why);
      if (fd >= 0) {
        lost = false;
        authenticate(deadline);
        validate(deadline);
        return;
      }
      int left = ms_left(deadline);
      if (left == 0) break;
      auto sleep = backoff + Milliseconds(rng() % (backoff.count() / 4 + 1));
      if (left > 0) sleep = std::min(sleep, Milliseconds(left));
      std::this_thread::sleep_for(sleep);
      backoff = std::min(backoff * 2, cap);
    }
    SHOAL_THROW(Timeout,
                "could not connect to the TCP store at "
                    << address() << " within " << seconds_text(budget) << " (last error: " << why
                    << "). Check that rank 0 (or the launcher's agent that hosts the "
                    << "store) is running, that MASTER_ADDR/MASTER_PORT (or SHOAL_STORE_ADDR) are "
                       "the same on every "
                    << "rank and reachable from this host, and that no firewall blocks the port");
  }

  // The client's side of the handshake at the top of this file, on a fresh connection: throws
  // UnauthorizedError when the store refuses this process or cannot prove it knows the key.
  void authenticate(Clock::time_point deadline) {
    if (key.empty()) return;
    using auth::bytes_of;
    constexpr size_t N = auth::kNonceBytes, M = auth::kMacBytes;
    deadline = std::min(deadline, deadline_after(Milliseconds(10000)));
    const std::vector<std::string> keys{"(the authentication)"};
    uint8_t hello[1 + N], reply[N + M], expected[M], proof[M], admitted = 0xff;
    hello[0] = static_cast<uint8_t>(Query::Authenticate);
    auth::random_nonce(hello + 1);
    const uint8_t* nonce_c = hello + 1;
    const uint8_t* nonce_s = reply;
    auto refused = [&](const char* when) {
      disconnect();
      lost = false;
      SHOAL_THROW(Unauthorized, "the TCP store at "
                                    << address() << " " << when
                                    << ": its SHOAL_AUTH_KEY differs from this process's or it has "
                                       "none (torch's TCPStore, "
                                       "e.g. torchrun's agent store, cannot authenticate: set "
                                       "SHOAL_STORE_AUTH=0 on every "
                                       "process to use it openly); the store's log says why");
    };
    try {
      send_all(std::string(reinterpret_cast<const char*>(hello), sizeof hello), deadline,
               "authenticate", keys, Milliseconds(10000));
      recv_exact(reply, sizeof reply, deadline, "authenticate", keys, Milliseconds(10000));
    } catch (const PeerFailureError&) {
      refused("closed the connection when this process asked to authenticate");
    } catch (const TimeoutError&) {
      refused("did not answer this process's authentication within 10 s");
    }
    auth::mac(expected, key, kServerLabel, {bytes_of(nonce_c, N), bytes_of(nonce_s, N)});
    if (!auth::same_mac(expected, reply + N)) {
      disconnect();
      SHOAL_THROW(Unauthorized, "the process at "
                                    << address()
                                    << " (the TCP store's address) did not prove it knows "
                                       "SHOAL_AUTH_KEY: a stranger, or a store with another key");
    }
    auth::mac(proof, key, kClientLabel, {bytes_of(nonce_c, N), bytes_of(nonce_s, N)});
    try {
      send_all(std::string(reinterpret_cast<const char*>(proof), sizeof proof), deadline,
               "authenticate", keys, Milliseconds(10000));
      recv_exact(&admitted, 1, deadline, "authenticate", keys, Milliseconds(10000));
    } catch (const PeerFailureError&) {
      refused("refused this process's proof");
    } catch (const TimeoutError&) {
      refused("did not admit this process within 10 s");
    }
    if (admitted != kAuthAdmitted) refused("answered the authentication with garbage");
  }

  // torch 2.x's opening on a fresh connection: VALIDATE with its number, then a PING whose
  // echo proves the server speaks this protocol (torch 1.13's server closes or stays silent).
  void validate(Clock::time_point deadline) {
    deadline = std::min(deadline, deadline_after(Milliseconds(10000)));
    const std::vector<std::string> keys{"(the opening handshake)"};
    const uint32_t nonce = static_cast<uint32_t>(std::random_device{}());
    Writer w;
    w.u8(static_cast<uint8_t>(Query::Validate));
    w.u32(kValidationMagic);
    w.u8(static_cast<uint8_t>(Query::Ping));
    w.u32(nonce);
    uint32_t echo = 0;
    auto not_torch2 = [&](const char* what) {
      disconnect();
      lost = false;
      SHOAL_THROW(PeerFailure, "the TCP store at "
                                   << address() << " " << what
                                   << ": it does not speak torch 2.x's TCPStore protocol (a torch "
                                      "1.13 store, or not a store at all)");
    };
    try {
      send_all(w.buffer(), deadline, "validate", keys, Milliseconds(10000));
      recv_exact(reinterpret_cast<uint8_t*>(&echo), sizeof echo, deadline, "validate", keys,
                 Milliseconds(10000));
    } catch (const PeerFailureError&) {
      not_torch2("closed the connection at the opening handshake");
    } catch (const TimeoutError&) {
      not_torch2("did not answer the opening handshake within 10 s");
    }
    if (echo != nonce) not_torch2("answered the opening PING with another number");
  }

  void ensure_connected(Clock::time_point op_deadline, const char* op,
                        const std::vector<std::string>& keys) {
    if (fd >= 0) return;
    if (lost) {
      // The store went away under us: one quick attempt, then report the failure.
      std::string why;
      const auto quick = std::min(op_deadline, deadline_after(Milliseconds(1000)));
      fd = try_connect(quick, why);
      if (fd < 0)
        SHOAL_THROW(PeerFailure,
                    "the TCP store at "
                        << address() << " is gone (" << why << ") during " << op << " of "
                        << keys_text(keys)
                        << ": the process hosting it (rank 0, or the launcher's agent) "
                        << "has probably exited or crashed; check its log");
      lost = false;
      authenticate(quick);
      validate(quick);
      return;
    }
    const auto budget = options.connect_timeout;
    connect(std::min(op_deadline, deadline_after(budget)), budget);
  }

  [[noreturn]] void fail_lost(const char* op, const std::vector<std::string>& keys,
                              const std::string& why) {
    disconnect();
    lost = true;
    SHOAL_THROW(PeerFailure,
                "lost the connection to the TCP store at "
                    << address() << " during " << op << " of " << keys_text(keys) << " (" << why
                    << "): the process hosting the store (rank 0, or the "
                    << "launcher's agent) has probably exited or crashed; check its log");
  }

  [[noreturn]] void fail_timeout(const char* op, const std::vector<std::string>& keys,
                                 Milliseconds timeout) {
    // The connection may still carry a late reply: drop it so the next call starts clean
    // (the server forgets this client's pending waits when it goes).
    disconnect();
    if (std::strcmp(op, "wait") == 0 || std::strcmp(op, "get") == 0)
      SHOAL_THROW(Timeout, "store " << op << " timed out after " << seconds_text(timeout)
                                    << " waiting for key(s) " << keys_text(keys)
                                    << " on the TCP store at " << address()
                                    << ": no process has set them. "
                                    << "Check that every rank reached this point and runs the same "
                                       "program (a rank that crashed, "
                                    << "hangs or took another path never sets its keys); if ranks "
                                       "start slowly, raise SHOAL_TIMEOUT");
    SHOAL_THROW(
        Timeout,
        "store "
            << op << " of " << keys_text(keys) << " got no reply from the TCP store at "
            << address() << " within " << seconds_text(timeout)
            << ": the process hosting the store "
            << "(rank 0, or the launcher's agent) is hung or overloaded; check that it is alive");
  }

  void send_all(const std::string& data, Clock::time_point deadline, const char* op,
                const std::vector<std::string>& keys, Milliseconds timeout) {
    size_t off = 0;
    while (off < data.size()) {
      pollfd p{fd, POLLOUT, 0};
      int pr = ::poll(&p, 1, ms_left(deadline));
      if (pr < 0 && errno == EINTR) continue;
      if (pr == 0) fail_timeout(op, keys, timeout);
      ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
        fail_lost(op, keys, errno_text(errno));
      }
      off += static_cast<size_t>(n);
    }
  }

  void recv_exact(void* out, size_t size, Clock::time_point deadline, const char* op,
                  const std::vector<std::string>& keys, Milliseconds timeout) {
    auto* p8 = static_cast<uint8_t*>(out);
    size_t off = 0;
    while (off < size) {
      pollfd p{fd, POLLIN, 0};
      int pr = ::poll(&p, 1, ms_left(deadline));
      if (pr < 0 && errno == EINTR) continue;
      if (pr == 0) fail_timeout(op, keys, timeout);
      ssize_t n = ::recv(fd, p8 + off, size - off, MSG_DONTWAIT);
      if (n == 0) fail_lost(op, keys, "the store closed the connection");
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
        fail_lost(op, keys, errno_text(errno));
      }
      off += static_cast<size_t>(n);
    }
  }

  template <class T>
  T recv_value(Clock::time_point deadline, const char* op, const std::vector<std::string>& keys,
               Milliseconds timeout) {
    T v;
    recv_exact(&v, sizeof v, deadline, op, keys, timeout);
    return v;
  }

  Bytes recv_bytes(Clock::time_point deadline, const char* op, const std::vector<std::string>& keys,
                   Milliseconds timeout) {
    uint64_t n = recv_value<uint64_t>(deadline, op, keys, timeout);
    if (n > (uint64_t{1} << 40))
      fail_lost(op, keys, "the store sent a reply of " + std::to_string(n) + " bytes");
    Bytes b(n);
    if (n) recv_exact(b.data(), n, deadline, op, keys, timeout);
    return b;
  }

  // WAIT on already prefixed keys; the caller holds the mutex and has connected.
  void do_wait(const std::vector<std::string>& wire_keys, const std::vector<std::string>& keys,
               Clock::time_point deadline, Milliseconds timeout, const char* op) {
    Writer w;
    w.u8(static_cast<uint8_t>(Query::Wait));
    w.u64(wire_keys.size());
    for (const auto& k : wire_keys) w.str(k);
    send_all(w.buffer(), deadline, op, keys, timeout);
    uint8_t r = recv_value<uint8_t>(deadline, op, keys, timeout);
    if (r != kStopWaiting)
      fail_lost(op, keys, "unexpected reply " + std::to_string(r) + " to WAIT");
  }
};

TcpStore::TcpStore(const std::string& host, uint16_t port, Options options)
    : impl_(std::make_unique<Impl>()) {
  timeout_ = options.timeout;
  impl_->host = host;
  impl_->connect_host = host;
  impl_->port = port;
  impl_->options = options;
  if (options.auth_key) {
    impl_->key = *options.auth_key;
  } else if (config::get_int("SHOAL_STORE_AUTH") != 0) {
    impl_->key = auth::job_key(false);
  } else if (!auth::job_key(false).empty()) {
    static std::once_flag warned;
    std::call_once(warned, [] {
      SHOAL_WARN(
          "SHOAL_STORE_AUTH=0: the TCP store is open to any process that reaches its port although "
          "SHOAL_AUTH_KEY is set (the mesh connections still authenticate; docs/reliability.md)");
    });
  }
  if (options.is_server) {
    impl_->server = std::make_unique<Server>(host, port, impl_->key);
    impl_->port = impl_->server->port();
    impl_->connect_host = impl_->server->local_address();
  } else {
    SHOAL_CHECK(
        !is_wildcard(host), InvalidArgument,
        "TCP store client: '"
            << host
            << "' is not an address to connect to; give the host name or "
               "address of the machine that hosts the store (MASTER_ADDR or SHOAL_STORE_ADDR)");
    SHOAL_CHECK(port != 0, InvalidArgument,
                "TCP store client: port 0 is not a port to connect to; give the store's port "
                "(MASTER_PORT or "
                "SHOAL_STORE_ADDR=host:port)");
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->connect(deadline_after(options.connect_timeout), options.connect_timeout);
}

TcpStore::~TcpStore() {
  impl_->disconnect();
  impl_->server.reset();  // stops and joins the server thread, closes its sockets
}

uint16_t TcpStore::port() const { return impl_->port; }

std::shared_ptr<TcpStore> TcpStore::another_client() const {
  Options client = impl_->options;
  client.is_server = false;
  client.auth_key = impl_->key;
  client.timeout = timeout_;
  client.connect_timeout = timeout_;
  return std::make_shared<TcpStore>(impl_->connect_host, impl_->port, client);
}

namespace {
/// The keys as the wire carries them (torch's client prefix on each).
std::vector<std::string> wire_keys(const std::vector<std::string>& keys) {
  std::vector<std::string> wire;
  wire.reserve(keys.size());
  for (const auto& k : keys) wire.push_back(kKeyPrefix + k);
  return wire;
}
}  // namespace
std::string TcpStore::host() const { return impl_->host; }

void TcpStore::set(const std::string& key, const Bytes& value) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const auto deadline = deadline_after(timeout_);
  const std::vector<std::string> keys{key};
  impl_->ensure_connected(deadline, "set", keys);
  Writer w;
  w.u8(static_cast<uint8_t>(Query::Set));
  w.str(kKeyPrefix + key);
  w.bytes(value);
  impl_->send_all(w.buffer(), deadline, "set", keys, timeout_);
}

Bytes TcpStore::get(const std::string& key) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const auto deadline = deadline_after(timeout_);
  const std::vector<std::string> keys{key};
  const std::string wire = kKeyPrefix + key;
  impl_->ensure_connected(deadline, "get", keys);
  impl_->do_wait({wire}, keys, deadline, timeout_, "get");
  Writer w;
  w.u8(static_cast<uint8_t>(Query::Get));
  w.str(wire);
  impl_->send_all(w.buffer(), deadline, "get", keys, timeout_);
  return impl_->recv_bytes(deadline, "get", keys, timeout_);
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const auto deadline = deadline_after(timeout_);
  const std::vector<std::string> keys{key};
  impl_->ensure_connected(deadline, "add", keys);
  Writer w;
  w.u8(static_cast<uint8_t>(Query::Add));
  w.str(kKeyPrefix + key);
  w.i64(delta);
  impl_->send_all(w.buffer(), deadline, "add", keys, timeout_);
  return impl_->recv_value<int64_t>(deadline, "add", keys, timeout_);
}

void TcpStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const auto deadline = deadline_after(timeout);
  const std::vector<std::string> wire = wire_keys(keys);
  impl_->ensure_connected(deadline, "wait", keys);
  impl_->do_wait(wire, keys, deadline, timeout, "wait");
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const auto deadline = deadline_after(timeout_);
  impl_->ensure_connected(deadline, "check", keys);
  Writer w;
  w.u8(static_cast<uint8_t>(Query::Check));
  w.u64(keys.size());
  for (const auto& k : keys) w.str(kKeyPrefix + k);
  impl_->send_all(w.buffer(), deadline, "check", keys, timeout_);
  uint8_t r = impl_->recv_value<uint8_t>(deadline, "check", keys, timeout_);
  if (r != kCheckReady && r != kCheckNotReady)
    impl_->fail_lost("check", keys, "unexpected reply " + std::to_string(r) + " to CHECK");
  return r == kCheckReady;
}

std::vector<Bytes> TcpStore::multi_get(const std::vector<std::string>& keys) {
  if (keys.empty()) return {};
  std::lock_guard<std::mutex> lock(impl_->mu);
  const auto deadline = deadline_after(timeout_);
  const std::vector<std::string> wire = wire_keys(keys);
  impl_->ensure_connected(deadline, "multi_get", keys);
  impl_->do_wait(wire, keys, deadline, timeout_,
                 "multi_get");  // MULTI_GET of a missing key hangs up
  Writer w;
  w.u8(static_cast<uint8_t>(Query::MultiGet));
  w.u64(wire.size());
  for (const auto& k : wire) w.str(k);
  impl_->send_all(w.buffer(), deadline, "multi_get", keys, timeout_);
  std::vector<Bytes> values;
  values.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i)
    values.push_back(impl_->recv_bytes(deadline, "multi_get", keys, timeout_));
  return values;
}

std::vector<int64_t> TcpStore::add_all(const std::vector<std::pair<std::string, int64_t>>& adds) {
  if (adds.empty()) return {};
  std::lock_guard<std::mutex> lock(impl_->mu);
  const auto deadline = deadline_after(timeout_);
  std::vector<std::string> keys;
  keys.reserve(adds.size());
  for (const auto& add : adds) keys.push_back(add.first);
  impl_->ensure_connected(deadline, "add", keys);
  Writer w;  // the server answers requests in order: all of them, then every reply
  for (const auto& [key, delta] : adds) {
    w.u8(static_cast<uint8_t>(Query::Add));
    w.str(kKeyPrefix + key);
    w.i64(delta);
  }
  impl_->send_all(w.buffer(), deadline, "add", keys, timeout_);
  std::vector<int64_t> values;
  values.reserve(adds.size());
  for (size_t i = 0; i < adds.size(); ++i)
    values.push_back(impl_->recv_value<int64_t>(deadline, "add", keys, timeout_));
  return values;
}

bool TcpStore::remove(const std::string& key) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const auto deadline = deadline_after(timeout_);
  const std::vector<std::string> keys{key};
  impl_->ensure_connected(deadline, "remove", keys);
  Writer w;
  w.u8(static_cast<uint8_t>(Query::DeleteKey));
  w.str(kKeyPrefix + key);
  impl_->send_all(w.buffer(), deadline, "remove", keys, timeout_);
  return impl_->recv_value<int64_t>(deadline, "remove", keys, timeout_) == 1;
}

}  // namespace shoal
