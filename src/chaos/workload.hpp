// The chaos soak's workload: a sequence of collectives every member derives from (seed,
// membership epoch, op index) without talking, with inputs every member can recompute, so
// that each member checks each result exactly (docs/reliability.md, "Chaos soak").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shoal/communicator.hpp"
#include "shoal/types.hpp"

namespace shoal::chaos {

enum class Kind { all_reduce, all_gather, reduce_scatter, broadcast, barrier };
const char* kind_name(Kind k);

struct OpSpec {
  Kind kind = Kind::barrier;
  DataType dtype = DataType::float32;
  ReduceOp op = ReduceOp::sum;
  size_t count = 0;  // per rank (all_gather: contributed; reduce_scatter: received)
  uint64_t root_pick = 0;
  int root(int size) const { return static_cast<int>(root_pick % static_cast<uint64_t>(size)); }
};

/// The op with index `op` of membership `epoch` in a group of `size` ranks: about half of
/// them all_reduce, small counts mostly, some odd, a few of 2-10 MiB.
OpSpec derive_op(uint64_t seed, int64_t epoch, int64_t op, int size);

/// Element `i` of the input of the member with stable id `id`: a small integer (-9..9), so
/// that sums over up to 64 ranks are exact in float32.
int input_value(int id, int64_t epoch, int64_t op, size_t i);

/// What a member sends and what it expects back for one op.
template <class T>
struct Buffers {
  std::vector<T> send, recv, expect;
};

/// The inputs of member `members[rank]` and the result every exact implementation returns;
/// recv is filled with a sentinel that no result has. `members`: the stable ids by rank.
template <class T>
Buffers<T> prepare(const OpSpec& s, const std::vector<int>& members, int rank, int64_t epoch,
                   int64_t op);

/// "" when recv equals expect, else the first difference and how many elements differ.
template <class T>
std::string difference(const OpSpec& s, const Buffers<T>& b);

/// Runs the op on `comm` (rank r is member members[r]) and checks its result.
/// Returns "" when right, else a description of the first difference.
std::string run_op(Communicator& comm, const OpSpec& s, const std::vector<int>& members,
                   int64_t epoch, int64_t op);

}  // namespace shoal::chaos
