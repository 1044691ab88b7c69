#include "wan/forwarder.hpp"

#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace shoal::wan {
namespace {

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

/// Inside network namespace `name` for its lifetime ("" stays where the process is).
class InNamespace {
 public:
  explicit InNamespace(const std::string& name) {
    if (name.empty()) return;
    home_ = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (home_ < 0) fail("open /proc/self/ns/net");
    const std::string path = "/run/netns/" + name;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("network namespace " + name + " (" + path + ")");
    const int rc = setns(fd, CLONE_NEWNET);
    close(fd);
    if (rc < 0) fail("setns " + name);
  }
  ~InNamespace() {
    if (home_ < 0) return;
    setns(home_, CLONE_NEWNET);
    close(home_);
  }
  InNamespace(const InNamespace&) = delete;
  InNamespace& operator=(const InNamespace&) = delete;

 private:
  int home_ = -1;
};

int open_tun(const Endpoint& e) {
  InNamespace in(e.netns);
  const std::string where = e.dev + (e.netns.empty() ? "" : " in " + e.netns);
  const int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail("open /dev/net/tun for " + where);
  ifreq ifr{};
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;  // bare IP packets
  std::strncpy(ifr.ifr_name, e.dev.c_str(), IFNAMSIZ - 1);
  if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
    const int err = errno;
    close(fd);
    errno = err;
    fail("create TUN device " + where);
  }
  return fd;
}

}  // namespace

Forwarder::Forwarder(const Spec& spec)
    : net_(spec), buffer_bytes_(static_cast<size_t>(std::max(spec.mtu, 1500)) + 256) {
  try {
    for (const Endpoint& e : spec.endpoints) fds_.push_back(open_tun(e));
  } catch (...) {
    for (int fd : fds_) close(fd);
    throw;
  }
}

Forwarder::~Forwarder() {
  for (int fd : fds_) close(fd);
}

void Forwarder::run(const std::atomic<bool>& stop, const std::function<void()>& on_stats) {
  // Timers fire within a microsecond, not the default 50 us slack: a 0.2 ms RTT must read as one.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  const int sfd = signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC);
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  if (sfd < 0 || ep < 0) fail("signalfd/epoll");
  constexpr uint32_t kSignals = UINT32_MAX;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u32 = kSignals;
  epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev);
  for (size_t i = 0; i < fds_.size(); ++i) {
    ev.data.u32 = static_cast<uint32_t>(i);
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fds_[i], &ev) < 0) fail("epoll_ctl");
  }
  const size_t buffer_bytes = buffer_bytes_;
  const size_t max_buffers = kMaxBufferedBytes / buffer_bytes;
  std::vector<uint8_t> scratch(buffer_bytes);  // reads beyond the cap land here, dropped
  constexpr uint32_t kNone = UINT32_MAX;
  auto take = [&]() -> uint32_t {  // a packet buffer: a freed one, a new one, or none
    if (!free_buffers_.empty()) {
      const uint32_t id = free_buffers_.back();
      free_buffers_.pop_back();
      return id;
    }
    if (buffers_.size() >= max_buffers) return kNone;
    buffers_.emplace_back(buffer_bytes);
    lengths_.push_back(0);
    return static_cast<uint32_t>(buffers_.size() - 1);
  };
  std::vector<Event> out;
  epoll_event ready[64];
  bool running = true;
  while (running && !stop.load(std::memory_order_relaxed)) {
    out.clear();
    net_.advance(now_ns(), out);
    for (const Event& e : out) {
      if (!e.dropped &&
          write(fds_[e.dst], buffers_[e.id].data(), lengths_[e.id]) != ssize_t(lengths_[e.id]))
        ++write_drops_;
      free_buffers_.push_back(static_cast<uint32_t>(e.id));
    }
    const int64_t wait = std::clamp<int64_t>(net_.next_due() - now_ns(), 0, 100'000'000);
    const timespec timeout{static_cast<time_t>(wait / 1'000'000'000),
                           static_cast<long>(wait % 1'000'000'000)};
    const int n = epoll_pwait2(ep, ready, 64, &timeout, nullptr);
    if (n < 0 && errno != EINTR) fail("epoll_pwait2");
    for (int r = 0; r < n; ++r) {
      const uint32_t src = ready[r].data.u32;
      if (src == kSignals) {
        signalfd_siginfo info;
        while (read(sfd, &info, sizeof info) == sizeof info) {
          if (info.ssi_signo == SIGUSR1) {
            if (on_stats) on_stats();
          } else {
            running = false;
          }
        }
        continue;
      }
      for (int k = 0; k < 64; ++k) {  // at most 64 from one device before the others' turn
        const uint32_t id = take();
        uint8_t* buf = id == kNone ? scratch.data() : buffers_[id].data();
        const ssize_t len = read(fds_[src], buf, buffer_bytes);
        if (len <= 0) {
          if (id != kNone) free_buffers_.push_back(id);
          break;
        }
        if (id == kNone) {
          ++overflow_drops_;
          continue;
        }
        // IPv4 only (the hosts have IPv6 off): the destination address is at bytes 16-19.
        const int dst = len >= 20 && (buf[0] >> 4) == 4
                            ? net_.route(uint32_t{buf[16]} << 24 | uint32_t{buf[17]} << 16 |
                                         uint32_t{buf[18]} << 8 | buf[19])
                            : -1;
        if (dst < 0 || dst == static_cast<int>(src)) {
          ++unroutable_;
          free_buffers_.push_back(id);
          continue;
        }
        lengths_[id] = static_cast<uint32_t>(len);
        net_.inject(id, static_cast<int>(src), dst, static_cast<uint32_t>(len), now_ns());
      }
    }
  }
  close(ep);
  close(sfd);
}

}  // namespace shoal::wan
