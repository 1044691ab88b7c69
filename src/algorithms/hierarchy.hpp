// Hierarchical all_reduce, all_gather and reduce_scatter as one schedule per rank, composed
// from rows of the registry (PCCL's two-level scheme, the plan of src/comm/hierarchical.cpp):
// hosts of L consecutive ranks (rank r = host h * L + local rank l); an intra-host phase among
// the L ranks of a host and an inter-host phase among the rank-aligned group {h' * L + l},
// all groups at once, so every host moves data over every NIC.
//
//   all_reduce     = local reduce_scatter (block l of the vector) -> all_reduce of that block on
//                    the aligned group -> local all_gather; all in place in the output.
//   all_gather     = aligned all_gather of the rank's block (H blocks, scratch) -> local
//                    all_gather of those (L x H blocks, scratch, local-rank major) -> one copy per
//                    block into global rank order.
//   reduce_scatter = one copy per block into local-rank-major order (scratch) -> local
//                    reduce_scatter (each rank keeps the H blocks aligned with it, summed over its
//                    host) -> aligned reduce_scatter of those into the output.
//
// Each phase is the sub-schedule of a registry row for the sub-call (its peers renumbered, its
// buffers placed in the caller's), and starts after the rank's previous phase has finished, as
// the sub-communicator calls of src/comm/hierarchical.cpp do. Differences from that runtime
// path: its all_gather and reduce_scatter receive straight into place (no copies), and its
// phases run whatever the sub-communicators' dispatchers pick. avg sums in every phase and
// divides once at the end. The simulator (src/sim) runs these schedules.
#pragma once

#include <string>
#include <string_view>

#include "algorithms/registry.hpp"

namespace shoal::algorithms {

struct HierarchyPlan {
  int ranks_per_host = 1;           // L; must divide the world size
  std::string_view local = "ring";  // the row every intra-host phase runs
  std::string_view inter = "ring";  // the row the inter-host phase runs
};

/// Appends rank a.rank's hierarchical schedule of a.collective (all_reduce, all_gather or
/// reduce_scatter). InvalidArgumentError when L does not divide the world size or, for
/// all_reduce, the count (the runtime passes the remainder through a second call), or when a
/// phase's collective has no row of that name.
void hierarchical(Schedule& s, const CollectiveArgs& a, const HierarchyPlan& plan);

/// "hier(LOCAL+INTER)", as tables name it.
std::string hierarchy_name(const HierarchyPlan& plan);

}  // namespace shoal::algorithms
