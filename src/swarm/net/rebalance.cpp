#include "swarm/net/rebalance.hpp"

#include <algorithm>

namespace shoal::swarm {

namespace {
double mean_measured(const std::vector<PeerRecord>& peers) {
  double sum = 0;
  int n = 0;
  for (auto& p : peers)
    if (p.throughput > 0) sum += p.throughput, ++n;
  return n ? sum / n : 1.0;
}
double rate_of(const PeerRecord& p, double fallback) {
  return p.throughput > 0 ? p.throughput : fallback;
}
}  // namespace

std::vector<double> stage_throughputs(const std::vector<PeerRecord>& peers, int stages) {
  std::vector<double> t(std::max(stages, 0), 0.0);
  double fallback = mean_measured(peers);
  for (auto& p : peers)
    if (p.stage >= 0 && p.stage < stages) t[p.stage] += rate_of(p, fallback);
  return t;
}

std::vector<double> stage_costs(const std::vector<PeerRecord>& peers, int stages) {
  std::vector<double> sum(std::max(stages, 0), 0.0);
  std::vector<int> n(sum.size(), 0);
  for (auto& p : peers)
    if (p.stage >= 0 && p.stage < stages && p.speed > 0 && p.throughput > 0) {
      sum[p.stage] += p.speed / p.throughput;
      ++n[p.stage];
    }
  for (size_t k = 0; k < sum.size(); ++k) sum[k] = n[k] ? sum[k] / n[k] : 0;
  return sum;
}

namespace {
/// Stage throughputs in ascending order: the bottleneck first, then the next slowest...
std::vector<double> ascending(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t;
}
/// True when `next` beats `now` in leximin order by more than `threshold` at the first stage
/// where they differ (so a move that frees the second-slowest stage of a tie still counts).
bool better(const std::vector<double>& next, const std::vector<double>& now, double threshold) {
  for (size_t i = 0; i < now.size(); ++i) {
    if (next[i] == now[i]) continue;
    return next[i] > now[i] * (1 + threshold);
  }
  return false;
}
}  // namespace

std::optional<Move> plan_move(const std::vector<PeerRecord>& peers, int stages, double threshold) {
  if (stages < 2) return std::nullopt;
  auto t = stage_throughputs(peers, stages);
  std::vector<int> replicas(stages, 0);
  for (auto& p : peers)
    if (p.stage >= 0 && p.stage < stages) ++replicas[p.stage];
  int to = static_cast<int>(std::min_element(t.begin(), t.end()) - t.begin());
  auto now = ascending(t);
  double fallback = mean_measured(peers);
  // What a stage costs per sample; unmeasured stages the mean of the measured ones.
  auto cost = stage_costs(peers, stages);
  double known = 0;
  int n_known = 0;
  for (double c : cost)
    if (c > 0) known += c, ++n_known;
  for (double& c : cost)
    if (c == 0 && n_known) c = known / n_known;
  // A peer's rate on stage `to`: its speed over that stage's cost; without costs, its rate here.
  auto rate_on = [&](const PeerRecord& p, double here) {
    if (cost[to] <= 0) return here;
    if (p.speed > 0) return p.speed / cost[to];
    return cost[p.stage] > 0 ? here * cost[p.stage] / cost[to] : here;
  };

  std::vector<const PeerRecord*> order;
  for (auto& p : peers) order.push_back(&p);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) {
    return a->stage != b->stage ? a->stage < b->stage : a->id < b->id;
  });
  std::optional<Move> best;
  std::vector<double> best_sorted;
  for (const PeerRecord* p : order) {
    if (p->stage < 0 || p->stage >= stages || p->stage == to || replicas[p->stage] < 2) continue;
    auto next = t;
    double rate = rate_of(*p, fallback);
    next[p->stage] -= rate;
    next[to] += rate_on(*p, rate);
    auto sorted = ascending(next);
    if (!better(sorted, now, threshold)) continue;
    if (!best || better(sorted, best_sorted, 0.0)) {
      best = Move{p->id, p->stage, to, now[0], sorted[0]};
      best_sorted = sorted;
    }
  }
  return best;
}

double best_bottleneck(const std::vector<PeerRecord>& peers, int stages) {
  const auto cost = stage_costs(peers, stages);
  std::vector<const PeerRecord*> placed;
  for (auto& p : peers)
    if (p.stage >= 0 && p.stage < stages) placed.push_back(&p);
  const size_t n = placed.size();
  if (stages < 1 || n > 14 || n == 0) return 0;
  for (double c : cost)
    if (c <= 0) return 0;
  for (auto* p : placed)
    if (p->speed <= 0) return 0;
  double best = 0;
  std::vector<int> at(n, 0);  // the placement, as a number in base `stages`
  for (;;) {
    std::vector<double> t(stages, 0.0);
    for (size_t i = 0; i < n; ++i) t[at[i]] += placed[i]->speed / cost[at[i]];
    best = std::max(best, *std::min_element(t.begin(), t.end()));
    size_t i = 0;
    while (i < n && ++at[i] == stages) at[i++] = 0;
    if (i == n) break;
  }
  return best;
}

}  // namespace shoal::swarm
