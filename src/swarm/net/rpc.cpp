#include "swarm/net/rpc.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/check.hpp"
#include "core/config.hpp"
#include "transport/tcp/auth.hpp"
#include "transport/tcp/socket.hpp"

namespace shoal::swarm {

namespace {

using Clock = std::chrono::steady_clock;
using Deadline = std::optional<Clock::time_point>;  // nullopt: wait until the peer or stop() acts

enum class Io { ok, closed, timeout };

// Waits until `fd` is ready for `events` or the deadline passes (false).
bool wait_ready(int fd, short events, const Deadline& deadline) {
  for (;;) {
    int ms = -1;
    if (deadline) {
      const auto left = *deadline - Clock::now();
      if (left <= Clock::duration::zero()) return false;
      // Round up: a 0 ms poll before the deadline would spin.
      ms = static_cast<int>(
          std::min<int64_t>(std::chrono::ceil<std::chrono::milliseconds>(left).count(), INT_MAX));
    }
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, ms);
    if (r > 0) return true;  // ready, or hung up / errored: the next recv/send says which
    if (r < 0 && errno != EINTR) return true;
  }
}

Io read_exact(int fd, void* data, size_t len, const Deadline& deadline) {
  auto* p = static_cast<uint8_t*>(data);
  while (len > 0) {
    const ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!wait_ready(fd, POLLIN, deadline)) return Io::timeout;
    } else {
      return Io::closed;  // EOF, reset, or shut down by stop()
    }
  }
  return Io::ok;
}

// Writes the frame's pieces with sendmsg straight from their memory (tensor data uncopied).
Io write_frame(int fd, const EncodedFrame& frame, const Deadline& deadline) {
  std::vector<iovec> iov;
  iov.reserve(frame.pieces.size());
  for (const auto& [p, n] : frame.pieces)
    if (n > 0) iov.push_back({const_cast<void*>(p), n});
  size_t at = 0;
  while (at < iov.size()) {
    msghdr m{};
    m.msg_iov = iov.data() + at;
    m.msg_iovlen = std::min<size_t>(iov.size() - at, IOV_MAX);
    ssize_t n = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return Io::closed;
      if (!wait_ready(fd, POLLOUT, deadline)) return Io::timeout;
      continue;
    }
    for (auto left = static_cast<size_t>(n); left > 0;) {
      if (left >= iov[at].iov_len) {
        left -= iov[at++].iov_len;
      } else {
        iov[at].iov_base = static_cast<uint8_t*>(iov[at].iov_base) + left;
        iov[at].iov_len -= left;
        left = 0;
      }
    }
  }
  return Io::ok;
}

// The body of a frame whose header said `bytes`: grown as data arrives, so a header that
// claims much and sends nothing costs no memory.
Io read_body(int fd, uint64_t bytes, std::vector<uint8_t>& body, const Deadline& deadline) {
  constexpr uint64_t kStep = 16u << 20;
  body.clear();
  body.reserve(std::min(bytes, kStep));
  while (body.size() < bytes) {
    const size_t at = body.size();
    const size_t chunk =
        static_cast<size_t>(std::min<uint64_t>(bytes - at, std::max<uint64_t>(at, kStep)));
    body.resize(at + chunk);
    if (Io r = read_exact(fd, body.data() + at, chunk, deadline); r != Io::ok) return r;
  }
  return Io::ok;
}

// Both ends authenticate with the transport's HMAC challenge-response; this fixed Hello (never
// sent) binds the MACs to SWARM RPC, so an answer from a transport handshake cannot serve here.
transport::Hello rpc_hello() {
  transport::Hello h;
  h.comm_id = 0x5357524d2d525043ull;  // "SWRM-RPC"
  h.rank = -1;
  h.size = 0;
  h.reserved = transport::tcp::kHelloAuth;
  return h;
}

Message error_reply(uint64_t request_id, ErrorCode code, const std::string& text) {
  Message m;
  m.type = MsgType::Error;
  m.flags = static_cast<uint8_t>(code);
  m.request_id = request_id;
  m.text = text.substr(0, kMaxTextBytes);
  return m;
}

