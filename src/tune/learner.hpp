// Learning on the job: where the cost model's pick for a call across hosts may be wrong (its
// links alone priced, not how flows meet in the queues: a row whose partners change every step
// overruns them where the ring, streaming to one neighbour, does not; docs/algorithms.md,
// "Learning on the job"), the planner runs the pick and the ring in turn on the first calls of
// each (collective, size bucket), times them on the progress thread, and at the next call of
// that bucket takes whichever the slowest rank timed fastest. Every rank issues the same calls,
// so every rank explores alike; the times are reduced across ranks (the planner's caller runs
// that all_reduce) before any rank decides, so every rank decides alike.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "algorithms/registry.hpp"

namespace shoal::tune {

class Learner {
 public:
  /// Timed calls per candidate (the pick and the ring, in turn).
  static constexpr int kSamples = 2;
  static constexpr int kCandidates = 2;
  static constexpr int kExplored = kSamples * kCandidates;

  /// (collective, floor(log2 bytes)): calls whose sizes are within a factor of 2 share a pick.
  using Key = std::pair<algorithms::Collective, int>;
  static Key key_of(algorithms::Collective collective, uint64_t bytes);

  /// What the next call of a bucket runs.
  struct Turn {
    const algorithms::AlgorithmInfo* row = nullptr;
    int sample = -1;      // >= 0: time it and record() the seconds under this index
    bool decide = false;  // first the bucket's times, agreed across ranks, go to decide()
  };
  /// The next call of `key`'s bucket, whose model pick is `pick` and alternative `alternative`
  /// (the same on every rank: both come from the dispatcher). Explored calls alternate pick,
  /// alternative, pick, ...; then, once, a decision; then the winner.
  Turn next(const Key& key, const algorithms::AlgorithmInfo* pick,
            const algorithms::AlgorithmInfo* alternative);
  /// The seconds an explored call took from its start to its completion on this rank (any
  /// thread).
  void record(const Key& key, int sample, double seconds);
  /// This rank's times of `key`'s explored calls, in call order (the caller reduces them
  /// across ranks with max, after every explored call has completed).
  std::vector<double> samples(const Key& key) const;
  /// Settles `key` from the explored calls' times, the same on every rank (each the slowest
  /// rank's): the candidate whose fastest call was fastest; a tie keeps the pick. Returns it.
  const algorithms::AlgorithmInfo* decide(const Key& key, const std::vector<double>& agreed);
  /// Whether no call of `key`'s bucket was planned yet.
  bool fresh(const Key& key) const;
  /// Settles a fresh bucket without exploring: what an earlier job learned (SHOAL_TUNE_SAVE),
  /// which every rank read alike.
  void settle(const Key& key, const algorithms::AlgorithmInfo* pick,
              const algorithms::AlgorithmInfo* alternative,
              const algorithms::AlgorithmInfo* winner);

  /// What a bucket learned, for logs and shoal-info.
  struct Learned {
    Key key;
    const algorithms::AlgorithmInfo* pick = nullptr;         // the model's
    const algorithms::AlgorithmInfo* alternative = nullptr;  // the ring
    const algorithms::AlgorithmInfo* winner = nullptr;       // null until decided
    std::array<double, kExplored> agreed{};                  // the slowest rank's times
    std::array<double, kCandidates> best{};  // each candidate's fastest of them (pick, ring)
    double exploration_s = 0;                // the explored calls' time beyond the winner's fastest
    bool from_file = false;  // settled from an earlier job's file, not explored here
  };
  std::vector<Learned> learned() const;
  /// One bucket's state (`key` must have had a call).
  Learned learned(const Key& key) const;

 private:
  struct Bucket {
    Learned state;
    int calls = 0;  // calls planned in this bucket so far
    std::array<double, kExplored> mine{};
  };
  mutable std::mutex mutex_;  // record() runs on the progress thread
  std::map<Key, Bucket> buckets_;
};

}  // namespace shoal::tune
