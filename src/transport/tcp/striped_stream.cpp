#include "transport/tcp/striped_stream.hpp"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/check.hpp"
#include "transport/tcp/socket.hpp"

namespace shoal::transport::tcp {

namespace {
constexpr uint32_t kSegmentMagic = 0x53545250;  // "STRP"
}

StripedStream::StripedStream(std::vector<int> fds) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) {
    const int e = errno;
    for (int fd : fds) close(fd);
    SHOAL_THROW(Internal, "epoll_create1: " << strerror(e));
  }
  rails_.resize(fds.size());
  for (size_t i = 0; i < fds.size(); ++i) {
    rails_[i].fd = fds[i];
    epoll_event e{};
    e.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    e.data.u32 = static_cast<uint32_t>(i);
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fds[i], &e);
  }
}

StripedStream::~StripedStream() {
  const auto deadline = std::chrono::steady_clock::now() + kDrainOnClose;
  for (auto& r : rails_) {
    if (write_shut_)
      close_after_draining(r.fd, deadline);
    else
      close(r.fd);
  }
  close(epoll_fd_);
}

std::vector<uint64_t> StripedStream::bytes_per_rail() const {
  std::vector<uint64_t> out;
  for (const auto& r : rails_) out.push_back(r.payload_sent);
  return out;
}

bool StripedStream::flush(Rail& r) {
  while (busy(r)) {
    const ssize_t n = ::send(r.fd, r.unsent.data() + r.unsent_offset,
                             r.unsent.size() - r.unsent_offset, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
    r.unsent_offset += static_cast<size_t>(n);
  }
  return true;
}

ssize_t StripedStream::writev(const iovec* iov, int count) {
  if (error_ != 0) {
    errno = error_;
    return -1;
  }
  for (auto& r : rails_)
    if (!flush(r)) {
      error_ = errno;
      return -1;
    }
  size_t total = 0;
  for (int i = 0; i < count; ++i) total += iov[i].iov_len;
  // Where the caller's bytes stand: iov index and offset inside it.
  int at = 0;
  size_t at_offset = 0;
  size_t taken = 0;
  while (taken < total) {
    // The next rail, round robin, that has finished its previous segment.
    size_t k = 0;
    while (k < rails_.size() && busy(rails_[(next_rail_ + k) % rails_.size()])) ++k;
    if (k == rails_.size()) break;
    Rail& r = rails_[(next_rail_ + k) % rails_.size()];
    next_rail_ = (next_rail_ + k + 1) % rails_.size();
    const auto len = static_cast<uint32_t>(std::min<size_t>(kSegmentBytes, total - taken));
    SegmentHeader h{kSegmentMagic, len, next_out_seq_++};
    // Header and payload in one system call; whatever the socket does not take is copied and
    // owed by this rail (the caller may reuse its buffer once we report the bytes taken).
    iovec parts[66];
    int n_parts = 0;
    parts[n_parts++] = {&h, sizeof h};
    size_t left = len;
    int i = at;
    size_t off = at_offset;
    while (left > 0 && n_parts < 66) {
      const size_t piece = std::min(left, iov[i].iov_len - off);
      if (piece > 0) parts[n_parts++] = {static_cast<uint8_t*>(iov[i].iov_base) + off, piece};
      left -= piece;
      off += piece;
      if (off == iov[i].iov_len) {
        ++i;
        off = 0;
      }
    }
    const size_t segment_payload = len - left;  // all of it unless the iovec was very fragmented
    h.length = static_cast<uint32_t>(segment_payload);
    msghdr m{};
    m.msg_iov = parts;
    m.msg_iovlen = static_cast<size_t>(n_parts);
    ssize_t sent = ::sendmsg(r.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        error_ = errno;
        return -1;
      }
      sent = 0;
    }
    const size_t whole = sizeof h + segment_payload;
    if (static_cast<size_t>(sent) < whole) {
      r.unsent.resize(whole - static_cast<size_t>(sent));
      r.unsent_offset = 0;
      size_t skip = static_cast<size_t>(sent), w = 0;
      for (int p = 0; p < n_parts; ++p) {
        const size_t plen = parts[p].iov_len;
        if (skip >= plen) {
          skip -= plen;
          continue;
        }
        std::memcpy(r.unsent.data() + w, static_cast<uint8_t*>(parts[p].iov_base) + skip,
                    plen - skip);
        w += plen - skip;
        skip = 0;
      }
    } else {
      r.unsent.clear();
      r.unsent_offset = 0;
    }
    r.payload_sent += segment_payload;
    taken += segment_payload;
    at = i;
    at_offset = off;
  }
  if (taken > 0) return static_cast<ssize_t>(taken);
  errno = EAGAIN;
  return -1;
}

