#include "tune/calibration.hpp"

#include <algorithm>
#include <cmath>

#include "core/check.hpp"
#include "tune/dispatcher.hpp"

namespace shoal::tune {

using algorithms::Collective;
using algorithms::CostParams;

CalibrationPlan calibration_plan(int world, Transport transport, double round_trip_s) {
  CalibrationPlan plan;
  const uint64_t p = static_cast<uint64_t>(std::max(world, 1));
  plan.small_block = 8;
  plan.large_block = transport == Transport::tcp
                         ? 512u << 10
                         : std::clamp<uint64_t>((2u << 20) / p, 16u << 10, 256u << 10);
  plan.reduce_bytes = 256u << 10;
  plan.small_calls = 8;
  plan.large_calls = 3;
  plan.reduce_calls = 3;
  plan.swing_block = std::clamp<uint64_t>((16u << 20) / p, 256u << 10, 2u << 20);
  plan.swing_calls = 3;
  if (round_trip_s >= kLongRoundTripS) {
    plan.small_calls = 2;
    plan.large_calls = 1;
    plan.swing_calls = 1;
  }
  return plan;
}

CostParams latency_cost_params(Transport transport, double flight_s) {
  CostParams c = default_cost_params(transport);
  if (std::isfinite(flight_s) && flight_s > 0) {
    c.alpha = std::max(c.alpha, flight_s);
    c.flight = flight_s;
  }
  return c;
}

CostParams fit_cost_params(int world, const CalibrationPlan& plan, const CalibrationTimes& times,
                           const CostParams& floor, int ranks_per_host, int cores_per_host) {
  const auto* ring = algorithms::find_algorithm(Collective::all_gather, "ring");
  SHOAL_CHECK(ring != nullptr, Internal, "the registry has no ring all_gather");
  const int p = std::max(world, 2);
  // The ring's time is linear in its constants, t = a * alpha + b * beta, in the model the
  // dispatcher reads it with: where ranks share cores, its host's work over them on top.
  const int cores =
      ranks_share_cores({p, ranks_per_host, Transport::shm, cores_per_host}) ? cores_per_host : 0;
  const HostWork work = cores ? host_work(*ring, p, ranks_per_host) : HostWork{};
  auto coefficient = [&](uint64_t n, const CostParams& unit) {
    return ring->cost(p, n, unit) + shared_cores_cost(work, n, unit, cores);
  };
  const uint64_t n_small = plan.small_block * p, n_large = plan.large_block * p;
  const CostParams per_alpha{1, 0, 0, 0}, per_beta{0, 1, 0, 0};
  const double a_small = coefficient(n_small, per_alpha), b_small = coefficient(n_small, per_beta);
  const double a_large = coefficient(n_large, per_alpha), b_large = coefficient(n_large, per_beta);
  const double min_alpha = floor.alpha / 100, min_beta = floor.beta / 100,
               min_gamma = floor.gamma / 100;
  auto usable = [](double x) { return std::isfinite(x) && x > 0; };

  // beta from what the large call leaves beyond `alpha`.
  auto beta_beyond = [&](double alpha) { return (times.large_s - alpha * a_large) / b_large; };
  CostParams c;
  const double det = a_small * b_large - a_large * b_small;
  c.alpha = (times.small_s * b_large - times.large_s * b_small) / det;
  c.beta = (a_small * times.large_s - a_large * times.small_s) / det;
  if (!usable(c.alpha) || !usable(c.beta)) {
    c.alpha = times.small_s / a_small;
    c.beta = beta_beyond(c.alpha);
  }
  c.alpha = usable(c.alpha) ? std::max(c.alpha, min_alpha) : floor.alpha;
  c.beta = usable(c.beta) ? std::max(c.beta, min_beta) : min_beta;
  if (usable(times.latency_s) && c.alpha < times.latency_s) {
    c.alpha = times.latency_s;
    const double beta = beta_beyond(c.alpha);
    c.beta = usable(beta) ? std::max(beta, min_beta) : min_beta;
  }
  // Flights overlap where a row sends to several peers at once (the direct rows).
  c.flight = usable(times.latency_s) ? times.latency_s : 0;  // alpha was raised to it above
  const double gamma =
      times.reduce_s / static_cast<double>(std::max<uint64_t>(plan.reduce_bytes, 1));
  c.gamma = usable(gamma) ? std::max(gamma, min_gamma) : floor.gamma;
  c.busy_gamma = floor.busy_gamma;
  const auto* swing = algorithms::find_algorithm(Collective::all_gather, "swing");
  if (times.swing_s > 0 && swing &&
      across_hosts_of_several({world, ranks_per_host, Transport::tcp})) {
    const HostTraffic traffic = host_traffic(*swing, world, ranks_per_host);
    const uint64_t bytes = plan.swing_block * static_cast<uint64_t>(world);
    const double n = static_cast<double>(bytes);
    const double beyond =
        times.swing_s - swing->cost(world, bytes, {c.alpha, 0, 0, 0}) - c.beta * traffic.nic * n;
    const double busy = beyond / (traffic.memory * n);
    c.busy_gamma = usable(busy) ? std::max(busy, floor.busy_gamma / 100) : floor.busy_gamma / 100;
  }
  return c;
}

}  // namespace shoal::tune
