// shoal-wan's packet forwarder: one TUN device per endpoint of a Spec (created inside the
// endpoint's network namespace, so that its host routes its traffic into it), every IPv4 packet
// read from one handed to the Network model and written to the destination's device when the
// model delivers it. Packets, never connections: TCP's handshake, congestion control and
// retransmissions stay between the hosts.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "wan/model.hpp"

namespace shoal::wan {

class Forwarder {
 public:
  /// Creates the TUN devices (throws std::runtime_error naming the endpoint and the errno).
  explicit Forwarder(const Spec& spec);
  ~Forwarder();
  Forwarder(const Forwarder&) = delete;
  Forwarder& operator=(const Forwarder&) = delete;

  /// Forwards until `stop` is set (checked at least every 100 ms) or SIGINT or SIGTERM arrives
  /// (blocked in the calling thread and read here); SIGUSR1 calls `on_stats`. Single-threaded.
  void run(const std::atomic<bool>& stop, const std::function<void()>& on_stats = {});

  const Stats& stats() const { return net_.stats(); }
  /// Packets read that no endpoint holds, or not IPv4.
  uint64_t unroutable() const { return unroutable_; }
  /// Packets the model delivered whose write failed (the device's queue was full).
  uint64_t write_drops() const { return write_drops_; }
  /// Packets read while the buffers' cap (kMaxBufferedBytes) was reached.
  uint64_t overflow_drops() const { return overflow_drops_; }

  static constexpr size_t kMaxBufferedBytes = size_t{1} << 29;

 private:
  Network net_;
  size_t buffer_bytes_;  // one packet's buffer: the MTU and some
  std::vector<int> fds_;
  std::vector<std::vector<uint8_t>> buffers_;  // by packet id's slot
  std::vector<uint32_t> lengths_;
  std::vector<uint32_t> free_buffers_;
  uint64_t unroutable_ = 0;
  uint64_t write_drops_ = 0;
  uint64_t overflow_drops_ = 0;
};

}  // namespace shoal::wan
