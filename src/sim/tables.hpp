// The simulator's predictions as tuning tables (shoal-sim tune): every row of a collective, and
// the hierarchy across hosts of several ranks, timed in virtual time on a ClusterModel for
// worlds larger than any measured, in the format the dispatcher reads (tune/tuning_file.hpp,
// "source": "simulated"). docs/scale.md, "The dispatcher fed by the simulator".
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "algorithms/hierarchy.hpp"
#include "algorithms/schedule.hpp"
#include "sim/executor.hpp"
#include "sim/model.hpp"
#include "tune/tuning_file.hpp"

namespace shoal::sim {

/// The schedule builder of a hierarchical composition (algorithms::hierarchical with `plan`).
Builder hierarchical_builder(const algorithms::HierarchyPlan& plan);

/// Whether `collective` on `world` ranks of `ranks_per_host` per host has a hierarchical
/// composition (algorithms/hierarchy.hpp): several hosts, several ranks on each, equal hosts.
bool hierarchy_fits(algorithms::Collective collective, int world, int ranks_per_host);

struct TableOptions {
  std::vector<algorithms::Collective> collectives;
  std::vector<int> worlds;      // each at least 2
  std::vector<uint64_t> sizes;  // bytes as the cost models count them, as shoal-tune's
  uint64_t chunk_bytes = 512 << 10;
  int threads = 0;             // schedule builders at once (0: every core)
  bool with_hierarchy = true;  // the `hierarchical` column where the layout allows it
  /// One line per table: where the fastest row (or the hierarchy) changes with the size.
  std::function<void(const std::string&)> progress;
};

/// Appends to `file` one simulated table per collective and world of `o` on `model`, float32,
/// except for keys `file` already holds (a measured table wins and is kept). The hierarchical
/// time of a size is the best composition: a ring inside hosts, any row between them.
/// InvalidArgumentError for a world below 2 or no sizes; InternalError when a schedule does not
/// complete in the simulator.
void predict_tuning_tables(const ClusterModel& model, const TableOptions& o,
                           tune::TuningFile& file);

}  // namespace shoal::sim
