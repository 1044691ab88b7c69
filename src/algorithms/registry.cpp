#include "algorithms/registry.hpp"

#include "algorithms/algorithms.hpp"

namespace shoal::algorithms {

const std::vector<AlgorithmInfo>& registry() {
  static const std::vector<AlgorithmInfo> table = {
      {"ring", Collective::all_reduce, "reduce-scatter then all-gather around a ring, chunk-pipelined",
       "any world size", ring_all_reduce},
      {"ring", Collective::all_gather, "p-1 steps around a ring, chunk-pipelined", "any world size",
       ring_all_gather},
      {"ring", Collective::reduce_scatter, "p-1 steps around a ring, reduction overlapping transfer",
       "any world size", ring_reduce_scatter},
      {"binomial", Collective::broadcast, "binomial tree from the root, chunk-pipelined",
       "any world size", binomial_broadcast},
      {"binomial", Collective::reduce, "binomial tree towards the root, chunk-pipelined",
       "commutative ops (all of shoal's)", binomial_reduce},
      {"pairwise", Collective::all_to_all, "step i exchanges with ranks r+i and r-i",
       "any world size", pairwise_all_to_all},
      {"linear", Collective::gather, "every rank sends to the root at once", "any world size",
       linear_gather},
      {"linear", Collective::scatter, "the root sends to every rank at once", "any world size",
       linear_scatter},
      {"dissemination", Collective::barrier, "ceil(log2 p) rounds of empty messages",
       "any world size", dissemination_barrier},
      {"direct", Collective::send, "one frame to the peer", "", point_to_point},
      {"direct", Collective::recv, "one frame from the peer", "", point_to_point},
  };
  return table;
}

Schedule build_schedule(const CollectiveArgs& args, std::string* algorithm_name) {
  Schedule s;
  for (const auto& row : registry()) {
    if (row.collective != args.collective) continue;
    if (algorithm_name) *algorithm_name = std::string(row.name);
    row.build(s, args);
    return s;
  }
  return s;
}

}  // namespace shoal::algorithms
