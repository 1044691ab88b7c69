// POSIX shared-memory segments: one per rank, holding the rings this rank writes to each
// local peer, then a region the layer above lays out (the flat collectives':
// comm/flat_memory.hpp), of which the transport knows only the size. Named after the communicator's
// random id, so two jobs never collide, and unlinked as soon as every peer has mapped them, so
// nothing is left in /dev/shm even when a rank is killed later. A rank killed before that (during
// set-up) leaves its name behind: the other ranks' failed set-up removes it, and sweep_orphans()
// removes any whose creator is gone.
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
  uint64_t region_bytes = 0;  // the region after the rings (RegionSpec), checked equal
  uint64_t region_check = 0;  // what the region's owner says every peer must hold equal
  // Cross-memory attach (process_vm_readv): the owner's pid and the address, in the owner's
  // memory, of a known value that peers try to read; can_pull[i] = 1 when the owner could read
  // the probe of the local rank with index i (then i may send it frames by reference).
  int32_t pid = 0;
  uint64_t probe_address = 0;
  // The owner's pid namespace (inode of /proc/self/ns/pid): `pid` means something only there.
  uint64_t pid_namespace = 0;
  uint8_t can_pull[256] = {};
  alignas(64) std::atomic<uint32_t> sleeping{0};  // the owner's progress thread sleeps
  // Written once when the owner breaks, before its sockets close: why (see Stream::post_abort).
  alignas(64) std::atomic<uint32_t> aborted{0};
  uint32_t abort_code = 0;
  int32_t abort_culprit = -1;
  char abort_message[1012] = {};
};

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
  /// The region after the rings (SegmentHeader::region_bytes), on a cache line.
  uint8_t* region() const;

  /// Removes the name (the mapping stays valid). Idempotent.
  void unlink();

  static size_t bytes_for(uint32_t rings, uint64_t ring_bytes, uint64_t region_bytes);

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
