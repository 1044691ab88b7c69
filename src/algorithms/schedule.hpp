// Algorithms as schedules: for one (collective, rank, world size, count, dtype) an algorithm
// emits the steps this rank performs — send, recv, reduce, copy, finalize — over byte ranges
// of three buffers, with the dependencies between steps. An executor runs them (src/comm/
// engine.cpp on sockets); the same schedule can be run in virtual time or checked symbolically.
//
// Ordering rule the executors rely on: the sends of a rank to one peer reach the wire in
// step order, and the receives from one peer are matched in step order, so an algorithm must
// emit, for every pair (a, b), a's sends to b in the same order as b's receives from a.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "shoal/types.hpp"

namespace shoal::algorithms {

enum class Collective : uint8_t {
  all_reduce,
  all_gather,
  reduce_scatter,
  broadcast,
  reduce,
  all_to_all,
  gather,
  scatter,
  barrier,
  send,
  recv,
};
std::string_view to_string(Collective c);

struct AlgorithmInfo;  // a row of the table (registry.hpp)

/// What a collective call asks for, as every rank sees it.
struct CollectiveArgs {
  Collective collective = Collective::all_reduce;
  DataType dtype = DataType::float32;
  ReduceOp op = ReduceOp::sum;
  uint64_t count = 0;  // elements, with the meaning of the public API for this collective
  int root = -1;       // rooted collectives
  int peer = -1;       // send/recv
  int tag = 0;         // send/recv: must match between the pair
  int rank = 0;
  int size = 1;
  bool in_place = false;             // input and output are the same memory (as the API defines it)
  uint64_t chunk_bytes = 512 << 10;  // pipeline granularity
  /// The row the dispatcher chose (src/tune); null: the first row of the collective. A
  /// matching SHOAL_ALGO rule still wins (algorithms::choose), and the name is in signature().
  const AlgorithmInfo* algorithm = nullptr;
  /// The caller asked for `algorithm` on this very call (CallOptions): it beats SHOAL_ALGO.
  bool forced = false;
  /// What earlier calls no rank has checked against every other left to check (the signature
  /// of the last queued flat broadcast, which chains those before it; 0: none), mixed into
  /// signature() so that the next call that compares signatures catches a difference there.
  uint64_t unchecked = 0;
  /// The rows that follow measured links (AlgorithmInfo::follows_links): the ranks in ring
  /// order, a permutation of 0..size-1 equal on every rank (tune/links.hpp computes it); null:
  /// rank order. Mixed into signature().
  const std::vector<int>* ring_order = nullptr;
};

enum class Buffer : uint8_t { input, output, scratch };

struct Slice {
  Buffer buffer = Buffer::input;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

enum class StepKind : uint8_t {
  send,      // src -> peer
  recv,      // peer -> dst
  reduce,    // dst = src op src2 (element-wise; dst may be src or src2)
  copy,      // dst = src (skipped when they are the same memory)
  finalize,  // dst /= world size (ReduceOp::avg only)
};

struct Step {
  StepKind kind;
  int peer = -1;
  Slice dst{};   // recv, reduce, copy, finalize
  Slice src{};   // send, reduce (first operand), copy
  Slice src2{};  // reduce (second operand)
};

/// Steps in emission order and dependency edges (before -> after; before < after always).
class Schedule {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;
  using Deps = std::initializer_list<uint32_t>;

  std::vector<Step> steps;
  std::vector<std::pair<uint32_t, uint32_t>> edges;
  uint64_t scratch_bytes = 0;

  uint32_t send(int peer, Slice src, Deps after = {}) {
    return add({StepKind::send, peer, {}, src, {}}, after);
  }
  uint32_t recv(int peer, Slice dst, Deps after = {}) {
    return add({StepKind::recv, peer, dst, {}, {}}, after);
  }
  uint32_t reduce(Slice dst, Slice a, Slice b, Deps after = {}) {
    return add({StepKind::reduce, -1, dst, a, b}, after);
  }
  uint32_t copy(Slice dst, Slice src, Deps after = {}) {
    return add({StepKind::copy, -1, dst, src, {}}, after);
  }
  uint32_t finalize(Slice dst, Deps after = {}) {
    return add({StepKind::finalize, -1, dst, {}, {}}, after);
  }
  /// Makes `step` wait for `on` (kNone is ignored).
  void add_dep(uint32_t step, uint32_t on) {
    if (on != kNone) edges.emplace_back(on, step);
  }

 private:
  uint32_t add(Step s, Deps after) {
    auto id = static_cast<uint32_t>(steps.size());
    steps.push_back(s);
    for (uint32_t d : after) add_dep(id, d);
    return id;
  }
};

/// Splits `total` bytes into pieces of at most `chunk` bytes, aligned to `elem` bytes.
/// Returns the number of pieces (at least 1, even for 0 bytes) and the i-th range.
struct Chunking {
  uint64_t total, chunk, elem;
  uint64_t pieces() const;
  uint64_t offset(uint64_t i) const;
  uint64_t length(uint64_t i) const;
};

/// Element range [begin, end) of block `b` when `count` elements are split over `p` blocks as
/// evenly as possible (the first count % p blocks get one extra element).
uint64_t block_begin(uint64_t count, int p, int b);
inline uint64_t block_count(uint64_t count, int p, int b) {
  return block_begin(count, p, b + 1) - block_begin(count, p, b);
}

/// Builds the schedule of the algorithm chosen for `args` (algorithms::choose, registry.hpp);
/// names that row in `algorithm_name` and `row` where given.
Schedule build_schedule(const CollectiveArgs& args, std::string* algorithm_name = nullptr,
                        const AlgorithmInfo** row = nullptr);

/// Sizes in bytes of the input and output buffers a call with `args` uses on this rank.
uint64_t input_bytes(const CollectiveArgs& args);
uint64_t output_bytes(const CollectiveArgs& args);

/// A 32-bit digest of the arguments every rank must agree on; carried by every frame.
uint32_t signature(const CollectiveArgs& args);

}  // namespace shoal::algorithms