bool StripedStream::read_rail(Rail& r) {
  for (;;) {
    if (r.eof) return true;
    uint8_t* dst;
    size_t want;
    if (r.header_got < sizeof r.header) {
      dst = reinterpret_cast<uint8_t*>(&r.header) + r.header_got;
      want = sizeof r.header - r.header_got;
    } else {
      dst = r.data.data() + r.data_got;
      want = r.data.size() - r.data_got;
    }
    const ssize_t n = want == 0 ? 0 : ::recv(r.fd, dst, want, MSG_DONTWAIT);
    if (want > 0 && n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
    if (n > 0) wire_bytes_in_ += static_cast<uint64_t>(n);
    if (want > 0 && n == 0) {
      if (r.header_got != 0) {  // the peer stopped in the middle of a segment
        errno = ECONNRESET;
        return false;
      }
      r.eof = true;
      return true;
    }
    if (r.header_got < sizeof r.header) {
      r.header_got += static_cast<size_t>(n);
      if (r.header_got < sizeof r.header) continue;
      if (r.header.magic != kSegmentMagic || r.header.length > kSegmentBytes ||
          r.header.seq < next_in_seq_ || arrived_.count(r.header.seq) != 0) {
        errno = EPROTO;  // not a segment of this stream: corrupt or not shoal
        return false;
      }
      r.data.resize(r.header.length);
      r.data_got = 0;
    } else {
      r.data_got += static_cast<size_t>(n);
    }
    if (r.data_got == r.data.size()) {
      arrived_.emplace(r.header.seq, std::move(r.data));
      r.data = {};
      r.header_got = 0;
    }
  }
}

bool StripedStream::read_rails() {
  for (auto& r : rails_)
    if (!read_rail(r)) return false;
  return true;
}

ssize_t StripedStream::read(void* dst, size_t len) {
  if (error_ == 0 && !read_rails()) error_ = errno;
  size_t got = 0;
  auto* out = static_cast<uint8_t*>(dst);
  while (got < len && !arrived_.empty() && arrived_.begin()->first == next_in_seq_) {
    const auto& segment = arrived_.begin()->second;
    const size_t piece = std::min(len - got, segment.size() - front_offset_);
    std::memcpy(out + got, segment.data() + front_offset_, piece);
    got += piece;
    front_offset_ += piece;
    if (front_offset_ == segment.size()) {
      arrived_.erase(arrived_.begin());
      ++next_in_seq_;
      front_offset_ = 0;
    }
  }
  if (got > 0) return static_cast<ssize_t>(got);
  if (error_ != 0) {
    errno = error_;
    return -1;
  }
  if (arrived_.empty() &&
      std::all_of(rails_.begin(), rails_.end(), [](const Rail& r) { return r.eof; }))
    return 0;
  errno = EAGAIN;
  return -1;
}

void StripedStream::notify_readable() {
  epoll_event events[16];
  while (epoll_wait(epoll_fd_, events, 16, 0) == 16) {
  }
  for (auto& r : rails_)
    if (error_ == 0 && !flush(r)) error_ = errno;
}

void StripedStream::wait_writable(int timeout_ms) {
  std::vector<pollfd> fds;
  for (auto& r : rails_) fds.push_back({r.fd, POLLOUT, 0});
  poll(fds.data(), fds.size(), timeout_ms);
  for (auto& r : rails_)
    if (error_ == 0 && !flush(r)) error_ = errno;
}

bool StripedStream::peer_gone() const {
  for (const Rail& r : rails_)
    if (peer_closed(r.fd)) return true;
  return false;
}

void StripedStream::shutdown_write() {
  for (auto& r : rails_) {
    // What a rail owes goes first (briefly): the peer must not see a cut segment.
    for (int i = 0; i < 100 && busy(r) && flush(r); ++i) {
      if (busy(r)) {
        pollfd p{r.fd, POLLOUT, 0};
        poll(&p, 1, 10);
      }
    }
    ::shutdown(r.fd, SHUT_WR);
  }
  write_shut_ = true;
}

}  // namespace shoal::transport::tcp
