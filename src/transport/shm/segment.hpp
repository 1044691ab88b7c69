// POSIX shared-memory segments: one per rank, holding the rings this rank writes to each
// local peer. Named after the communicator's random id, so two jobs never collide, and
// unlinked as soon as every peer has mapped them, so nothing is left in /dev/shm even when a
// rank is killed later. A rank killed before that (during set-up) leaves its name behind:
// the other ranks' failed set-up removes it, and sweep_orphans() removes any whose creator is
// gone.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace shoal::transport::shm {

inline constexpr uint32_t kSegmentMagic = 0x53484d31;  // "SHM1"

/// A single-producer single-consumer byte ring: the producer advances head, the consumer tail.
struct alignas(64) RingHeader {
  std::atomic<uint64_t> head{0};
  char pad0[56];
  std::atomic<uint64_t> tail{0};
  char pad1[56];
};
static_assert(sizeof(RingHeader) == 128);

struct alignas(64) SegmentHeader {
  uint32_t magic = kSegmentMagic;
  int32_t rank = -1;
  uint64_t comm_id = 0;
  uint64_t ring_bytes = 0;  // capacity of each ring (a power of two)
  uint32_t rings = 0;       // one per local rank (the slot of the owner itself is unused)
  uint32_t pad = 0;
  uint64_t flat_bytes = 0;  // data capacity of each flat slot and result area
  uint64_t flat_direct_bytes =
      0;  // the owner's direct threshold (ShmMesh; 0: never), checked equal
  // Cross-memory attach (process_vm_readv): the owner's pid and the address, in the owner's
  // memory, of a known value that peers try to read; can_pull[i] = 1 when the owner could read
  // the probe of the local rank with index i (then i may send it frames by reference).
  int32_t pid = 0;
  uint64_t probe_address = 0;
  // The owner's pid namespace (inode of /proc/self/ns/pid): `pid` means something only there.
  uint64_t pid_namespace = 0;
  uint8_t can_pull[256] = {};
  alignas(64) std::atomic<uint32_t> sleeping{0};  // the owner's progress thread sleeps
  // Flat collectives (src/comm/flat.cpp): the last operation whose slice the owner reduced (in
  // its own line: peers poll it), and how many peers sleep in a futex on one of the owner's
  // words (the owner wakes them when it publishes).
  alignas(64) std::atomic<uint32_t> flat_done{0};
  // (direct flat collectives) The last operation in which the owner finished reading (and
  // writing) its peers' memory: a rank returns only once every peer raised it.
  alignas(64) std::atomic<uint32_t> flat_read{0};
  // (queued flat broadcasts) The last one the owner is done with: wrote it into its queue, as
  // the root, or copied it out of the root's. A rank that did not wait for every peer in a
  // call waits for this word before it overwrites what they may still read.
  alignas(64) std::atomic<uint32_t> flat_queued_done{0};
  alignas(64) std::atomic<uint32_t> flat_waiters{0};
  // When the owner last woke sleepers on one of its words (CLOCK_MONOTONIC ns): a woken peer
  // learns from it what its sleep cost (comm/spin.hpp).
  std::atomic<int64_t> flat_woken_ns{0};
  // The CPU the owner ran on when it last published one of its words: a waiter on the same CPU
  // yields to it rather than polling (unbound ranks the scheduler put on one core).
  std::atomic<int32_t> flat_cpu{-1};
  // The collective the owner is in, (number + 1) << 32 | signature, in one word so that a
  // reader never pairs one call's number with another's signature: lets a waiting rank see
  // that a peer issued a different call instead of waiting for it until the timeout.
  alignas(64) std::atomic<uint64_t> op_announced{0};
  // Written once when the owner breaks, before its sockets close: why (see Stream::post_abort).
  alignas(64) std::atomic<uint32_t> aborted{0};
  uint32_t abort_code = 0;
  int32_t abort_culprit = -1;
  char abort_message[1012] = {};
};

