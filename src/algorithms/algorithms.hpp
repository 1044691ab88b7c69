// The algorithm builders. Each appends the steps of one rank to a Schedule.
#pragma once

#include "algorithms/schedule.hpp"

namespace shoal::algorithms {

// ring.cpp — bandwidth-optimal rings, chunked so that reduction overlaps transfer
void ring_all_gather(Schedule& s, const CollectiveArgs& a);
void ring_reduce_scatter(Schedule& s, const CollectiveArgs& a);
void ring_all_reduce(Schedule& s, const CollectiveArgs& a);
// The same rings in CollectiveArgs::ring_order (rank order where it is null)
void link_ring_all_gather(Schedule& s, const CollectiveArgs& a);
void link_ring_reduce_scatter(Schedule& s, const CollectiveArgs& a);
void link_ring_all_reduce(Schedule& s, const CollectiveArgs& a);

// tree.cpp — binomial trees, pipelined by chunk
void binomial_broadcast(Schedule& s, const CollectiveArgs& a);
void binomial_reduce(Schedule& s, const CollectiveArgs& a);
void binomial_all_reduce(Schedule& s, const CollectiveArgs& a);  // reduce to 0 + broadcast

// recursive.cpp — recursive doubling / halving over a power-of-two fold
void recursive_doubling_all_reduce(Schedule& s, const CollectiveArgs& a);
void rabenseifner_all_reduce(Schedule& s, const CollectiveArgs& a);
void recursive_halving_reduce_scatter(Schedule& s, const CollectiveArgs& a);
void recursive_doubling_all_gather(Schedule& s, const CollectiveArgs& a);

// swing.cpp — Swing (De Sensi et al., NSDI 2024): the same butterfly with short-distance peers
void swing_all_reduce(Schedule& s, const CollectiveArgs& a);
void swing_reduce_scatter(Schedule& s, const CollectiveArgs& a);
void swing_all_gather(Schedule& s, const CollectiveArgs& a);

// bruck.cpp — Bruck all_gather, ceil(log2 p) steps for any p
void bruck_all_gather(Schedule& s, const CollectiveArgs& a);

// direct.cpp — every rank exchanges with every other at once: one step a phase
void direct_reduce_scatter(Schedule& s, const CollectiveArgs& a);
void direct_all_gather(Schedule& s, const CollectiveArgs& a);
void two_shot_all_reduce(Schedule& s, const CollectiveArgs& a);  // both, reduced chunks forwarded

// linear.cpp — direct exchanges
void pairwise_all_to_all(Schedule& s, const CollectiveArgs& a);
void linear_gather(Schedule& s, const CollectiveArgs& a);
void linear_scatter(Schedule& s, const CollectiveArgs& a);
void point_to_point(Schedule& s, const CollectiveArgs& a);

// barrier.cpp — dissemination barrier, ceil(log2 p) rounds of empty frames
void dissemination_barrier(Schedule& s, const CollectiveArgs& a);

/// Chunk size in bytes for `a`: chunk_bytes rounded down to whole elements (at least one).
inline uint64_t chunk_of(const CollectiveArgs& a) {
  const uint64_t es = size_of(a.dtype);
  const uint64_t c = a.chunk_bytes / es * es;
  return c < es ? es : c;
}
inline int mod(int x, int p) { return ((x % p) + p) % p; }

}  // namespace shoal::algorithms
