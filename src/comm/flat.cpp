#include "comm/flat.hpp"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <ctime>

#include "core/check.hpp"
#include "core/config.hpp"
#include "algorithms/schedule.hpp"
#include "core/reduce.hpp"

namespace shoal::comm {

namespace {

using transport::shm::SegmentHeader;

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

// The owner published operation `seq` (or a later one) in `word`: wrap-safe comparison.
inline bool reached(const std::atomic<uint32_t>& word, uint32_t seq) {
  return static_cast<int32_t>(word.load(std::memory_order_acquire) - seq) >= 0;
}
inline bool reached(const SegmentHeader& h, uint32_t seq) { return reached(h.flat_seq, seq); }

// Spin briefly, then yield the core, then sleep on a futex (shared memory: not private), with
// a bounded sleep so that `check` runs regularly (broken communicator, timeout).
void wait_for(SegmentHeader& h, std::atomic<uint32_t>& word, uint32_t seq, int who,
              const std::function<void(int)>& check) {
  for (int i = 0; i < 64; ++i) {
    if (reached(word, seq)) return;
    cpu_relax();
  }
  static const int64_t spin_us = config::get_int("SHOAL_SPIN_US");
  const auto yield_until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  while (std::chrono::steady_clock::now() < yield_until) {
    if (reached(word, seq)) return;
    sched_yield();
  }
  for (;;) {
    if (reached(word, seq)) return;  // a peer that published and then left is not a failure
    check(who);
    h.flat_waiters.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = word.load(std::memory_order_seq_cst);
    if (static_cast<int32_t>(seen - seq) < 0) {
      timespec ts{0, 20 * 1000 * 1000};  // wake at least every 20 ms to run `check`
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, seen, &ts, nullptr, 0);
    }
    h.flat_waiters.fetch_sub(1, std::memory_order_seq_cst);
    if (reached(word, seq)) return;
  }
}

void publish(SegmentHeader& h, std::atomic<uint32_t>& word, uint32_t seq) {
  word.store(seq, std::memory_order_seq_cst);
  if (h.flat_waiters.load(std::memory_order_seq_cst) != 0)
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// Up to this size every rank reduces the whole message; above, each rank reduces its slice
// and the others copy it (less reading, one more synchronisation).
constexpr uint64_t kWholeBytes = 16 * 1024;

}  // namespace

std::string closed_without_joining(int rank, uint64_t number, int peer) {
  return "rank " + std::to_string(rank) + ": all_reduce #" + std::to_string(number) + ": rank " +
         std::to_string(peer) + " closed its communicator without joining it: the ranks issued "
         "different sequences of calls";
}

void announce_collective(const transport::shm::ShmMesh& mesh, int rank, uint64_t number, uint32_t signature) {
  auto& h = mesh.segment_of(rank).header();
  h.op_signature.store(signature, std::memory_order_relaxed);
  h.op_number.store(static_cast<uint32_t>(number + 1), std::memory_order_release);
}

namespace {
struct SlotHeader {
  uint32_t signature;
  uint32_t bytes;
};

[[noreturn]] void mismatch(int rank, int peer, uint64_t number, const std::string& what) {
  SHOAL_THROW(Mismatch, "rank " << rank << ": all_reduce #" << number << ": rank " << peer << " " << what
                                << ": every rank must issue the same collectives with the same "
                                   "counts, types and ops, in the same order",
              peer);
}
}  // namespace

FlatAllReduce::FlatAllReduce(const transport::shm::ShmMesh& mesh, int rank, int size, uint32_t seq,
                             uint64_t op_number, uint32_t signature, const void* input, void* output,
                             uint64_t count, DataType dtype, ReduceOp op)
    : mesh_(mesh), rank_(rank), size_(size), seq_(seq), op_number_(op_number), signature_(signature),
      input_(input), output_(output), count_(count), dtype_(dtype), op_(op) {
  announce_collective(mesh, rank, op_number, signature);
}

uint32_t FlatAllReduce::target() const { return seq_; }

void FlatAllReduce::watch(int q) const {
  // A peer that entered this same collective with another signature issued a different call
  // (perhaps one that is not flat, so it would never publish here).
  const auto& h = mesh_.segment_of(q).header();
  if (h.op_number.load(std::memory_order_acquire) == static_cast<uint32_t>(op_number_ + 1) &&
      h.op_signature.load(std::memory_order_relaxed) != signature_)
    mismatch(rank_, q, op_number_, "entered this collective with different arguments");
}

bool FlatAllReduce::advance() {
  using transport::shm::Segment;
  const uint64_t es = size_of(dtype_), bytes = count_ * es;
  const bool whole = bytes <= kWholeBytes;
  const auto& mine = mesh_.segment_of(rank_);
  if (stage_ == 0) {
    // The slot of this parity was last used by operation seq-2, and every peer has published
    // seq-1 (so it is done with seq-2): this rank saw that while completing seq-1 (operations
    // complete in order, and a failed one breaks the communicator). No wait needed here.
    uint8_t* slot = mine.flat_slot(seq_);
    SlotHeader sh{signature_, static_cast<uint32_t>(bytes)};
    std::memcpy(slot, &sh, sizeof sh);
    std::memcpy(slot + Segment::kFlatSlotHeader, input_, bytes);
    publish(mine.header(), mine.header().flat_seq, seq_);
    stage_ = 1;
    next_ = 0;
  }
  // Which elements this rank reduces: all of them, or its slice.
  const uint64_t lo = whole ? 0 : algorithms::block_begin(count_, size_, rank_);
  const uint64_t hi = whole ? count_ : algorithms::block_begin(count_, size_, rank_ + 1);
  uint8_t* dst = whole ? static_cast<uint8_t*>(output_) : mine.flat_result(seq_) + lo * es;
  if (stage_ == 1) {
    // Reduce in rank order on every rank: identical results everywhere. Our own contribution
    // is read back from our slot (the output may be the input).
    for (; next_ < size_; ++next_) {
      const auto& seg = mesh_.segment_of(next_);
      if (next_ != rank_ && !reached(seg.header(), seq_)) {
        watch(next_);
        return false;
      }
      const uint8_t* peer_slot = seg.flat_slot(seq_);
      SlotHeader theirs;
      std::memcpy(&theirs, peer_slot, sizeof theirs);
      if (theirs.signature != signature_ || theirs.bytes != bytes)
        mismatch(rank_, next_, op_number_,
                 "passed " + std::to_string(theirs.bytes) + " bytes where this rank passed " +
                     std::to_string(bytes) + " (or another type or op)");
      const uint8_t* data = peer_slot + Segment::kFlatSlotHeader + lo * es;
      if (hi == lo) continue;
      if (next_ == 0) std::memcpy(dst, data, (hi - lo) * es);
      else kernels::reduce_into(dst, data, hi - lo, dtype_, op_);
    }
    if (op_ == ReduceOp::avg && hi > lo) kernels::finalize_avg(dst, hi - lo, dtype_, size_);
    if (whole) return true;
    publish(mine.header(), mine.header().flat_done, seq_);
    stage_ = 2;
    next_ = 0;
  }
  // Gather the slices the peers reduced.
  for (; next_ < size_; ++next_) {
    const auto& seg = mesh_.segment_of(next_);
    if (next_ != rank_ && !reached(seg.header().flat_done, seq_)) return false;
    const uint64_t b = algorithms::block_begin(count_, size_, next_);
    const uint64_t e = algorithms::block_begin(count_, size_, next_ + 1);
    if (e > b) std::memcpy(static_cast<uint8_t*>(output_) + b * es, seg.flat_result(seq_) + b * es, (e - b) * es);
  }
  return true;
}

void FlatAllReduce::run(const std::function<void(int)>& check) {
  auto watch_and_check = [&](int q) {
    watch(q);
    check(q);
  };
  while (!advance()) {
    auto& h = mesh_.segment_of(next_).header();
    wait_for(h, stage_ == 2 ? h.flat_done : h.flat_seq, target(), next_, watch_and_check);
  }
}

}  // namespace shoal::comm
