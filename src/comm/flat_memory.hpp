// The flat protocol's memory (comm/flat.hpp): a region that comm/ lays out in every local
// rank's shared segment. The shared-memory transport maps the region and knows nothing of what
// it holds; everything about the flat collectives — their words, slots, result areas and the
// queue of small broadcasts, their thresholds — is here.
//
// A rank's region: its words (each on its own cache line: peers poll them), two slots by
// operation parity (a FlatSlotHeader, then the data, whose first 48 bytes share the header's
// cache line), two result areas, then the queue of broadcasts it roots. The kernel zero-fills a
// new segment, which is every word's initial value.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "transport/shm/shm_mesh.hpp"

namespace shoal::comm {

/// The head of a slot or queue entry. `seq` is stored last (release): a peer that sees it sees
/// the rest.
struct FlatSlotHeader {
  std::atomic<uint32_t> seq{0};
  uint32_t signature = 0;
  uint64_t bytes = 0;
};
static_assert(sizeof(FlatSlotHeader) == 16);  // slots start on a cache line: 48 data bytes share it

/// One rank's words, which its peers read.
struct FlatWords {
  // The last operation whose slice the owner reduced.
  alignas(64) std::atomic<uint32_t> done{0};
  // (direct) The last operation in which the owner finished reading (and writing) its peers'
  // memory: a rank returns only once every peer raised it.
  alignas(64) std::atomic<uint32_t> read{0};
  // (queued broadcasts) The last one the owner is done with: wrote it into its queue, as the
  // root, or copied it out of the root's. A rank that did not wait for every peer in a call
  // waits for this word before it overwrites what they may still read.
  alignas(64) std::atomic<uint32_t> queued_done{0};
  // How many peers sleep in a futex on one of the owner's words (the owner wakes them when it
  // publishes), when it last woke them (CLOCK_MONOTONIC ns: a woken peer learns what its sleep
  // cost, comm/spin.hpp), and the CPU it last published from (a waiter on that CPU yields).
  alignas(64) std::atomic<uint32_t> waiters{0};
  std::atomic<int64_t> woken_ns{0};
  std::atomic<int32_t> cpu{-1};
  // The collective the owner is in, (number + 1) << 32 | signature, in one word so that a
  // reader never pairs one call's number with another's signature: a waiting rank sees that a
  // peer issued a different call instead of waiting for it until the timeout.
  alignas(64) std::atomic<uint64_t> announced{0};
};

/// A rank's region, viewed through its mapping in this process.
class FlatRegion {
 public:
  static constexpr uint32_t kQueueEntries = 16;
  static constexpr uint64_t kQueuedBytes = 4096;
  static constexpr uint64_t kSlotHeader = sizeof(FlatSlotHeader);

  /// Bytes of a region with slots of `slot_bytes` (a multiple of 64).
  static uint64_t bytes_for(uint64_t slot_bytes);

  FlatRegion(uint8_t* base, uint64_t slot_bytes) : base_(base), slot_bytes_(slot_bytes) {}
  FlatWords& words() const { return *reinterpret_cast<FlatWords*>(base_); }
  /// The slot (by operation parity) where the owner publishes a call's input.
  FlatSlotHeader& slot(uint32_t parity) const;
  uint8_t* slot_data(uint32_t parity) const {
    return reinterpret_cast<uint8_t*>(&slot(parity)) + kSlotHeader;
  }
  /// The area (by parity) where the owner leaves the slice of a result it reduced.
  uint8_t* result(uint32_t parity) const;
  /// The queue entry of flat collective `seq`, a broadcast the owner roots.
  FlatSlotHeader& entry(uint32_t seq) const;
  uint8_t* entry_data(uint32_t seq) const {
    return reinterpret_cast<uint8_t*>(&entry(seq)) + kSlotHeader;
  }

 private:
  uint8_t* base_;
  uint64_t slot_bytes_;
};

/// What decides which calls are flat and how they run: equal on every rank of the host
/// (comm/flat.hpp's flat_fits, flat_direct, flat_queued and flat_rounds read it).
struct FlatLimits {
  uint64_t slot_bytes = 0;             // data capacity of a slot; 0: no flat path
  uint64_t direct_bytes = UINT64_MAX;  // input per rank from which a call may run direct
  bool rounds = false;  // all_reduce and reduce_scatter beyond the slots run through them in rounds
};

/// What the flat collectives of one communicator share: every rank's region, the thresholds,
/// the one counter its calls keep between them.
class FlatMemory {
 public:
  /// The thresholds every rank of the host computes alike: SHOAL_FLAT_MAX_BYTES (rounded up to
  /// cache lines) and SHOAL_FLAT_DIRECT_BYTES, the latter only beyond the slots on a host of
  /// more ranks than `host_cores` (there the copy direct saves is worth less than the wait for
  /// every reader). `local_ranks`: this host's ranks; `host_cores` 0: the CPUs online.
  struct Layout {
    uint64_t slot_bytes = 0;
    uint64_t direct_bytes = 0;  // 0: never direct
    bool oversubscribed = false;
    bool rounds = false;  // SHOAL_FLAT_ROUNDS
    /// The region the transport maps, and what its peers must hold equal.
    transport::shm::RegionSpec region() const;
    /// The limits of these settings, where every rank can (`all_can_pull`) or cannot read every
    /// other's memory: without that, or with direct_bytes 0, never direct.
    FlatLimits limits(bool all_can_pull) const;
  };
  static Layout layout_from_settings(int local_ranks, int host_cores);

  /// Over a mesh where every rank shares memory (ShmMesh::all_ranks_share_memory()).
  FlatMemory(const transport::shm::ShmMesh& mesh, const Layout& layout);

  const FlatRegion& of(int rank) const { return regions_[rank]; }
  /// The process of `rank` (its buffers are read and written in place there).
  int pid_of(int rank) const { return pids_[rank]; }
  const transport::shm::ShmMesh& mesh() const { return mesh_; }
  /// Which calls are flat and how, on this mesh (direct only where every rank can read every
  /// other's memory: probed).
  const FlatLimits& limits() const { return limits_; }
  /// Data capacity of every slot.
  uint64_t slot_bytes() const { return limits_.slot_bytes; }
  /// From how many bytes of input per rank a call may run direct (flat_direct() decides per
  /// collective); UINT64_MAX where never.
  uint64_t direct_bytes() const { return limits_.direct_bytes; }
  bool oversubscribed() const { return layout_.oversubscribed; }
  /// The last flat collective this rank knows every peer has finished (after one it waited for
  /// every peer in, the one before; after queued broadcasts, what it saw in their
  /// queued_done). Flat collectives of a communicator run one at a time.
  uint32_t& known_done() const { return known_done_; }

 private:
  const transport::shm::ShmMesh& mesh_;
  Layout layout_;
  FlatLimits limits_;
  std::vector<FlatRegion> regions_;
  std::vector<int> pids_;
  mutable uint32_t known_done_ = 0;
};

}  // namespace shoal::comm
