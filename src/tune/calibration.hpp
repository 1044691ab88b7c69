// Calibration at creation: the cost model's constants measured cheaply when a communicator is
// made, instead of the per-transport defaults. Every rank times the same few forced ring
// all_gathers (a small and a large one) and a local reduction; the slowest rank's times are
// agreed by an all_reduce(max), and this fit turns them into alpha, beta and gamma, the same
// bits on every rank (docs/algorithms.md, "Calibration at creation").
#pragma once

#include <cstdint>

#include "algorithms/registry.hpp"

namespace shoal::tune {

/// What the communicator times: ring all_gathers of `small_block` and `large_block` bytes per
/// rank, and a float32 sum reduction of `reduce_bytes`.
struct CalibrationPlan {
  uint64_t small_block = 8;
  uint64_t large_block = 0;
  uint64_t reduce_bytes = 0;
  int small_calls = 0, large_calls = 0, reduce_calls = 0;  // timed (the fastest counts)
};
/// The plan for `world` ranks: the large all_gather moves about 2 MiB in all (at least 16 KiB
/// per rank, at most 256 KiB), so creation stays within milliseconds on shared memory.
CalibrationPlan calibration_plan(int world);

/// Seconds per call, the slowest rank's fastest call (every rank holds the same values).
struct CalibrationTimes {
  double small_s = 0, large_s = 0, reduce_s = 0;
};

/// alpha and beta from the two all_gathers through the ring's own cost model
/// (t = (p-1) alpha + (p-1)/p n beta, solved for the pair), gamma from the reduction. A
/// solution that is not positive (noise: the large call no slower per byte than the small)
/// falls back to alpha from the small call alone and beta from what the large call leaves,
/// never below `floor.beta` / 100; every constant is finite and positive.
algorithms::CostParams fit_cost_params(int world, const CalibrationPlan& plan, const CalibrationTimes& times,
                                       const algorithms::CostParams& floor);

}  // namespace shoal::tune
