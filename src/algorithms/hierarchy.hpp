// Hierarchical all_reduce, all_gather and reduce_scatter as one schedule per rank: the
// composition src/comm/hierarchical.cpp runs (PCCL's two-level scheme), for the simulator and
// the dispatcher's predictions. Hosts of L consecutive ranks (rank r = host h * L + local rank
// l); an intra-host phase among the L ranks of a host and an inter-host phase among the
// rank-aligned group {h' * L + l}, all groups at once, so every host moves data over every NIC.
//
//   all_reduce     = local reduce_scatter (block l of the vector) -> all_reduce of that block on
//                    the aligned group -> local all_gather, in place in the output; the
//                    count % L elements left over through a local and an aligned all_reduce.
//   all_gather     = the rank's block to its aligned peers and theirs into place (direct
//                    exchanges), each block then forwarded to the other ranks of the host, which
//                    receive it into place: no row, no copy but the rank's own block.
//   reduce_scatter = every other rank of the host sends this rank the H blocks aligned with it
//                    (direct), summed with its own -> aligned reduce_scatter into the output.
//
// Phases that are collectives run the sub-schedule of a registry row (`local`, `inter`; their
// peers renumbered, their buffers placed in the caller's) after the rank's previous phase, as
// the runtime's sub-communicator calls do; the runtime's phases run what each sub-communicator
// picks (on one host's shared memory often the flat path, which has no schedule to simulate).
// avg sums in every phase and divides once at the end.
#pragma once

#include <string>
#include <string_view>

#include "algorithms/registry.hpp"

namespace shoal::algorithms {

/// The collectives the composition serves (the planner's "hierarchical" path).
inline bool composable(Collective c) {
  return c == Collective::all_reduce || c == Collective::all_gather ||
         c == Collective::reduce_scatter;
}

/// Whether `world` ranks on hosts of `ranks_per_host` each have a hierarchy to compose: several
/// hosts, several ranks on each, every host alike.
inline bool hierarchy_fits(int world, int ranks_per_host) {
  return ranks_per_host > 1 && world > ranks_per_host && world % ranks_per_host == 0;
}

/// Whether the composition of `c` runs HierarchyPlan::inter across hosts: all_gather's sends
/// every block straight to its aligned peers instead, so all its plans are one schedule.
inline bool runs_inter_row(Collective c) { return c != Collective::all_gather; }

struct HierarchyPlan {
  int ranks_per_host = 1;           // L; must divide the world size
  std::string_view local = "ring";  // the row of all_reduce's intra-host phases
  std::string_view inter = "ring";  // the row of all_reduce's and reduce_scatter's inter phase
};

/// Appends rank a.rank's hierarchical schedule of a.collective (all_reduce, all_gather or
/// reduce_scatter). InvalidArgumentError when L does not divide the world size or a phase's
/// collective has no row of that name.
void hierarchical(Schedule& s, const CollectiveArgs& a, const HierarchyPlan& plan);

/// "hier(LOCAL+INTER)", as tables name it.
std::string hierarchy_name(const HierarchyPlan& plan);

}  // namespace shoal::algorithms
