#include "tune/links.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include "core/check.hpp"

namespace shoal::tune {

using algorithms::Collective;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kExactRanks = 12;  // Held-Karp: 2^p x p^2 steps

// The regions and the pipes between them (the model of links.hpp).
struct Pipes {
  int world = 0, regions = 0;
  std::vector<int> region;   // per rank
  std::vector<double> rate;  // [from region * regions + to region]: the fastest pair between
  explicit Pipes(const Links& links) : world(links.world), region(regions_of(links)) {
    regions = world ? *std::max_element(region.begin(), region.end()) + 1 : 0;
    rate.assign(static_cast<size_t>(regions) * static_cast<size_t>(regions), 0);
    for (int i = 0; i < world; ++i)
      for (int j = 0; j < world; ++j)
        if (region[i] != region[j]) {
          double& r = rate[static_cast<size_t>(region[i] * regions + region[j])];
          r = std::max(r, links.at(i, j));
        }
  }
  size_t index(int from, int to) const {
    return static_cast<size_t>(region[from] * regions + region[to]);
  }
};

// ring_seconds_per_byte on pipes already derived.
double ring_seconds(const Links& links, const Pipes& pipes, const std::vector<int>& order) {
  std::vector<double> hops(pipes.rate.size(), 0);
  double worst = 0;
  const size_t p = order.size();
  for (size_t k = 0; k < p && p > 1; ++k) {
    const int from = order[k], to = order[(k + 1) % p];
    worst = std::max(worst, 1 / links.at(from, to));
    if (pipes.region[from] != pipes.region[to]) hops[pipes.index(from, to)] += 1;
  }
  for (size_t i = 0; i < hops.size(); ++i)
    if (hops[i] > 0) worst = std::max(worst, hops[i] / pipes.rate[i]);
  return worst;
}

double tour_cost(const Links& links, const std::vector<int>& order) {
  double sum = 0;
  const size_t p = order.size();
  for (size_t k = 0; k < p; ++k) sum += 1 / links.at(order[k], order[(k + 1) % p]);
  return sum;
}

// Whether a ring through every rank exists on hops at least `floor` fast (bitmask DP from 0).
bool ring_exists(const Links& links, double floor) {
  const int p = links.world;
  const uint32_t full = (1u << p) - 1;
  // reach[mask] has bit j: a path from 0 through exactly `mask` ends at j.
  std::vector<uint32_t> reach(size_t{1} << p, 0);
  reach[1] = 1;
  for (uint32_t mask = 1; mask <= full; mask += 2)  // masks holding rank 0
    for (int j = 0; j < p; ++j) {
      if (!(reach[mask] >> j & 1)) continue;
      for (int k = 1; k < p; ++k)
        if (!(mask >> k & 1) && links.at(j, k) >= floor) reach[mask | 1u << k] |= 1u << k;
    }
  for (int j = 1; j < p; ++j)
    if ((reach[full] >> j & 1) && links.at(j, 0) >= floor) return true;
  return false;
}

// The fastest floor a ring can keep every hop at: the largest measured rate that still allows
// one (binary search over the distinct rates; the slowest always does).
double bottleneck(const Links& links) {
  std::vector<double> rates;
  for (int i = 0; i < links.world; ++i)
    for (int j = 0; j < links.world; ++j)
      if (i != j) rates.push_back(links.at(i, j));
  std::sort(rates.begin(), rates.end());
  rates.erase(std::unique(rates.begin(), rates.end()), rates.end());
  size_t lo = 0, hi = rates.size() - 1;  // rates[lo] feasible
  while (lo < hi) {
    const size_t mid = (lo + hi + 1) / 2;
    if (ring_exists(links, rates[mid]))
      lo = mid;
    else
      hi = mid - 1;
  }
  return rates[lo];
}

// Held-Karp: the tour from rank 0 of least summed 1/rate on hops at least `floor` fast.
std::vector<int> exact_tour(const Links& links, double floor) {
  const int p = links.world;
  const uint32_t full = (1u << p) - 1;
  const size_t states = (size_t{1} << p) * static_cast<size_t>(p);
  std::vector<double> best(states, kInf);
  std::vector<int8_t> prev(states, -1);
  auto at = [p](uint32_t mask, int j) { return static_cast<size_t>(mask) * p + j; };
  best[at(1, 0)] = 0;
  for (uint32_t mask = 1; mask <= full; mask += 2)
    for (int j = 0; j < p; ++j) {
      const double here = best[at(mask, j)];
      if (here == kInf) continue;
      for (int k = 1; k < p; ++k) {
        if (mask >> k & 1 || links.at(j, k) < floor) continue;
        const double via = here + 1 / links.at(j, k);
        if (via < best[at(mask | 1u << k, k)]) {
          best[at(mask | 1u << k, k)] = via;
          prev[at(mask | 1u << k, k)] = static_cast<int8_t>(j);
        }
      }
    }
  int last = -1;
  double total = kInf;
  for (int j = 1; j < p; ++j)
    if (links.at(j, 0) >= floor && best[at(full, j)] + 1 / links.at(j, 0) < total) {
      total = best[at(full, j)] + 1 / links.at(j, 0);
      last = j;
    }
  std::vector<int> order;
  for (uint32_t mask = full; last >= 0;) {
    order.push_back(last);
    const int before = prev[at(mask, last)];
    mask &= ~(1u << last);
    last = before;
  }
  std::reverse(order.begin(), order.end());
  return order;
}

// Nearest neighbour from rank 0 (the fastest next hop), then 2-opt on the summed 1/rate.
std::vector<int> heuristic_tour(const Links& links) {
  const int p = links.world;
  std::vector<int> order{0};
  std::vector<bool> used(static_cast<size_t>(p), false);
  used[0] = true;
  for (int k = 1; k < p; ++k) {
    int next = -1;
    for (int j = 0; j < p; ++j)
      if (!used[j] && (next < 0 || links.at(order.back(), j) > links.at(order.back(), next)))
        next = j;
    used[next] = true;
    order.push_back(next);
  }
  if (p > 128) return order;  // each pass is p^3
  double cost = tour_cost(links, order);
  for (int pass = 0, improved = 1; improved && pass < 8; ++pass) {
    improved = 0;
    for (int a = 1; a < p - 1; ++a)
      for (int b = a + 1; b < p; ++b) {
        std::reverse(order.begin() + a, order.begin() + b + 1);
        const double c = tour_cost(links, order);
        if (c < cost) {
          cost = c;
          improved = 1;
        } else {
          std::reverse(order.begin() + a, order.begin() + b + 1);
        }
      }
  }
  return order;
}

// The bound every link sets: the bytes the schedules send through it over its rate (a rank's
// sending and receiving, each pair, each pipe between regions), the busiest.
double busiest_link(const Links& links, const std::vector<algorithms::Schedule>& schedules) {
  const int p = links.world;
  const auto P = static_cast<size_t>(p);
  const Pipes pipes(links);
  std::vector<double> pair(P * P, 0), pipe(pipes.rate.size(), 0);
  for (int r = 0; r < p; ++r)
    for (const auto& step : schedules[r].steps)
      if (step.kind == algorithms::StepKind::send) {
        const auto bytes = static_cast<double>(step.src.bytes);
        pair[static_cast<size_t>(r) * P + static_cast<size_t>(step.peer)] += bytes;
        if (pipes.region[r] != pipes.region[step.peer]) pipe[pipes.index(r, step.peer)] += bytes;
      }
  double worst = 0;
  for (int i = 0; i < p; ++i) {
    double out = 0, in = 0, out_rate = 0, in_rate = 0;
    for (int j = 0; j < p; ++j) {
      if (i == j) continue;
      worst = std::max(worst, pair[i * P + j] / links.at(i, j));
      out += pair[i * P + j];
      in += pair[j * P + i];
      out_rate = std::max(out_rate, links.at(i, j));
      in_rate = std::max(in_rate, links.at(j, i));
    }
    worst = std::max({worst, out / out_rate, in / in_rate});
  }
  for (size_t i = 0; i < pipe.size(); ++i)
    if (pipe[i] > 0) worst = std::max(worst, pipe[i] / pipes.rate[i]);
  return worst;
}

// The bound the dependencies set: the longest chain of steps, a message taking its bytes over
// its pair's rate (alone on the link) x `per_byte` plus its pair's latency x `per_flight`, and
// everything else no time. Step-synchronous rows wait for each step's slowest message: a tree's
// chain crosses the slow pipe once per phase.
double critical_path(const Links& links, const std::vector<algorithms::Schedule>& schedules,
                     double per_byte, double per_flight) {
  const int p = links.world;
  const auto P = static_cast<size_t>(p);
  std::vector<std::vector<double>> ready(P), done(P);  // per step: deps met; finished (-1: not yet)
  std::vector<std::vector<std::vector<uint32_t>>> deps(P);
  // The k-th send from a to b meets b's k-th receive from a: per (a, b), a's sends in order.
  std::vector<std::vector<uint32_t>> sends(P * P);
  std::vector<std::vector<int>> match(P);  // per receive: its index among (peer -> r)
  size_t pending = 0;
  for (int r = 0; r < p; ++r) {
    const auto& s = schedules[r];
    done[r].assign(s.steps.size(), -1);
    deps[r].assign(s.steps.size(), {});
    match[r].assign(s.steps.size(), -1);
    for (const auto& [before, after] : s.edges) deps[r][after].push_back(before);
    std::vector<int> received(P, 0);
    for (uint32_t i = 0; i < s.steps.size(); ++i) {
      const auto& step = s.steps[i];
      if (step.kind == algorithms::StepKind::send)
        sends[static_cast<size_t>(r) * P + static_cast<size_t>(step.peer)].push_back(i);
      else if (step.kind == algorithms::StepKind::recv)
        match[r][i] = received[step.peer]++;
    }
    pending += s.steps.size();
  }
  double longest = 0;
  for (bool progress = true; pending > 0 && progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      const auto& s = schedules[r];
      for (uint32_t i = 0; i < s.steps.size(); ++i) {
        if (done[r][i] >= 0) continue;
        double start = 0;
        bool met = true;
        for (uint32_t d : deps[r][i]) {
          met &= done[r][d] >= 0;
          start = std::max(start, done[r][d]);
        }
        const auto& step = s.steps[i];
        if (met && step.kind == algorithms::StepKind::recv) {
          const auto& from = sends[static_cast<size_t>(step.peer) * P + static_cast<size_t>(r)];
          const auto k = static_cast<size_t>(match[r][i]);
          met = k < from.size() && done[step.peer][from[k]] >= 0;
          if (met)
            start = std::max(
                start, done[step.peer][from[k]] +
                           per_byte * static_cast<double>(step.dst.bytes) / links.at(step.peer, r) +
                           per_flight * links.latency_at(step.peer, r));
        }
        if (!met) continue;
        done[r][i] = start;
        longest = std::max(longest, start);
        --pending;
        progress = true;
      }
    }
  }
  return longest;  // a schedule whose messages never meet stops early: the bound so far
}

}  // namespace