// The after_reply() work of the request this thread is handling (null outside a handler).
thread_local std::vector<std::function<void()>>* t_after_reply = nullptr;

void run_after_reply(std::vector<std::function<void()>>& work) {
  for (auto& w : work) try {
      w();
    } catch (const std::exception& e) {
      SHOAL_WARN("swarm rpc server: work after a reply failed: " << e.what());
    }
  work.clear();
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

void after_reply(std::function<void()> work) {
  if (t_after_reply != nullptr) {
    t_after_reply->push_back(std::move(work));
  } else {
    work();
  }
}

std::pair<std::string, uint16_t> split_address(const std::string& address) {
  const auto colon = address.rfind(':');
  int port = -1;
  if (colon != std::string::npos && colon + 1 < address.size() &&
      address.find_first_not_of("0123456789", colon + 1) == std::string::npos &&
      address.size() - colon <= 6)
    port = std::stoi(address.substr(colon + 1));
  SHOAL_CHECK(colon != std::string::npos && colon > 0 && port >= 0 && port <= 65535,
              InvalidArgument, "expected host:port, got '" << address << "'");
  return {address.substr(0, colon), static_cast<uint16_t>(port)};
}

uint64_t max_message_bytes() { return config::get_bytes("SHOAL_SWARM_MAX_MESSAGE"); }

// ---------------------------------------------------------------------------------------------

struct RpcServer::Impl {
  struct Conn {
    int fd = -1;  // -1 once the connection's thread closed it (under mu)
    std::thread thread;
    std::atomic<bool> done{false};
  };

  Handler handler;
  uint64_t max_body = 0;
  uint16_t port = 0;
  int listen_fd = -1;
  int wake_fd = -1;  // eventfd: stop() wakes the accept loop
  std::thread acceptor;
  std::mutex mu;
  std::list<Conn> conns;
  bool stopping = false;
  std::once_flag stopped;

  void accept_loop() {
    for (;;) {
      pollfd p[2] = {{listen_fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
      if (poll(p, 2, -1) < 0 && errno != EINTR) return;
      if (p[1].revents != 0) return;
      if (p[0].revents == 0) continue;
      const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        // Out of descriptors: the pending connection stays ready, so back off instead of spinning.
        if (errno == EMFILE || errno == ENFILE)
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;  // EAGAIN (raced), ECONNABORTED
      }
      set_nodelay(fd);
      std::lock_guard lock(mu);
      reap_locked();
      if (stopping) {
        close(fd);
        return;
      }
      Conn& c = conns.emplace_back();
      c.fd = fd;
      c.thread = std::thread([this, &c] { serve(c); });
    }
  }

  // Joins the threads of connections that ended (their fds are already closed).
  void reap_locked() {
    for (auto it = conns.begin(); it != conns.end();) {
      if (it->done.load()) {
        it->thread.join();
        it = conns.erase(it);
      } else {
        ++it;
      }
    }
  }

  void serve(Conn& c) {
    const int fd = c.fd;
    try {
      serve_frames(fd);
    } catch (const std::exception& e) {
      SHOAL_WARN("swarm rpc server: dropping a connection: " << e.what());
    }
    std::lock_guard lock(mu);
    close(c.fd);
    c.fd = -1;
    c.done = true;
  }

  void serve_frames(int fd) {
    if (const std::string& key = auth::job_key(); !key.empty()) {
      std::string why;
      const auto deadline = Clock::now() + config::get_duration("SHOAL_TIMEOUT");
      if (!transport::tcp::authenticate_from(fd, rpc_hello(), -1, key, deadline, why)) {
        SHOAL_WARN("swarm rpc server: refused a connection: " << why);
        return;
      }
    }
    for (;;) {
      uint8_t header[kFrameHeaderBytes];
      if (read_exact(fd, header, sizeof header, std::nullopt) != Io::ok) return;
      auto body = std::make_shared<std::vector<uint8_t>>();
      Message request;
      try {
        MsgType type;
        const uint64_t bytes = parse_header(header, max_body, &type);
        if (read_body(fd, bytes, *body, std::nullopt) != Io::ok) return;
        request = decode(header, body);
        SHOAL_CHECK(type != MsgType::Reply && type != MsgType::Error, InvalidArgument,
                    "swarm frame: a server takes requests, not message type " << unsigned(type));
      } catch (const Error& e) {
        // A malformed frame leaves the stream out of step: say why, then hang up.
        uint64_t id = 0;
        if (body->size() >= 8) std::memcpy(&id, body->data(), 8);
        refuse(fd, error_reply(id, e.code(), e.what()));
        return;
      }
      const uint64_t id = request.request_id;
      Message reply;
      std::vector<std::function<void()>> after;
      t_after_reply = &after;
      try {
        reply = handler(std::move(request));
        if (reply.type != MsgType::Error) reply.type = MsgType::Reply;
      } catch (const Error& e) {
        reply = error_reply(id, e.code(), e.what());
      } catch (const std::exception& e) {
        reply = error_reply(id, ErrorCode::Internal, e.what());
      } catch (...) {
        reply = error_reply(id, ErrorCode::Internal, "the handler threw a non-standard exception");
      }
      t_after_reply = nullptr;
      reply.request_id = id;
      EncodedFrame frame;
      try {
        frame = encode(reply);
      } catch (const Error& e) {  // the handler built an inconsistent reply
        reply = error_reply(id, ErrorCode::Internal,
                            std::string("the server built a bad reply: ") + e.what());
        frame = encode(reply);
      }
      const bool written = write_frame(fd, frame, std::nullopt) == Io::ok;
      run_after_reply(after);
      if (!written) return;
    }
  }

  // Writes a last Error reply and lets the peer read it: half-close, then drain what it still
  // sends for a moment (closing with unread input would reset the connection and lose the reply).
  static void refuse(int fd, const Message& reply) {
    const auto deadline = Clock::now() + std::chrono::seconds(1);
    if (write_frame(fd, encode(reply), deadline) != Io::ok) return;
    shutdown(fd, SHUT_WR);
    uint8_t sink[4096];
    for (size_t drained = 0; drained < (16u << 20);) {
      const ssize_t n = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
      if (n > 0) {
        drained += static_cast<size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        if (!wait_ready(fd, POLLIN, deadline)) return;
      } else {
        return;
      }
    }
  }
};

RpcServer::RpcServer(const std::string& host, uint16_t port, Handler handler)
    : impl_(std::make_unique<Impl>()) {
  impl_->handler = std::move(handler);
  impl_->max_body = max_message_bytes();
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  SHOAL_CHECK(inet_pton(AF_INET, host.c_str(), &sa.sin_addr) == 1, InvalidArgument,
              "swarm rpc server: cannot listen on '"
                  << host << "': give an IPv4 address (0.0.0.0: all interfaces)");
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  SHOAL_CHECK(fd >= 0, Internal, "swarm rpc server: socket(): " << strerror(errno));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(fd, 1024) != 0) {
    const int e = errno;
    close(fd);
    SHOAL_THROW(Internal, "swarm rpc server: cannot listen on " << host << ":" << port << ": "
                                                                << strerror(e));
  }
  socklen_t len = sizeof sa;
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  impl_->port = ntohs(sa.sin_port);
  impl_->listen_fd = fd;
  impl_->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (impl_->wake_fd < 0) {
    const int e = errno;
    close(fd);
    SHOAL_THROW(Internal, "swarm rpc server: eventfd(): " << strerror(e));
  }
  impl_->acceptor = std::thread([impl = impl_.get()] { impl->accept_loop(); });
}

RpcServer::~RpcServer() { stop(); }

uint16_t RpcServer::port() const { return impl_->port; }

void RpcServer::stop() {
  std::call_once(impl_->stopped, [impl = impl_.get()] {
    {
      std::lock_guard lock(impl->mu);
      impl->stopping = true;
    }
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t w = write(impl->wake_fd, &one, sizeof one);
    impl->acceptor.join();
    close(impl->listen_fd);
    close(impl->wake_fd);
    {
      // Wakes every connection's blocked read or write; a handler still running finishes first.
      std::lock_guard lock(impl->mu);
      for (auto& c : impl->conns)
        if (c.fd >= 0) shutdown(c.fd, SHUT_RDWR);
    }
    for (auto& c : impl->conns) c.thread.join();  // no one adds to conns once the acceptor is gone
    impl->conns.clear();
  });
}

// ---------------------------------------------------------------------------------------------

struct RpcClient::Impl {
  std::string address;
  int fd = -1;
  uint64_t max_body = 0;

  ~Impl() { drop(); }
  void drop() {
    if (fd >= 0) close(fd);
    fd = -1;
  }
  [[noreturn]] void fail(ErrorCode code, const std::string& what) {
    drop();
    throw_error(code, address + ": " + what);
  }
};

RpcClient::RpcClient(const std::string& host, uint16_t port, Milliseconds connect_timeout)
    : impl_(std::make_unique<Impl>()) {
  impl_->address = host + ":" + std::to_string(port);
  impl_->max_body = max_message_bytes();
  const auto deadline = Clock::now() + connect_timeout;
  impl_->fd = transport::tcp::connect_with_retry(host, port, deadline, "the swarm server");
  set_nodelay(impl_->fd);
  if (const std::string& key = auth::job_key(); !key.empty()) {
    try {
      transport::tcp::authenticate_to(impl_->fd, rpc_hello(), -1, impl_->address, key, deadline);
    } catch (const Error& e) {
      impl_->fail(e.code(), std::string("authentication failed: ") + e.what());
    }
  }
}

RpcClient::~RpcClient() = default;

bool RpcClient::usable() const { return impl_->fd >= 0; }

const std::string& RpcClient::address() const { return impl_->address; }

Message RpcClient::call(const Message& request, Milliseconds timeout) {
  Impl& im = *impl_;
  if (im.fd < 0)
    throw_error(
        ErrorCode::PeerFailure,
        im.address + ": the connection is closed after an earlier failure; make a new client");
  const Deadline deadline = Clock::now() + timeout;
  auto check = [&](Io r, const char* doing) {
    if (r == Io::timeout)
      im.fail(ErrorCode::Timeout, std::string("no reply within ") +
                                      std::to_string(timeout.count()) + " ms (" + doing +
                                      "); the connection is closed");
    if (r == Io::closed)
      im.fail(ErrorCode::PeerFailure,
              std::string("the server closed the connection (") + doing + ")");
  };
  check(write_frame(im.fd, encode(request), deadline), "sending the request");
  uint8_t header[kFrameHeaderBytes];
  check(read_exact(im.fd, header, sizeof header, deadline), "waiting for the reply");
  auto body = std::make_shared<std::vector<uint8_t>>();
  Message reply;
  try {
    const uint64_t bytes = parse_header(header, im.max_body);
    check(read_body(im.fd, bytes, *body, deadline), "reading the reply");
    reply = decode(header, body);
  } catch (const InvalidArgumentError& e) {
    im.fail(ErrorCode::PeerFailure, std::string("malformed reply: ") + e.what());
  }
  if (reply.type == MsgType::Error) {
    // Id 0: the server could not read our request (it hangs up after saying why).
    if (reply.request_id == 0 && request.request_id != 0) im.drop();
    if (reply.request_id == request.request_id || reply.request_id == 0) {
      const auto code = reply.flags <= static_cast<uint8_t>(ErrorCode::Internal)
                            ? static_cast<ErrorCode>(reply.flags)
                            : ErrorCode::Internal;
      throw_error(code, im.address + ": " + reply.text);
    }
  }
  if (reply.type != MsgType::Reply && reply.type != MsgType::Error)
    im.fail(ErrorCode::PeerFailure, "protocol error: the server sent message type " +
                                        std::to_string(static_cast<unsigned>(reply.type)) +
                                        " as a reply");
  if (reply.request_id != request.request_id)
    im.fail(ErrorCode::PeerFailure, "protocol error: reply to request " +
                                        std::to_string(reply.request_id) + " while waiting for " +
                                        std::to_string(request.request_id));
  return reply;
}

}  // namespace shoal::swarm
