// Calibration at creation: the cost model's constants measured cheaply when a communicator is
// made, instead of the per-transport defaults. Every rank times the same few forced ring
// all_gathers (a small and a large one), a local reduction and, across hosts of several ranks, a
// forced Swing all_gather; the slowest rank's times are agreed by an all_reduce(max), and
// this fit turns them into alpha, beta, gamma and busy_gamma, the same bits on every rank
// (docs/algorithms.md, "Calibration at creation").
#pragma once

#include <cstdint>

#include "algorithms/registry.hpp"
#include "tune/tuning_file.hpp"

namespace shoal::tune {

/// What the communicator times: ring all_gathers of `small_block` and `large_block` bytes per
/// rank, a float32 sum reduction of `reduce_bytes`, and across hosts of several ranks a Swing
/// all_gather of `swing_block` bytes per rank.
struct CalibrationPlan {
  uint64_t small_block = 8;
  uint64_t large_block = 0;
  uint64_t reduce_bytes = 0;
  uint64_t swing_block = 0;
  int small_calls = 0, large_calls = 0, reduce_calls = 0;  // timed (the fastest counts)
  int swing_calls = 0;                                     // timed back to back (the mean counts)
};
/// The plan for `world` ranks over `transport`. On shared memory the large all_gather moves
/// about 2 MiB in all (at least 16 KiB per rank, at most 256 KiB), so creation stays within
/// milliseconds; over TCP it moves 512 KiB per rank, a whole chunk of the ring's pipeline, which
/// a striped connection spreads over every NIC (its segments are 256 KiB: a smaller block
/// crosses one NIC and would measure beta at a fraction of the host's rate). The Swing call
/// gathers about 16 MiB (256 KiB to 2 MiB per rank), three calls after an untimed one: its
/// host-local last step, half of that, is far beyond a core's cache, as in the large calls its
/// constant decides (smaller calls, whose memory work stays in cache, would measure less).
///
/// Where the longest path's round trip is `round_trip_s` >= kLongRoundTripS (a WAN), each call
/// is one or more round trips of tens of milliseconds: fastest-of repetitions, there to filter
/// scheduling noise that is small against them, would cost seconds at every creation. Each
/// call is then timed once, the small one twice.
CalibrationPlan calibration_plan(int world, Transport transport, double round_trip_s = 0);
inline constexpr double kLongRoundTripS = 0.01;
/// A flight (half a round trip) of a long path: from here the dispatcher offers the rows that
/// overlap flights (AlgorithmInfo::overlaps_flights). On a LAN alpha is mostly per-message
/// overhead, which they do not save.
inline constexpr double kLongFlightS = kLongRoundTripS / 2;

/// Seconds per call, the slowest rank's fastest call, and for swing_s its mean call (every rank
/// holds the same values); swing_s 0 where the Swing all_gather was not timed.
struct CalibrationTimes {
  double small_s = 0, large_s = 0, reduce_s = 0, swing_s = 0;
  /// The longest one-way latency between two ranks, half the largest round trip any rank's
  /// connections measured (TCP_INFO); 0: unknown, or every peer on this rank's host.
  double latency_s = 0;
};

/// Calibration without timed calls (SHOAL_TUNE_CALIBRATE=latency): the transport's defaults,
/// alpha raised to `flight_s` (half the longest round trip the connections measured) and the
/// flight kept, so that latency still decides the picks on long paths.
algorithms::CostParams latency_cost_params(Transport transport, double flight_s);

/// alpha and beta from the two all_gathers through the ring's own cost model
/// (t = (p-1) alpha + (p-1)/p n beta, solved for the pair), gamma from the reduction. A
/// solution that is not positive (noise: the large call no slower per byte than the small)
/// falls back to alpha from the small call alone and beta from what the large call leaves,
/// never below `floor.beta` / 100. busy_gamma, where `swing_s` was timed on hosts of
/// `ranks_per_host` ranks, from what the Swing call took beyond its latency and its NIC bytes
/// (dispatcher.hpp, host_traffic), per byte of its memory work: never below
/// `floor.busy_gamma` / 100 (the wire hid it all), `floor.busy_gamma` where not timed. Where
/// the hosts' `cores_per_host` are fewer than their ranks, the ring's model includes its host's
/// work over those cores (shared_cores_cost), as the dispatcher reads it. Every constant is
/// finite and positive. alpha is never below `times.latency_s`: ranks that leave a call at
/// different times find their peers' messages already arrived and time less than a message's
/// flight (on an 80 ms path, calls of 8 bytes timed at 0.17 ms); beta is then what the large
/// call leaves beyond that latency.
algorithms::CostParams fit_cost_params(int world, const CalibrationPlan& plan,
                                       const CalibrationTimes& times,
                                       const algorithms::CostParams& floor, int ranks_per_host = 1,
                                       int cores_per_host = 0);

}  // namespace shoal::tune