void check_links(const Links& links) {
  const auto p = static_cast<size_t>(std::max(links.world, 0));
  SHOAL_CHECK(links.world >= 1 && links.bandwidth.size() == p * p, InvalidArgument,
              "links of " << links.world << " ranks need " << p * p << " rates, got "
                          << links.bandwidth.size());
  for (int i = 0; i < links.world; ++i)
    for (int j = 0; j < links.world; ++j)
      SHOAL_CHECK(i == j || (std::isfinite(links.at(i, j)) && links.at(i, j) > 0), InvalidArgument,
                  "the link from rank " << i << " to rank " << j << " has rate " << links.at(i, j)
                                        << " bytes/s; every link needs a positive, finite rate");
  SHOAL_CHECK(links.latency.empty() || links.latency.size() == p * p, InvalidArgument,
              "links of " << links.world << " ranks need no latencies or " << p * p << ", got "
                          << links.latency.size());
  for (size_t i = 0; i < links.latency.size(); ++i)
    SHOAL_CHECK(std::isfinite(links.latency[i]) && links.latency[i] >= 0, InvalidArgument,
                "the link from rank " << i / p << " to rank " << i % p << " has latency "
                                      << links.latency[i]
                                      << " s; a latency is a finite, non-negative time");
}

std::vector<int> regions_of(const Links& links) {
  const int p = links.world;
  double fastest = 0;
  for (double r : links.bandwidth) fastest = std::max(fastest, r);
  std::vector<int> parent(static_cast<size_t>(p));
  std::iota(parent.begin(), parent.end(), 0);
  auto root = [&](int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  for (int i = 0; i < p; ++i)
    for (int j = i + 1; j < p; ++j)
      if (links.at(i, j) >= fastest / 2 && links.at(j, i) >= fastest / 2) {
        const int a = root(i), b = root(j);
        parent[std::max(a, b)] = std::min(a, b);  // the lower rank stays the root
      }
  std::vector<int> region(static_cast<size_t>(p), -1), number(static_cast<size_t>(p), -1);
  int regions = 0;
  for (int i = 0; i < p; ++i) {
    const int r = root(i);
    if (number[r] < 0) number[r] = regions++;
    region[i] = number[r];
  }
  return region;
}

double ring_seconds_per_byte(const Links& links, const std::vector<int>& order) {
  return ring_seconds(links, Pipes(links), order);
}

std::vector<int> ring_order(const Links& links) {
  check_links(links);
  const int p = links.world;
  std::vector<int> identity(static_cast<size_t>(p));
  std::iota(identity.begin(), identity.end(), 0);
  if (p <= 3) return identity;  // every ring of 3 is one of two directions
  const std::vector<int> tour =
      p <= kExactRanks ? exact_tour(links, bottleneck(links)) : heuristic_tour(links);
  const Pipes pipes(links);  // the regions once, for both rings
  return ring_seconds(links, pipes, tour) < ring_seconds(links, pipes, identity) ? tour : identity;
}

namespace {

// Every rank's schedule of a representative call of `row` (link_ring's in `order`), and the
// call's model_bytes.
std::pair<std::vector<algorithms::Schedule>, double> schedules_of(
    const algorithms::AlgorithmInfo& row, const Links& links, const std::vector<int>& order) {
  const int p = links.world;
  const auto P = static_cast<size_t>(p);
  algorithms::CollectiveArgs a;
  a.collective = row.collective;
  a.dtype = DataType::float32;
  a.size = p;
  a.count = row.collective == Collective::all_reduce ? 4096ull * P : 4096;
  a.algorithm = &row;
  a.forced = true;
  a.ring_order = &order;
  std::vector<algorithms::Schedule> schedules(P);
  for (int r = 0; r < p; ++r) {
    a.rank = r;
    schedules[r] = algorithms::build_schedule(a);
  }
  return {std::move(schedules), static_cast<double>(algorithms::model_bytes(a))};
}

}  // namespace

LinkPrice link_price(const algorithms::AlgorithmInfo& row, const Links& links,
                     const std::vector<int>& order) {
  if (links.world < 2) return {};
  const auto [schedules, n] = schedules_of(row, links, order);
  return {std::max(busiest_link(links, schedules), critical_path(links, schedules, 1, 0)) / n,
          links.latency.empty() ? 0 : critical_path(links, schedules, 0, 1)};
}

double link_seconds_per_byte(const algorithms::AlgorithmInfo& row, const Links& links,
                             const std::vector<int>& order) {
  return link_price(row, links, order).seconds_per_byte;
}

double link_latency_seconds(const algorithms::AlgorithmInfo& row, const Links& links,
                            const std::vector<int>& order) {
  return link_price(row, links, order).latency_s;
}

}  // namespace shoal::tune
