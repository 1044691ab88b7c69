// One call of a communicator as the API issued it: what the planner (comm/plan.hpp) decides
// from and the executors run.
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/registry.hpp"
#include "algorithms/schedule.hpp"
#include "shoal/types.hpp"

namespace shoal::comm {

/// A piece of a vectored operation's buffer: `bytes` (> 0) at `data`, at `offset` in the buffer
/// the pieces make up in order.
struct Piece {
  uint8_t* data = nullptr;
  uint64_t bytes = 0;
  uint64_t offset = 0;
};

/// The buffers of a vectored call, as pieces.
struct Pieces {
  std::vector<Piece> input, output;
  bool in_place = false;  // the same pieces on both sides
};

/// One call, as the API issued it. Buffers as in the public API: in place when input aliases
/// output; a non-root's unused buffer is null.
struct Request {
  algorithms::Collective collective = algorithms::Collective::all_reduce;
  const void* input = nullptr;
  void* output = nullptr;
  uint64_t count = 0;  // elements, with the public API's meaning for the collective
  DataType dtype = DataType::uint8;
  ReduceOp op = ReduceOp::sum;
  int root = -1;
  int peer = -1;  // send/recv
  int tag = 0;
  bool blocking = false;  // the caller waits at once (a flat call may then run on its thread)
  /// The row the caller named (CallOptions::algorithm): it runs, past everything else.
  const algorithms::AlgorithmInfo* forced = nullptr;
  /// The path the caller named instead (CallOptions::algorithm "flat" or "hierarchical").
  algorithms::NamedPath forced_path = algorithms::NamedPath::none;
  /// A call of the public API, which the hierarchy may take; the library's own calls (at
  /// creation and split) never do.
  bool may_use_hierarchy = false;
  /// A vectored call (the Segment forms): its buffers are these pieces, not input and output
  /// (the caller's, until an executor takes them). Null for every other call, which keeps a
  /// Request a plain, cheaply copied value.
  Pieces* vectored = nullptr;
};

/// A call of `collective` on these buffers, every other field at its default.
inline Request request_of(algorithms::Collective collective, const void* input, void* output,
                          uint64_t count, DataType dtype, ReduceOp op = ReduceOp::sum,
                          int root = -1) {
  Request r;
  r.collective = collective;
  r.input = input;
  r.output = output;
  r.count = count;
  r.dtype = dtype;
  r.op = op;
  r.root = root;
  return r;
}

/// A blocking call of the library's own (at creation) that runs `row`, and nothing else.
inline Request forced_call(algorithms::Collective collective, const void* input, void* output,
                           uint64_t count, DataType dtype, ReduceOp op,
                           const algorithms::AlgorithmInfo* row) {
  Request r = request_of(collective, input, output, count, dtype, op);
  r.blocking = true;
  r.forced = row;
  return r;
}

}  // namespace shoal::comm
