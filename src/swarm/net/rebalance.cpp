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
    next[to] += rate;
    auto sorted = ascending(next);
    if (!better(sorted, now, threshold)) continue;
    if (!best || better(sorted, best_sorted, 0.0)) {
      best = Move{p->id, p->stage, to, now[0], sorted[0]};
      best_sorted = sorted;
    }
  }
  return best;
}

}  // namespace shoal::swarm
