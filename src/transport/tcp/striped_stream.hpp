// A Stream over several TCP connections to one peer, one per NIC ("rail"): the byte stream is
// cut into numbered segments (at most kSegmentBytes each), each written whole to whichever rail
// has room — a faster NIC drains sooner and so takes more segments — and put back in order by
// the receiver. This is how one pair of ranks uses every NIC it has (PCCL's point that
// libraries leave NICs idle).
//
// Wire format per rail: repeated { SegmentHeader (16 bytes), payload }.
// fd() is an epoll set of the rails' sockets (edge-triggered): the progress engine polls it as
// one descriptor and calls notify_readable() on any event, where the set is drained and the
// rails' unsent bytes move on.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "transport/stream.hpp"

namespace shoal::transport::tcp {

class StripedStream : public Stream {
 public:
  static constexpr uint32_t kSegmentBytes = 256 << 10;

  /// Takes ownership of `fds`: connected, non-blocking, configured sockets to one peer.
  explicit StripedStream(std::vector<int> fds);
  ~StripedStream() override;
  int fd() const override { return epoll_fd_; }
  ssize_t writev(const iovec* iov, int count) override;
  ssize_t read(void* dst, size_t len) override;
  void wait_writable(int timeout_ms) override;
  void shutdown_write() override;
  bool peer_gone() const override;
  void notify_readable() override;
  const char* kind() const override { return "tcp"; }
  uint64_t wire_bytes_in() const override { return wire_bytes_in_; }
  size_t rails() const { return rails_.size(); }
  /// Bytes of payload sent on each rail so far (diagnostics, tests).
  std::vector<uint64_t> bytes_per_rail() const;

 private:
  struct SegmentHeader {
    uint32_t magic;
    uint32_t length;
    uint64_t seq;
  };
  static_assert(sizeof(SegmentHeader) == 16);
  struct Rail {
    int fd = -1;
    std::vector<uint8_t> unsent;  // the rest of the segment this rail is writing
    size_t unsent_offset = 0;
    uint64_t payload_sent = 0;
    SegmentHeader header{};  // receiving: the segment being read
    size_t header_got = 0;
    std::vector<uint8_t> data;
    size_t data_got = 0;
    bool eof = false;
  };

  bool busy(const Rail& r) const { return r.unsent_offset < r.unsent.size(); }
  // Writes what a rail still owes of its segment; false with errno on a broken socket.
  bool flush(Rail& r);
  // Reads whatever the rails have into arrived_; false with errno on a broken rail.
  bool read_rails();
  bool read_rail(Rail& r);

  std::vector<Rail> rails_;
  int epoll_fd_ = -1;
  bool write_shut_ = false;  // shutdown_write(): the destructor drains before it closes
  size_t next_rail_ = 0;     // round-robin start for the next segment
  uint64_t next_out_seq_ = 0, next_in_seq_ = 0;
  std::map<uint64_t, std::vector<uint8_t>> arrived_;  // segments not yet delivered, by number
  size_t front_offset_ = 0;                           // bytes of the first one already delivered
  int error_ = 0;                                     // sticky errno of a broken rail
  uint64_t wire_bytes_in_ = 0;                        // every byte any rail received
};

}  // namespace shoal::transport::tcp
