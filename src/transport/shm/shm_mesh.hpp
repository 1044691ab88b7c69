// Shared-memory set-up for the ranks of one host, through the store: every local rank creates
// its segment, maps its local peers' segments, and the pairs that both succeeded talk through
// rings; every segment is unlinked once mapped. SHOAL_TRANSPORT=tcp|shm|auto chooses.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "shoal/store.hpp"
#include "transport/shm/ring_stream.hpp"
#include "transport/stream.hpp"

namespace shoal::transport::shm {

enum class Mode { automatic, tcp_only, shm_only };

/// A region the layer above lays out in every segment after the rings (the flat collectives':
/// comm/flat_memory.hpp). The transport maps it and checks that every peer's has the same size
/// and `check`; `what` names the settings a difference comes from.
struct RegionSpec {
  uint64_t bytes = 0;
  uint64_t check = 0;
  std::string what = "the shared region's settings";
};
/// SHOAL_TRANSPORT, parsed (InvalidArgumentError for another value).
Mode transport_mode();

class ShmMesh {
 public:
  /// `host_of[r]` is rank r's host index; `region`: what every segment holds after the rings.
  /// Returns a mesh even when no pair uses shared memory.
  ShmMesh(Store& store, const std::string& prefix, int rank, const std::vector<int>& host_of,
          uint64_t comm_id, const RegionSpec& region = {});
  ~ShmMesh();

  bool uses_shm(int peer) const {
    return peer >= 0 && peer < static_cast<int>(use_.size()) && use_[peer];
  }
  int shm_peers() const;
  /// The stream to `peer` over shared memory, taking ownership of its TCP socket.
  std::unique_ptr<RingStream> stream_to(int peer, int socket_fd);
  /// True on every rank when all ranks share this host and every pair maps the other's
  /// segment (then every rank's region is mapped here). The same on all ranks.
  bool all_ranks_share_memory() const { return all_shared_; }
  /// All ranks share memory and each can read and write every other's with process_vm_readv
  /// and process_vm_writev (probed at set-up). The same on all ranks.
  bool all_can_pull() const { return all_pull_; }
  /// The communicator's ranks.
  int size() const { return static_cast<int>(use_.size()); }
  int rank() const { return rank_; }
  /// Rank r's segment (this rank's own included); only when all_ranks_share_memory().
  const Segment& segment_of(int r) const { return r == rank_ ? *mine_ : *peers_[r]; }
  /// This rank's own segment header (null without shared memory).
  SegmentHeader* own_header() const { return mine_ ? &mine_->header() : nullptr; }
  /// This rank's "my progress thread sleeps" flag (null without shared memory).
  std::atomic<uint32_t>* sleeping_flag() const {
    return mine_ ? &mine_->header().sleeping : nullptr;
  }

 private:
  RingView view(const Segment& seg, uint32_t slot) const;

  int rank_;
  std::vector<int> local_index_;  // per rank: its index among the ranks of this host, or -1
  std::vector<bool> use_;
  bool all_shared_ = false;
  bool all_pull_ = false;
  uint64_t ring_bytes_ = 0;

 public:
  std::unique_ptr<Segment> mine_;
  std::vector<std::unique_ptr<Segment>> peers_;
};

}  // namespace shoal::transport::shm
