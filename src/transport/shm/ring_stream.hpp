// A Stream over two shared-memory rings (one per direction) and a TCP socket beside them.
// Bytes go through the rings: one copy in, one copy out, in cache-sized pieces. The socket
// carries no data: a one-byte "doorbell" wakes a peer whose progress thread announced that it
// sleeps, and its end tells that the peer is gone (a killed process closes its sockets).
#pragma once

#include <atomic>
#include <cstdint>

#include "transport/shm/segment.hpp"
#include "transport/stream.hpp"

namespace shoal::transport::shm {

/// Leaves an abort note in `h` (the owner's segment): why the owner broke, readable by its
/// peers even when no frame can reach them. The first note stays.
void post_abort_note(SegmentHeader& h, ErrorCode code, int culprit, const std::string& message);
/// The abort note the owner of `h` left, if any.
std::optional<Stream::AbortNote> abort_note_of(const SegmentHeader& h);

struct RingView {
  RingHeader* header = nullptr;
  uint8_t* data = nullptr;
  uint64_t capacity = 0;  // a power of two
};

class RingStream : public Stream {
 public:
  /// `out` is written by this rank, `in` by the peer; `mine` and `peers` are the two
  /// segments' headers (sleep flags, abort notes). Takes ownership of `socket_fd`.
  /// `direct_threshold`: payloads from this size on go by reference (the peer pulls them with
  /// process_vm_readv), UINT64_MAX for never.
  RingStream(RingView out, RingView in, SegmentHeader* mine, SegmentHeader* peers, int socket_fd,
             uint64_t direct_threshold = UINT64_MAX);
  ~RingStream() override;

  int fd() const override { return fd_; }
  ssize_t writev(const iovec* iov, int count) override;
  ssize_t read(void* dst, size_t len) override;
  void wait_writable(int timeout_ms) override;
  void shutdown_write() override;
  void notify_readable() override { socket_readable_ = true; }
  bool polled() const override { return true; }
  const char* kind() const override { return "shm"; }

  bool ready() const override;
  bool post_abort(ErrorCode code, int culprit, const std::string& message) override;
  uint64_t direct_threshold() const override { return direct_threshold_; }
  bool pull(void* dst, uint64_t remote_addr, uint64_t len, std::string& error) override;
  std::optional<AbortNote> peer_abort() const override;

 private:
  void ring_doorbell();
  void drain_socket();

  RingView out_, in_;
  SegmentHeader* mine_;
  SegmentHeader* peers_;
  int fd_;
  uint64_t direct_threshold_;
  bool socket_readable_ = false;
  bool write_was_full_ = false;
  bool peer_gone_ = false;
};

}  // namespace shoal::transport::shm
