// The planner: the one place that decides where a call goes. Every call of a communicator
// (Communicator's methods, and the library's own calls at creation and split) becomes a
// Request; its arguments are checked once (CommImpl::checked_args), then Planner::plan picks
// one path and, for a schedule, its registry row:
//
//   forced row (CallOptions::algorithm)  -> that row's schedule, nothing else considered
//   forced path ("flat", "hierarchical") -> that path, or InvalidArgumentError if it cannot
//   hierarchy (SHOAL_HIERARCHICAL, the layout, auto's verdict) -> comm/hierarchical
//   flat (every rank shares memory, the call fits) -> comm/flat (slots, direct or queued)
//   otherwise -> a schedule: SHOAL_ALGO's row, else the dispatcher's (src/tune), else the first
//
// The plan names the final row (args.algorithm, args.forced): the engine builds exactly what
// the ranks compare in their signatures. Every input of a plan is equal on all ranks, so
// every rank plans alike. docs/architecture.md walks through it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/schedule.hpp"
#include "comm/flat_memory.hpp"
#include "comm/request.hpp"
#include "tune/dispatcher.hpp"
#include "tune/learned_file.hpp"
#include "tune/learner.hpp"

namespace shoal::comm {

/// SHOAL_HIERARCHICAL, after the layout: off where the hierarchy does not fit.
enum class HierarchyMode { off, on, automatic };

enum class Path : uint8_t {
  schedule,   // the engine runs the row's schedule (point-to-point frames)
  flat,       // comm/flat: shared slots, direct by address, or a queued broadcast
  hierarchy,  // comm/hierarchical: phases on the host's and the rank-aligned groups
};
constexpr int kNumPaths = 3;
const char* to_string(Path path);

struct Plan {
  Path path = Path::schedule;
  /// The checked arguments; for a schedule with its final row (args.algorithm, args.forced).
  algorithms::CollectiveArgs args;
  /// A flat queued broadcast (its root checks nobody: CollectiveArgs::unchecked).
  bool queued = false;
  /// What the ranks compare (algorithms::signature of args); 0 on the hierarchy's path, whose
  /// groups compare their own calls.
  uint32_t signature = 0;
  /// An explored call (tune::Learner): its seconds from start to end, on the progress thread.
  std::function<void(double)> timed;
};

class Planner {
 public:
  /// What the flat path and the hierarchy allow on this communicator (equal on all ranks).
  struct Layout {
    FlatLimits flat;              // slot_bytes 0: not every rank shares memory, no flat path
    bool hierarchy_fits = false;  // comm::hierarchy_fits(topology)
  };
  /// `make_dispatcher` builds the dispatcher at the first call that plans (after the
  /// communicator's calibration, whose constants it reads).
  Planner(Layout layout, std::function<tune::Dispatcher()> make_dispatcher);
  /// Rank 0's planner merges what it learned into SHOAL_TUNE_SAVE's file (a failure is a
  /// warning: nothing is lost but this job's buckets).
  ~Planner();

  /// The path of `request`, whose arguments `checked` holds (with in_place set).
  Plan plan(const Request& request, const algorithms::CollectiveArgs& checked);

  /// The dispatcher (made, reading SHOAL_DISPATCH and SHOAL_TUNE_FILE, at the first call).
  const tune::Dispatcher& dispatcher();
  /// Makes the dispatcher again at the next call (what it prices from has changed: measured
  /// links). Every rank calls it between the same two calls.
  void remake_dispatcher() {
    dispatcher_.reset();
    verdicts_ = {};
  }
  /// SHOAL_HIERARCHICAL after the layout, read at the first call that could be hierarchical.
  HierarchyMode hierarchy_mode();
  /// Turns on learning (SHOAL_TUNE_LEARN, read at the first call that could learn): `agree`
  /// waits for the explored calls, then reduces what `mine` reads (this rank's times of them)
  /// across ranks with max (a collective; CommImpl runs it). Without it the planner never
  /// learns.
  using Agree =
      std::function<std::vector<double>(const std::function<std::vector<double>()>& mine)>;
  void set_agree(Agree agree) { agree_ = std::move(agree); }
  /// This planner writes SHOAL_TUNE_SAVE's file when it goes (rank 0's of each communicator).
  void set_saves_learned(bool saves) { saves_learned_ = saves; }
  /// What learning has seen and settled so far.
  const tune::Learner& learner() const { return *learner_; }
  /// Calls planned onto `path` so far (tests read back the path a call took).
  uint64_t planned(Path path) const { return planned_[static_cast<int>(path)]; }
  const Layout& layout() const { return layout_; }

 private:
  /// auto's verdict for `collective` at `bytes`, kept per collective: a training loop repeats
  /// its sizes, and the verdict is a pure function of them.
  bool hierarchy_wanted(algorithms::Collective collective, uint64_t bytes);
  /// Whether the flat path can serve the call (the layout, its size, vectored within slots).
  bool flat_fits_here(const Request& request, const algorithms::CollectiveArgs& a) const;
  /// The row of a schedule the dispatcher picked (`choice`), after learning where it applies.
  const algorithms::AlgorithmInfo* learned_row(const Request& request,
                                               const algorithms::CollectiveArgs& a,
                                               const tune::Choice& choice, Plan& plan);

  Layout layout_;
  std::function<tune::Dispatcher()> make_dispatcher_;
  std::optional<tune::Dispatcher> dispatcher_;
  std::optional<HierarchyMode> hierarchy_mode_;
  tune::Dispatcher::SizeRange hierarchy_sizes_;
  struct Verdict {
    uint64_t bytes = UINT64_MAX;  // none yet
    bool take = false;
  };
  std::array<Verdict, 3> verdicts_;  // all_reduce, all_gather, reduce_scatter
  std::array<uint64_t, kNumPaths> planned_{};
  Agree agree_;
  // Shared with the explored calls' callbacks, which the engine may run after the planner
  // is gone (it finishes pending work when it stops).
  std::shared_ptr<tune::Learner> learner_ = std::make_shared<tune::Learner>();
  std::optional<uint64_t> learn_min_bytes_;  // SHOAL_TUNE_LEARN_MIN_BYTES; 0 when off
  /// A fresh bucket that an earlier job settled (every rank's file saying the same) starts
  /// from its winner; every rank agrees on it with one all_reduce.
  void settle_from_file(const tune::Learner::Key& key, const algorithms::AlgorithmInfo* pick,
                        const algorithms::AlgorithmInfo* ring,
                        const algorithms::AlgorithmInfo* runner_up);
  std::string save_path_;                     // SHOAL_TUNE_SAVE, read with learn_min_bytes_
  std::vector<tune::LearnedBucket> earlier_;  // what its file held then
  bool saves_learned_ = false;
};

}  // namespace shoal::comm
