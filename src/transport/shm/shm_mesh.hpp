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
/// SHOAL_TRANSPORT, parsed (InvalidArgumentError for another value).
Mode transport_mode();

class ShmMesh {
 public:
  /// `host_of[r]` is rank r's host index; `host_cores`: the CPUs this host's ranks may run on,
  /// equal on all of them (0: the CPUs online). Returns a mesh even when no pair uses shared
  /// memory.
  ShmMesh(Store& store, const std::string& prefix, int rank, const std::vector<int>& host_of,
          uint64_t comm_id, int host_cores = 0);
  ~ShmMesh();

  bool uses_shm(int peer) const {
    return peer >= 0 && peer < static_cast<int>(use_.size()) && use_[peer];
  }
  int shm_peers() const;
  /// The stream to `peer` over shared memory, taking ownership of its TCP socket.
  std::unique_ptr<RingStream> stream_to(int peer, int socket_fd);
  /// True on every rank when all ranks share this host and every pair maps the other's
  /// segment: then flat collectives (src/comm/flat.cpp) may be used. The same on all ranks.
  bool all_ranks_share_memory() const { return all_shared_; }
  /// From how many bytes of input per rank a flat collective may run direct, its buffers read
  /// in place by the peers with process_vm_readv (SHOAL_FLAT_DIRECT_BYTES, raised beyond the
  /// slots on a host of more ranks than cores; comm/flat.hpp's flat_direct() decides per
  /// collective); UINT64_MAX unless all ranks share memory and each can read every other's
  /// (probed at set-up). The same on all ranks.
  uint64_t flat_direct_bytes() const { return all_pull_ ? direct_bytes_ : UINT64_MAX; }
  /// More ranks on this host than it has cores.
  bool oversubscribed() const { return oversubscribed_; }
  /// Rank r's segment (this rank's own included); only when all_ranks_share_memory().
  const Segment& segment_of(int r) const { return r == rank_ ? *mine_ : *peers_[r]; }
  /// This rank's own segment header (null without shared memory).
  SegmentHeader* own_header() const { return mine_ ? &mine_->header() : nullptr; }
  /// The last flat collective that this rank knows every peer has finished (comm/flat.cpp:
  /// after one it waited for every peer in, the one before; after queued broadcasts, what it
  /// saw in their flat_queued_done). Flat collectives of this communicator run one at a time.
  uint32_t& flat_known_done() const { return flat_known_done_; }
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
  bool oversubscribed_ = false;
  uint64_t ring_bytes_ = 0;
  uint64_t flat_bytes_ = 0;
  uint64_t direct_bytes_ = 0;
  mutable uint32_t flat_known_done_ = 0;

 public:
  /// Data capacity of the flat collectives' slots (SHOAL_FLAT_MAX_BYTES, rounded up).
  uint64_t flat_bytes() const { return flat_bytes_; }
  std::unique_ptr<Segment> mine_;
  std::vector<std::unique_ptr<Segment>> peers_;
};

}  // namespace shoal::transport::shm
