// Dissemination barrier (Hensgen, Finkel & Manber): in round k each rank signals r + 2^k and
// waits for r - 2^k; after ceil(log2 p) rounds every rank has heard, transitively, from all.
#include "algorithms/algorithms.hpp"

namespace shoal::algorithms {

void dissemination_barrier(Schedule& s, const CollectiveArgs& a) {
  const int p = a.size, r = a.rank;
  uint32_t prev = Schedule::kNone;
  for (int k = 1; k < p; k <<= 1) {
    s.send(mod(r + k, p), {Buffer::input, 0, 0}, {prev});
    prev = s.recv(mod(r - k, p), {Buffer::output, 0, 0});
  }
}

}  // namespace shoal::algorithms
