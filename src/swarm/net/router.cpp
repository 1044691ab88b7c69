#include "swarm/net/router.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace shoal::swarm {

Router::Router(RouterOptions options) : options_(options) {}

double Router::estimate(const State& s) const {
  if (s.rate > 0) return s.rate;
  if (s.replica.announced_throughput > 0) return s.replica.announced_throughput;
  // Unknown: assume the mean of what we know, so the first task is charged like anyone's.
  double sum = 0;
  int n = 0;
  for (auto& [id, other] : replicas_)
    if (other.rate > 0) sum += other.rate, ++n;
  return n ? sum / n : 1.0;
}

double Router::min_vtime() const {
  double m = std::numeric_limits<double>::infinity();
  for (auto& [id, s] : replicas_) m = std::min(m, s.vtime);
  return std::isinf(m) ? 0.0 : m;
}

void Router::set_replicas(const std::vector<Replica>& replicas) {
  double entry = min_vtime();
  std::map<std::string, State> next;
  for (auto& r : replicas) {
    auto it = replicas_.find(r.id);
    if (it != replicas_.end() && it->second.replica.address == r.address) {
      State s = it->second;
      s.replica.announced_throughput = r.announced_throughput;
      next.emplace(r.id, s);
    } else {
      State s;
      s.replica = r;
      s.vtime = entry;
      next.emplace(r.id, s);
    }
  }
  replicas_ = std::move(next);
}

std::optional<Router::Replica> Router::choose(double task_size, SteadyClock::time_point now) {
  State* best = nullptr;
  for (auto& [id, s] : replicas_) {
    if (s.banned_until > now) continue;
    // On a tie an untried replica goes first: a newcomer enters at the minimum to be tried.
    if (!best || s.vtime < best->vtime || (s.vtime == best->vtime && s.rate == 0 && best->rate > 0))
      best = &s;
  }
  if (!best) return std::nullopt;
  best->vtime += task_size / estimate(*best);
  return best->replica;
}

void Router::report_success(const std::string& id, double task_size, double seconds) {
  auto it = replicas_.find(id);
  if (it == replicas_.end() || seconds <= 0) return;
  State& s = it->second;
  double rate = task_size / seconds;
  s.rate = s.rate > 0 ? (1 - options_.ema_alpha) * s.rate + options_.ema_alpha * rate : rate;
  s.failures = 0;
}

void Router::report_failure(const std::string& id, double task_size, SteadyClock::time_point now) {
  auto it = replicas_.find(id);
  if (it == replicas_.end()) return;
  State& s = it->second;
  s.vtime -= task_size / estimate(s);
  ++s.failures;
  auto ban = options_.ban_base * (1LL << std::min(s.failures - 1, 20));
  s.banned_until = now + std::min<std::chrono::milliseconds>(ban, options_.ban_max);
}

double Router::throughput(const std::string& id) const {
  auto it = replicas_.find(id);
  return it == replicas_.end() ? 0.0 : estimate(it->second);
}

double Router::virtual_time(const std::string& id) const {
  auto it = replicas_.find(id);
  return it == replicas_.end() ? 0.0 : it->second.vtime;
}

bool Router::banned(const std::string& id, SteadyClock::time_point now) const {
  auto it = replicas_.find(id);
  return it != replicas_.end() && it->second.banned_until > now;
}

}  // namespace shoal::swarm
