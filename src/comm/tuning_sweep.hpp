// What shoal-tune measures, as library code: every row of all_reduce, all_gather and
// reduce_scatter, and the hierarchy where the layout allows it, timed on a communicator into the
// tables the dispatcher reads (tune/tuning_file.hpp). docs/algorithms.md, "shoal-tune".
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shoal/communicator.hpp"
#include "tune/tuning_file.hpp"

namespace shoal::comm {

struct SweepOptions {
  std::vector<uint64_t> sizes;  // bytes as the cost models count them (algorithms::model_bytes)
  /// Worlds to tune, each on the communicator's first w ranks (split off while the others wait
  /// in the store, not in a collective); empty: the communicator's size.
  std::vector<int> worlds;
  int iters = 10;  // timed calls per point (fewer above 256 KiB, at least 4)
  int warmup = 2;  // untimed calls per point
  int rounds = 2;  // interleaved rounds per size; the fastest counts
  /// Rank 0's line per measured size (null: quiet).
  std::function<void(const std::string&)> progress;
};

/// Collective: every rank passes the same options. Each point is the slowest rank's mean time
/// per call, the fastest of the rounds; the rows of a size run interleaved, forced per call
/// (CallOptions), so drift hits all alike. Returns one table per collective and world, with the
/// constants that world's communicator calibrated at creation: every world's on rank 0, and on
/// any rank the tables of the worlds it took part in (equal on those ranks). InvalidArgumentError
/// for a world outside [2, size] or options out of range.
tune::TuningFile measure_tuning_tables(Communicator& comm, const SweepOptions& options);

}  // namespace shoal::comm
