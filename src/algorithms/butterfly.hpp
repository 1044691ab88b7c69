// The butterfly engine behind recursive halving/doubling (recursive.cpp) and Swing
// (swing.cpp): over the p2 virtual ranks of a Fold, a reduce-scatter in `levels` steps — at
// step s virtual rank v exchanges with peer(v, s), keeps the blocks T(v, s+1) and sends the
// blocks T(peer, s+1), where T(q, levels) = {q} and T(q, s) = T(q, s+1) u T(peer(q, s), s+1) —
// and an all-gather that retraces the steps backwards. The peer function must be an involution
// at every step and make T(v, 0) every virtual rank.
#pragma once

#include <vector>

#include "algorithms/algorithms.hpp"

namespace shoal::algorithms {

using PeerFn = int (*)(int v, int step, int p2);

/// all_reduce (reduce-scatter + all-gather), reduce_scatter or all_gather, per a.collective.
void butterfly(Schedule& s, const CollectiveArgs& a, PeerFn peer);

/// T(v, step) of the header, sorted (exposed for tests).
std::vector<int> butterfly_blocks(int v, int step, int levels, int p2, PeerFn peer);

int halving_peer(int v, int step, int p2);  // v xor p2/2^(step+1): recursive halving
int swing_peer(int v, int step, int p2);    // v +- rho(step), rho(s) = sum_{i<=s} (-2)^i

}  // namespace shoal::algorithms
