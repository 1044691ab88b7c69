// Averaging inside a stage over slow links: a butterfly all-reduce of compressed values, as
// hivemind's averager runs it. Every member owns one part of the vector; each sends every owner
// its piece of that part, compressed; the owner sums the pieces and sends the compressed sum to
// every member (two all_to_all_v calls over a shoal communicator). Error feedback: what
// compression dropped from a member's pieces, and from an owner's sum, is added to the next
// call's values before they are compressed, so over rounds nothing is lost, only delayed.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "shoal/communicator.hpp"
#include "swarm/net/codec.hpp"

namespace shoal::swarm {

/// The members' parts of `count` values: `weights.size() + 1` boundaries, part i in proportion
/// to weights[i] (a member's bandwidth; all equal when every weight is the same), each boundary
/// but the last a multiple of `align`. InvalidArgumentError for no weights or a weight that is
/// not positive and finite.
std::vector<size_t> part_bounds(size_t count, std::span<const double> weights, size_t align);

class CompressedAverager {
 public:
  explicit CompressedAverager(Codec codec, uint32_t block = kDefaultQuantBlock);

  /// Replaces `values[0, count)` on every rank of `comm` by their sum over the ranks, as the
  /// owners' compressed sums decode (so every rank holds the same numbers). `weights` sizes the
  /// parts (empty: equal parts). Every rank passes the same count and weights. The carried
  /// errors change only when the call returns: one that throws (a dead member) can be retried
  /// with the same values on a shrunk communicator.
  void all_reduce(Communicator& comm, float* values, size_t count,
                  std::span<const double> weights = {});

  /// Drops the carried errors (the vector's meaning changed: another stage).
  void reset();
  Codec codec() const { return codec_; }
  /// Bytes this member sent to the others, over every call.
  uint64_t bytes_sent() const { return bytes_sent_; }

 private:
  Codec codec_;
  uint32_t block_;
  std::vector<float> residual_;        // per value of the vector: dropped from this member's pieces
  std::vector<float> owner_residual_;  // per value of the part it owns: dropped from the sums
  size_t owner_lo_ = 0, owner_hi_ = 0;
  uint64_t bytes_sent_ = 0;
};

}  // namespace shoal::swarm
