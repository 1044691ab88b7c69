// Swing (De Sensi et al., NSDI 2024): the butterfly of recursive halving/doubling, but at step
// s rank r talks to r + rho(s) (even r) or r - rho(s) (odd r), rho(s) = sum_{i<=s} (-2)^i =
// 1, -1, 3, -5, 11, ... — peers stay close on rings and tori, which cuts the distance data
// travels compared with recursive doubling's 2^s. The bandwidth-optimal variant
// (reduce-scatter + all-gather); blocks a rank keeps are not contiguous, so a step sends one
// frame per run of consecutive blocks. Non-powers of two fold first, as the other butterflies.
#include "algorithms/butterfly.hpp"

namespace shoal::algorithms {

void swing_all_reduce(Schedule& s, const CollectiveArgs& a) { butterfly(s, a, swing_peer); }
void swing_reduce_scatter(Schedule& s, const CollectiveArgs& a) { butterfly(s, a, swing_peer); }
void swing_all_gather(Schedule& s, const CollectiveArgs& a) { butterfly(s, a, swing_peer); }

}  // namespace shoal::algorithms
