// Calibration at creation (SHOAL_TUNE_CALIBRATE): the cost model's alpha, beta and gamma
// measured on this communicator's own links, agreed by every rank (tune/calibration.hpp).
#include "tune/calibration.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <vector>

#include "comm/comm_impl.hpp"
#include "core/check.hpp"
#include "core/config.hpp"
#include "core/reduce.hpp"

namespace shoal::detail {

using algorithms::Collective;

namespace {

// The fastest of `calls` timed runs of `run`, after one untimed.
template <class F>
double fastest_of(int calls, F&& run) {
  double best = std::numeric_limits<double>::infinity();
  for (int i = -1; i < calls; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 0) best = std::min(best, s);
  }
  return best;
}

}  // namespace

CommImpl::Calibration CommImpl::calibration_mode(const Options& options) const {
  const std::string mode =
      options.calibrate.empty() ? config::get("SHOAL_TUNE_CALIBRATE") : options.calibrate;
  SHOAL_CHECK(mode == "on" || mode == "latency" || mode == "off", InvalidArgument,
              (options.calibrate.empty() ? "SHOAL_TUNE_CALIBRATE='" : "Options::calibrate '")
                  << mode << "' is not on, latency or off");
  if (mode == "off" || size < 2 || config::get("SHOAL_DISPATCH") == "off") return Calibration::off;
  return mode == "on" ? Calibration::on : Calibration::latency;
}

void CommImpl::calibrate_cost_model(Calibration mode) {
  // longest_round_trip_s is the job's, agreed with the settings (compare_agreed_settings).
  if (mode == Calibration::latency) {
    calibrated_params =
        tune::latency_cost_params(tune_context().transport, longest_round_trip_s / 2);
    SHOAL_INFO("cost model at creation: the defaults with the connections' longest flight, "
               << longest_round_trip_s / 2 * 1e6 << " us");
    return;
  }
  const auto* ring_all_gather = algorithms::find_algorithm(Collective::all_gather, "ring");
  const auto* ring_all_reduce = algorithms::find_algorithm(Collective::all_reduce, "ring");
  SHOAL_CHECK(ring_all_gather && ring_all_reduce, Internal, "the registry has no ring");
  const tune::CalibrationPlan plan =
      tune::calibration_plan(size, tune_context().transport, longest_round_trip_s);

  // Forced rows: no dispatcher (which this calibrates), no flat path, no hierarchy.
  std::vector<uint8_t> block(plan.large_block, static_cast<uint8_t>(rank));
  std::vector<uint8_t> gathered(plan.large_block * static_cast<uint64_t>(size));
  auto all_gather = [&](uint64_t bytes) {
    call(comm::forced_call(Collective::all_gather, block.data(), gathered.data(), bytes,
                           DataType::uint8, ReduceOp::sum, ring_all_gather))
        .wait();
  };
  std::vector<float> acc(plan.reduce_bytes / sizeof(float), 1.0f), in(acc.size(), 0.5f);
  double times[5] = {
      fastest_of(plan.small_calls, [&] { all_gather(plan.small_block); }),
      fastest_of(plan.large_calls, [&] { all_gather(plan.large_block); }),
      fastest_of(plan.reduce_calls,
                 [&] {
                   kernels::reduce_into(acc.data(), in.data(), acc.size(), DataType::float32,
                                        ReduceOp::sum);
                 }),
      0,
      longest_round_trip_s / 2,
  };
  // Across hosts of several ranks: a step-synchronous call, whose memory work (for Swing's
  // all_gather, its host-local last step) the NICs do not hide: busy_gamma is what it takes
  // beyond the wire.
  const tune::Context context = tune_context();
  if (tune::across_hosts_of_several(context)) {
    const auto* swing = algorithms::find_algorithm(Collective::all_gather, "swing");
    SHOAL_CHECK(swing, Internal, "the registry has no swing all_gather");
    std::vector<uint8_t> mine(plan.swing_block, static_cast<uint8_t>(rank)),
        all(plan.swing_block * size);
    auto swing_all_gather = [&] {
      call(comm::forced_call(Collective::all_gather, mine.data(), all.data(), plan.swing_block,
                             DataType::uint8, ReduceOp::sum, swing))
          .wait();
    };
    // Back to back from a common start, the mean: a rank that leaves one call early waits
    // longer in the next, so single calls of one rank swing by half their time.
    swing_all_gather();
    all_gather(plan.small_block);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < plan.swing_calls; ++i) swing_all_gather();
    times[3] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
               plan.swing_calls;
  }
  // The slowest rank's times, the same bits everywhere: so is the fit, and so are the picks.
  call(comm::forced_call(Collective::all_reduce, times, times, 5, DataType::float64, ReduceOp::max,
                         ring_all_reduce))
      .wait();
  calibrated_params = tune::fit_cost_params(
      size, plan, {times[0], times[1], times[2], times[3], times[4]},
      tune::default_cost_params(context.transport), context.ranks_per_host, context.cores_per_host);
  SHOAL_INFO("cost model calibrated at creation: alpha "
             << calibrated_params->alpha * 1e6 << " us, beta " << 1e-9 / calibrated_params->beta
             << " GB/s, gamma " << 1e-9 / calibrated_params->gamma << " GB/s, busy gamma "
             << 1e-9 / calibrated_params->busy_gamma << " GB/s (times: " << times[0] * 1e6 << ", "
             << times[1] * 1e6 << ", " << times[2] * 1e6 << ", " << times[3] * 1e6
             << " us; one-way latency " << times[4] * 1e6 << " us)");
}

}  // namespace shoal::detail
