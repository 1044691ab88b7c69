#include "tune/learner.hpp"

#include <algorithm>
#include <bit>
#include <limits>

#include "core/check.hpp"

namespace shoal::tune {

Learner::Key Learner::key_of(algorithms::Collective collective, uint64_t bytes) {
  return {collective, bytes == 0 ? -1 : static_cast<int>(std::bit_width(bytes)) - 1};
}

Learner::Turn Learner::next(const Key& key, const algorithms::AlgorithmInfo* pick,
                            const algorithms::AlgorithmInfo* alternative,
                            const algorithms::AlgorithmInfo* runner_up) {
  std::lock_guard<std::mutex> lock(mutex_);
  Bucket& b = buckets_[key];
  if (b.calls == 0 && !b.state.winner) b.state = {key, pick, alternative, runner_up};
  const int call = b.calls++;
  if (b.state.winner) return {b.state.winner, -1, false};
  if (call < b.state.explored())
    return {b.state.candidate(call % b.state.candidates()), call, false};
  return {nullptr, -1, true};
}

void Learner::record(const Key& key, int sample, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = buckets_.find(key);
  if (it == buckets_.end() || sample < 0 || sample >= it->second.state.explored()) return;
  it->second.mine[static_cast<size_t>(sample)] = seconds;
}

std::vector<double> Learner::samples(const Key& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = buckets_.find(key);
  SHOAL_CHECK(it != buckets_.end(), Internal, "no calls were explored in this bucket");
  const auto& mine = it->second.mine;
  return {mine.begin(), mine.begin() + it->second.state.explored()};
}

const algorithms::AlgorithmInfo* Learner::decide(const Key& key,
                                                 const std::vector<double>& agreed) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = buckets_.find(key);
  SHOAL_CHECK(it != buckets_.end(), Internal, "no calls were explored in this bucket");
  Learned& s = it->second.state;
  const int explored = s.explored(), n = s.candidates();
  SHOAL_CHECK(agreed.size() == static_cast<size_t>(explored), Internal,
              "a decision needs the bucket's " << explored << " explored times");
  s.best.fill(std::numeric_limits<double>::infinity());
  for (int i = 0; i < explored; ++i) {
    double& best = s.best[static_cast<size_t>(i % n)];
    s.agreed[static_cast<size_t>(i)] = agreed[static_cast<size_t>(i)];
    best = std::min(best, agreed[static_cast<size_t>(i)]);
  }
  // Strictly faster: a tie keeps the earlier candidate (the pick first).
  int won = 0;
  for (int c = 1; c < n; ++c)
    if (s.best[static_cast<size_t>(c)] < s.best[static_cast<size_t>(won)]) won = c;
  s.winner = s.candidate(won);
  s.exploration_s = 0;
  for (int i = 0; i < explored; ++i)
    s.exploration_s += s.agreed[static_cast<size_t>(i)] - s.best[static_cast<size_t>(won)];
  return s.winner;
}

bool Learner::fresh(const Key& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !buckets_.contains(key);
}

void Learner::settle(const Key& key, const algorithms::AlgorithmInfo* pick,
                     const algorithms::AlgorithmInfo* alternative,
                     const algorithms::AlgorithmInfo* runner_up,
                     const algorithms::AlgorithmInfo* winner) {
  std::lock_guard<std::mutex> lock(mutex_);
  Bucket& b = buckets_[key];
  b.state = {key, pick, alternative, runner_up, winner};
  b.state.from_file = true;
}

Learner::Learned Learner::learned(const Key& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = buckets_.find(key);
  SHOAL_CHECK(it != buckets_.end(), Internal, "no call was planned in this bucket");
  return it->second.state;
}

std::vector<Learner::Learned> Learner::learned() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Learned> out;
  for (const auto& [key, b] : buckets_) out.push_back(b.state);
  return out;
}

}  // namespace shoal::tune
