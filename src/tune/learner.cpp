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
                            const algorithms::AlgorithmInfo* alternative) {
  std::lock_guard<std::mutex> lock(mutex_);
  Bucket& b = buckets_[key];
  if (b.calls == 0 && !b.state.winner) b.state = {key, pick, alternative, nullptr, {}};
  const int call = b.calls++;
  if (b.state.winner) return {b.state.winner, -1, false};
  if (call < kExplored)
    return {call % kCandidates == 0 ? b.state.pick : b.state.alternative, call, false};
  return {nullptr, -1, true};
}

void Learner::record(const Key& key, int sample, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = buckets_.find(key);
  if (it == buckets_.end() || sample < 0 || sample >= kExplored) return;
  it->second.mine[static_cast<size_t>(sample)] = seconds;
}

std::vector<double> Learner::samples(const Key& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = buckets_.find(key);
  SHOAL_CHECK(it != buckets_.end(), Internal, "no calls were explored in this bucket");
  return {it->second.mine.begin(), it->second.mine.end()};
}

const algorithms::AlgorithmInfo* Learner::decide(const Key& key,
                                                 const std::vector<double>& agreed) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = buckets_.find(key);
  SHOAL_CHECK(it != buckets_.end() && agreed.size() == kExplored, Internal,
              "a decision needs the bucket's " << kExplored << " explored times");
  Learned& s = it->second.state;
  s.best.fill(std::numeric_limits<double>::infinity());
  for (int i = 0; i < kExplored; ++i) {
    s.agreed[static_cast<size_t>(i)] = agreed[static_cast<size_t>(i)];
    s.best[static_cast<size_t>(i % kCandidates)] =
        std::min(s.best[static_cast<size_t>(i % kCandidates)], agreed[static_cast<size_t>(i)]);
  }
  const size_t won = s.best[1] < s.best[0] ? 1 : 0;
  s.winner = won ? s.alternative : s.pick;
  s.exploration_s = 0;
  for (double t : s.agreed) s.exploration_s += t - s.best[won];
  return s.winner;
}

bool Learner::fresh(const Key& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !buckets_.contains(key);
}

void Learner::settle(const Key& key, const algorithms::AlgorithmInfo* pick,
                     const algorithms::AlgorithmInfo* alternative,
                     const algorithms::AlgorithmInfo* winner) {
  std::lock_guard<std::mutex> lock(mutex_);
  Bucket& b = buckets_[key];
  b.state = {key, pick, alternative, winner, {}};
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