/// The head of a flat-collective slot. `seq` is stored last (release): a peer that sees it sees
/// the rest, and up to 48 bytes of data arrive in the same cache line as the flag.
struct FlatSlotHeader {
  std::atomic<uint32_t> seq{0};
  uint32_t signature = 0;
  uint64_t bytes = 0;
};
static_assert(sizeof(FlatSlotHeader) == 16);  // slots start on a cache line: 48 data bytes share it

class Segment {
 public:
  /// Creates and maps a new segment (fails if the name exists). Throws on failure.
  static std::unique_ptr<Segment> create(const std::string& name, size_t bytes);
  /// Maps an existing segment of another rank. Throws on failure.
  static std::unique_ptr<Segment> open(const std::string& name, size_t bytes);
  ~Segment();

  uint8_t* base() const { return base_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  SegmentHeader& header() const { return *reinterpret_cast<SegmentHeader*>(base_); }
  RingHeader& ring(uint32_t slot) const;
  uint8_t* ring_data(uint32_t slot) const;
  /// The two slots (by operation parity) where the owner publishes flat-collective inputs:
  /// a FlatSlotHeader, then the data, whose first bytes share the header's cache line.
  FlatSlotHeader& flat_slot(uint32_t parity) const;
  uint8_t* flat_data(uint32_t parity) const {
    return reinterpret_cast<uint8_t*>(&flat_slot(parity)) + kFlatSlotHeader;
  }
  /// The two areas (by parity) where the owner leaves the slice of a flat result it reduced.
  uint8_t* flat_result(uint32_t parity) const;
  /// The owner's queue of small broadcasts it roots: flat collective `seq` in entry
  /// seq % kQueueEntries, a FlatSlotHeader then up to kQueuedBytes of data (comm/flat.hpp).
  static constexpr uint32_t kQueueEntries = 16;
  static constexpr uint64_t kQueuedBytes = 4096;
  FlatSlotHeader& flat_entry(uint32_t seq) const;
  uint8_t* flat_entry_data(uint32_t seq) const {
    return reinterpret_cast<uint8_t*>(&flat_entry(seq)) + kFlatSlotHeader;
  }

  /// Removes the name (the mapping stays valid). Idempotent.
  void unlink();

  static size_t bytes_for(uint32_t rings, uint64_t ring_bytes, uint64_t flat_bytes);
  static constexpr size_t kFlatSlotHeader = sizeof(FlatSlotHeader);

 private:
  Segment(std::string name, uint8_t* base, size_t size)
      : name_(std::move(name)), base_(base), size_(size) {}
  std::string name_;
  uint8_t* base_;
  size_t size_;
  bool linked_ = true;
};

/// The segment name of `rank` in communicator `comm_id`.
std::string segment_name(uint64_t comm_id, int rank);

/// Copies `len` bytes at `remote_addr` in process `pid` to `dst` with process_vm_readv (cross-
/// memory attach: one copy). False with `error` set when the kernel refuses or the process is gone.
bool pull_from(int pid, uint64_t remote_addr, void* dst, uint64_t len, std::string& error);
/// The other way: copies `len` bytes at `src` to `remote_addr` in process `pid` with
/// process_vm_writev (the same permission as reading: the CMA probe covers both).
bool push_to(int pid, uint64_t remote_addr, const void* src, uint64_t len, std::string& error);

/// This process's pid namespace, as SegmentHeader::pid_namespace records it (0: unknown).
uint64_t own_pid_namespace();

/// What a segment's header says about who made it (0 / -1 while the header is not written).
struct SegmentOwner {
  int32_t rank = -1;
  int32_t pid = 0;
  uint64_t pid_namespace = 0;
};
/// Reads it from /dev/shm without mapping the segment ("shoal-..." with or without the leading
/// '/'); nullopt when the file cannot be read or is not a shoal segment.
std::optional<SegmentOwner> segment_owner(const std::string& name);

/// Unlinks every shoal segment in /dev/shm whose creator, a process of this pid namespace, no
/// longer exists (killed during a communicator's set-up, before its peers unlinked it). A
/// segment whose header is not written yet, or whose creator lives elsewhere, is left alone.
/// Returns how many it removed.
int sweep_orphans();

}  // namespace shoal::transport::shm
