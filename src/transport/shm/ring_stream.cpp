#include "transport/shm/ring_stream.hpp"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

namespace shoal::transport::shm {

RingStream::RingStream(RingView out, RingView in, SegmentHeader* mine, SegmentHeader* peers,
                       int socket_fd, uint64_t direct_threshold)
    : out_(out),
      in_(in),
      mine_(mine),
      peers_(peers),
      fd_(socket_fd),
      direct_threshold_(direct_threshold) {}

bool RingStream::pull(void* dst, uint64_t remote_addr, uint64_t len, std::string& error) {
  return pull_from(peers_->pid, remote_addr, dst, len, error);
}

void post_abort_note(SegmentHeader& h, ErrorCode code, int culprit, const std::string& message) {
  // One note per rank, shared by all its streams and its flat collectives: the first writes it.
  uint32_t expected = 0;
  if (h.aborted.compare_exchange_strong(expected, 2)) {
    h.abort_code = static_cast<uint32_t>(code);
    h.abort_culprit = culprit;
    std::snprintf(h.abort_message, sizeof h.abort_message, "%s", message.c_str());
    h.aborted.store(1, std::memory_order_release);
  }
}

std::optional<Stream::AbortNote> abort_note_of(const SegmentHeader& h) {
  if (h.aborted.load(std::memory_order_acquire) != 1) return std::nullopt;
  const uint32_t c = h.abort_code;
  ErrorCode code = c <= static_cast<uint32_t>(ErrorCode::Internal) ? static_cast<ErrorCode>(c)
                                                                   : ErrorCode::Aborted;
  return Stream::AbortNote{
      code, h.abort_culprit,
      std::string(h.abort_message, strnlen(h.abort_message, sizeof h.abort_message))};
}

bool RingStream::post_abort(ErrorCode code, int culprit, const std::string& message) {
  post_abort_note(*mine_, code, culprit, message);
  return true;
}

std::optional<Stream::AbortNote> RingStream::peer_abort() const { return abort_note_of(*peers_); }

RingStream::~RingStream() {
  if (fd_ >= 0) close(fd_);
}

void RingStream::ring_doorbell() {
  // seq_cst pairs with the sleeper's store of its flag followed by its look at the rings: either
  // it sees our bytes, or we see its flag (no lost wake-up).
  if (peers_->sleeping.load(std::memory_order_seq_cst) != 0) {
    const char bell = 1;
    ssize_t ignored = send(fd_, &bell, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)ignored;
  }
}

ssize_t RingStream::writev(const iovec* iov, int count) {
  RingHeader& r = *out_.header;
  const uint64_t head = r.head.load(std::memory_order_relaxed);
  const uint64_t tail = r.tail.load(std::memory_order_acquire);
  uint64_t space = out_.capacity - (head - tail);
  if (space == 0) {
    write_was_full_ = true;
    errno = EAGAIN;
    return -1;
  }
  write_was_full_ = false;
  uint64_t written = 0, pos = head;
  for (int i = 0; i < count && space > 0; ++i) {
    const auto* src = static_cast<const uint8_t*>(iov[i].iov_base);
    uint64_t len = std::min<uint64_t>(iov[i].iov_len, space);
    while (len > 0) {
      const uint64_t at = pos & (out_.capacity - 1);
      const uint64_t n = std::min(len, out_.capacity - at);
      std::memcpy(out_.data + at, src, n);
      src += n;
      pos += n;
      len -= n;
      written += n;
      space -= n;
    }
  }
  r.head.store(pos, std::memory_order_seq_cst);
  ring_doorbell();
  return static_cast<ssize_t>(written);
}

void RingStream::drain_socket() {
  socket_readable_ = false;
  char sink[256];
  for (;;) {
    ssize_t n = recv(fd_, sink, sizeof sink, MSG_DONTWAIT);
    if (n > 0) continue;
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) peer_gone_ = true;
    return;
  }
}

bool RingStream::ready() const {
  if (in_.header->head.load(std::memory_order_seq_cst) !=
      in_.header->tail.load(std::memory_order_relaxed))
    return true;
  const RingHeader& o = *out_.header;
  return write_was_full_ &&
         o.head.load(std::memory_order_relaxed) - o.tail.load(std::memory_order_seq_cst) <
             out_.capacity;
}

ssize_t RingStream::read(void* dst, size_t len) {
  if (socket_readable_) drain_socket();
  RingHeader& r = *in_.header;
  const uint64_t tail = r.tail.load(std::memory_order_relaxed);
  const uint64_t head = r.head.load(std::memory_order_acquire);
  uint64_t avail = head - tail;
  if (avail == 0) {
    if (peer_gone_) return 0;  // everything the peer wrote before it went has been read
    errno = EAGAIN;
    return -1;
  }
  uint64_t n = std::min<uint64_t>(avail, len), pos = tail;
  auto* out = static_cast<uint8_t*>(dst);
  while (n > 0) {
    const uint64_t at = pos & (in_.capacity - 1);
    const uint64_t k = std::min(n, in_.capacity - at);
    std::memcpy(out, in_.data + at, k);
    out += k;
    pos += k;
    n -= k;
  }
  r.tail.store(pos, std::memory_order_seq_cst);
  ring_doorbell();  // the peer may sleep waiting for room
  return static_cast<ssize_t>(pos - tail);
}

void RingStream::wait_writable(int timeout_ms) {
  std::this_thread::sleep_for(std::chrono::microseconds(std::min(timeout_ms, 1) * 100));
}

void RingStream::shutdown_write() { shutdown(fd_, SHUT_WR); }

}  // namespace shoal::transport::shm
