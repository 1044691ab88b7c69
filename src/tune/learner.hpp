// Learning on the job: where the cost model's pick for a call across hosts may be wrong (its
// links alone priced, not how flows meet in the queues: a row whose partners change every step
// overruns them where the ring, streaming to one neighbour, does not; docs/algorithms.md,
// "Learning on the job"), the planner runs the candidates in turn on the first calls of each
// (collective, size bucket) — the pick, the ring, and a runner-up the model prices close to the
// pick — times them on the progress thread, and at the next call of that bucket takes whichever
// the slowest rank timed fastest. Every rank issues the same calls, so every rank explores
// alike; the times are reduced across ranks (the planner's caller runs that all_reduce) before
// any rank decides, so every rank decides alike.
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
  /// Timed calls per candidate (the candidates in turn).
  static constexpr int kSamples = 2;
  /// The pick, the ring, and where the model prices another row close to the pick, that one.
  static constexpr int kMaxCandidates = 3;
  static constexpr int kMaxExplored = kSamples * kMaxCandidates;

  /// (collective, floor(log2 bytes)): calls whose sizes are within a factor of 2 share a pick.
  using Key = std::pair<algorithms::Collective, int>;
  static Key key_of(algorithms::Collective collective, uint64_t bytes);

  /// What the next call of a bucket runs.
  struct Turn {
    const algorithms::AlgorithmInfo* row = nullptr;
    int sample = -1;      // >= 0: time it and record() the seconds under this index
    bool decide = false;  // first the bucket's times, agreed across ranks, go to decide()
  };
  /// The next call of `key`'s bucket, whose model pick is `pick`, alternative `alternative`
  /// and runner-up `runner_up` (null: none; the same on every rank: all come from the
  /// dispatcher). Explored calls go pick, alternative[, runner-up], pick, ...; then, once, a
  /// decision; then the winner. The candidates are the bucket's first call's.
  Turn next(const Key& key, const algorithms::AlgorithmInfo* pick,
            const algorithms::AlgorithmInfo* alternative,
            const algorithms::AlgorithmInfo* runner_up = nullptr);
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
              const algorithms::AlgorithmInfo* runner_up, const algorithms::AlgorithmInfo* winner);

  /// What a bucket learned, for logs and shoal-info.
  struct Learned {
    Key key;
    const algorithms::AlgorithmInfo* pick = nullptr;         // the model's
    const algorithms::AlgorithmInfo* alternative = nullptr;  // the ring
    const algorithms::AlgorithmInfo* runner_up = nullptr;    // priced close to the pick; or none
    const algorithms::AlgorithmInfo* winner = nullptr;       // null until decided
    std::array<double, kMaxExplored> agreed{};               // the slowest rank's times
    /// Each candidate's fastest of them (pick, ring, runner-up).
    std::array<double, kMaxCandidates> best{};
    double exploration_s = 0;  // the explored calls' time beyond the winner's fastest
    bool from_file = false;    // settled from an earlier job's file, not explored here
    int candidates() const { return runner_up ? 3 : 2; }
    int explored() const { return kSamples * candidates(); }
    const algorithms::AlgorithmInfo* candidate(int i) const {
      return i == 0 ? pick : i == 1 ? alternative : runner_up;
    }
  };
  std::vector<Learned> learned() const;
  /// One bucket's state (`key` must have had a call).
  Learned learned(const Key& key) const;

 private:
  struct Bucket {
    Learned state;
    int calls = 0;  // calls planned in this bucket so far
    std::array<double, kMaxExplored> mine{};
  };
  mutable std::mutex mutex_;  // record() runs on the progress thread
  std::map<Key, Bucket> buckets_;
};

}  // namespace shoal::tune
