// Flat collectives: all_reduce up to SHOAL_FLAT_MAX_BYTES among ranks that all share one
// host's memory, through shared slots, with no schedule (and, for a blocking call, no
// progress-thread hand-off). Each rank publishes its input in its own segment and raises its
// sequence number. Up to 16 KiB every rank then reduces all inputs itself; above, each rank
// reduces its slice of all inputs into its result area, publishes it, and copies the others'
// slices (less reading per rank). Reduction is in rank order, so every rank gets the same
// bits. Two slots by operation parity make a closing barrier unnecessary: a rank rewrites a
// slot only after every peer published the next operation, which it does only when done.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

#include "shoal/types.hpp"
#include "transport/shm/shm_mesh.hpp"

namespace shoal::comm {

/// The error text for a peer that closed its communicator instead of joining all_reduce #number.
std::string closed_without_joining(int rank, uint64_t number, int peer);

/// Announces, in this rank's segment, the collective it enters (engine or flat alike).
void announce_collective(const transport::shm::ShmMesh& mesh, int rank, uint64_t number, uint32_t signature);

/// Flat all_reduce number `seq` (1, 2, ... in issue order, the same on every rank), which is
/// collective number `op_number` of the communicator, with `signature`.
class FlatAllReduce {
 public:
  FlatAllReduce(const transport::shm::ShmMesh& mesh, int rank, int size, uint32_t seq, uint64_t op_number,
                uint32_t signature, const void* input, void* output, uint64_t count, DataType dtype,
                ReduceOp op);
  /// Does what can be done without waiting; true once finished. Throws MismatchError when a
  /// peer issued a different call at this point.
  bool advance();
  /// The peer it waits for when advance() returned false.
  int waiting_for() const { return next_; }
  /// Runs to the end on this thread: spins, yields, then sleeps on a futex between advances.
  /// `check(rank)` runs while waiting for `rank` and throws to abandon (broken, timeout).
  void run(const std::function<void(int waiting_for)>& check);

 private:
  uint32_t target() const;
  void watch(int q) const;

  const transport::shm::ShmMesh& mesh_;
  int rank_, size_;
  uint32_t seq_;
  uint64_t op_number_;
  uint32_t signature_;
  const void* input_;
  void* output_;
  uint64_t count_;
  DataType dtype_;
  ReduceOp op_;
  int stage_ = 0;  // 0: not yet published; 1: published, reducing;
                   // 2: (large) own slice reduced and published, gathering the others
  int next_ = 0;   // the next peer to look at
};

}  // namespace shoal::comm
