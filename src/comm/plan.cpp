#include "comm/plan.hpp"

#include <algorithm>
#include <string>
#include <string_view>

#include "algorithms/hierarchy.hpp"
#include "algorithms/registry.hpp"
#include "comm/flat.hpp"
#include "core/check.hpp"
#include "core/config.hpp"

namespace shoal::comm {

using algorithms::AlgorithmInfo;
using algorithms::Collective;

const char* to_string(Path path) {
  switch (path) {
    case Path::schedule:
      return "schedule";
    case Path::flat:
      return "flat";
    case Path::hierarchy:
      return "hierarchy";
  }
  return "?";
}

Planner::Planner(Layout layout, std::function<tune::Dispatcher()> make_dispatcher)
    : layout_(layout), make_dispatcher_(std::move(make_dispatcher)) {}

Planner::~Planner() {
  if (!saves_learned_ || save_path_.empty() || !dispatcher_ || !learner_) return;
  const tune::Context& c = dispatcher_->context();
  std::vector<tune::LearnedBucket> mine;
  for (const auto& l : learner_->learned()) {
    if (!l.winner || l.from_file) continue;
    tune::LearnedBucket b{l.key.first, c.world,       c.ranks_per_host, c.transport, l.key.second,
                          l.pick,      l.alternative, l.runner_up,      l.winner};
    b.pick_s = l.best[0];
    b.alternative_s = l.best[1];
    if (l.runner_up) b.runner_up_s = l.best[2];
    b.exploration_s = l.exploration_s;
    mine.push_back(b);
  }
  if (mine.empty()) return;
  try {
    tune::save_learned_file(save_path_, mine);
  } catch (const std::exception& e) {
    SHOAL_WARN("SHOAL_TUNE_SAVE: what this communicator learned is not saved: " << e.what());
  }
}

const tune::Dispatcher& Planner::dispatcher() {
  if (!dispatcher_) dispatcher_.emplace(make_dispatcher_());
  return *dispatcher_;
}

HierarchyMode Planner::hierarchy_mode() {
  if (!hierarchy_mode_) {
    const std::string mode = config::get("SHOAL_HIERARCHICAL");
    SHOAL_CHECK(mode == "auto" || mode == "on" || mode == "off", InvalidArgument,
                "SHOAL_HIERARCHICAL='" << mode << "' must be auto, on or off");
    hierarchy_mode_ = mode == "on"    ? HierarchyMode::on
                      : mode == "off" ? HierarchyMode::off
                                      : HierarchyMode::automatic;
    hierarchy_sizes_ = tune::Dispatcher::hierarchy_sizes_from_environment();
    // Uneven hosts, one host, one rank per host: nothing to compose.
    if (!layout_.hierarchy_fits) hierarchy_mode_ = HierarchyMode::off;
    // A SHOAL_ALGO rule is meant for the whole communicator (shoal-bench --algo): auto stands
    // aside.
    if (*hierarchy_mode_ == HierarchyMode::automatic && !config::get("SHOAL_ALGO").empty())
      hierarchy_mode_ = HierarchyMode::off;
  }
  return *hierarchy_mode_;
}

bool Planner::hierarchy_wanted(Collective collective, uint64_t bytes) {
  const auto index = static_cast<size_t>(collective);
  SHOAL_CHECK(index < verdicts_.size(), Internal,
              algorithms::to_string(collective) << " is not hierarchical");
  Verdict& verdict = verdicts_[index];
  if (verdict.bytes != bytes)
    verdict = {bytes, dispatcher().auto_hierarchy(collective, bytes, hierarchy_sizes_).take};
  return verdict.take;
}

bool Planner::flat_fits_here(const Request& r, const algorithms::CollectiveArgs& a) const {
  const uint64_t slots = layout_.flat.slot_bytes;
  if (slots == 0 || !flat_fits(a, layout_.flat)) return false;
  // Vectored: within the slots the flat path is faster than a schedule by far more than
  // packing the pieces costs; beyond them (direct, by address) it is not.
  return !r.vectored || flat_decision_bytes(a) <= slots;
}

Plan Planner::plan(const Request& r, const algorithms::CollectiveArgs& checked) {
  using algorithms::NamedPath;
  Plan p;
  p.args = checked;
  algorithms::CollectiveArgs& a = p.args;
  auto take = [&](Path path) -> Plan& {
    p.path = path;
    if (path == Path::flat) p.queued = flat_queued(a, layout_.flat);
    // The hierarchy's groups compare their own calls.
    if (path != Path::hierarchy) p.signature = algorithms::signature(a);
    ++planned_[static_cast<int>(path)];
    return p;
  };
  if (r.forced) {
    a.algorithm = r.forced;
    a.forced = true;
    return take(Path::schedule);
  }
  // A public all_reduce, all_gather or reduce_scatter of one buffer: what the hierarchy takes.
  const bool composable =
      r.may_use_hierarchy && !r.vectored && algorithms::composable(a.collective);
  const bool can_compose = composable && layout_.hierarchy_fits && a.count > 0;
  const bool can_flat = flat_fits_here(r, a);  // a call of no bytes only as a barrier
  // A path the call names is taken, or every rank refuses alike (every input is equal on all
  // ranks), before anything is sent; one a SHOAL_ALGO rule names, where the call can take it.
  if (r.forced_path == NamedPath::hierarchical)
    SHOAL_CHECK(composable && layout_.hierarchy_fits, InvalidArgument,
                algorithms::to_string(a.collective)
                    << ": CallOptions 'hierarchical' needs all_reduce, all_gather or "
                       "reduce_scatter, not vectored, on hosts of equal rank counts, several "
                       "ranks and hosts each");
  if (r.forced_path == NamedPath::flat)
    SHOAL_CHECK(can_flat || a.count == 0, InvalidArgument,
                algorithms::to_string(a.collective)
                    << ": CallOptions 'flat' needs every rank on one host's shared memory and a "
                       "call the slots (SHOAL_FLAT_MAX_BYTES) or the direct path serve");
  // One lookup of SHOAL_ALGO per call: its first matching rule that names a row or a path this
  // call can take (a path it cannot take is as if not written).
  const auto rule = r.forced_path == NamedPath::none
                        ? algorithms::override_rule_for(a.collective, a.count * size_of(a.dtype),
                                                        {can_flat, can_compose})
                        : std::nullopt;
  const NamedPath named = rule ? rule->path : r.forced_path;
  if (named == NamedPath::hierarchical && can_compose) return take(Path::hierarchy);
  if (named == NamedPath::flat && can_flat) return take(Path::flat);
  // SHOAL_HIERARCHICAL, where no path is named (its mode checked at the first call that could
  // be hierarchical, whatever the layout).
  if (named == NamedPath::none && composable && a.count > 0) {
    const HierarchyMode mode = hierarchy_mode();
    if (mode == HierarchyMode::on || (mode == HierarchyMode::automatic &&
                                      hierarchy_wanted(a.collective, algorithms::model_bytes(a))))
      return take(Path::hierarchy);
  }
  // Made at the first call whatever its path: its settings are checked there, on every rank.
  const tune::Dispatcher& d = dispatcher();
  // The flat path where it fits; beyond the slots (the direct path) a rule naming a row wins,
  // within them the flat path stays (documented); vectored calls only within the slots.
  const AlgorithmInfo* rule_row = rule ? rule->algorithm : nullptr;
  if (can_flat && (r.vectored || flat_decision_bytes(a) <= layout_.flat.slot_bytes || !rule_row)) {
    return take(Path::flat);
  }
  // A schedule: the rule's row, else the dispatcher's (after learning), fixed here so that the
  // signature and the engine see the same.
  a.algorithm = rule_row ? rule_row
                         : learned_row(r, a, d.choose(a.collective, algorithms::model_bytes(a)), p);
  a.forced = true;
  return take(Path::schedule);
}

const AlgorithmInfo* Planner::learned_row(const Request& r, const algorithms::CollectiveArgs& a,
                                          const tune::Choice& choice, Plan& plan) {
  // The model's pick, priced on the constants or on measured links: both price each link alone
  // and neither sees flows overrun a queue. (A tuning file's pick was timed on these links.)
  const bool on_links = choice.source == tune::Choice::Source::links;
  if (!agree_ || !r.may_use_hierarchy || r.vectored ||
      (choice.source != tune::Choice::Source::cost_model && !on_links) ||
      !algorithms::composable(a.collective))
    return choice.algorithm;
  const tune::Context& c = dispatcher().context();
  if (c.transport != tune::Transport::tcp || c.world <= c.ranks_per_host) return choice.algorithm;
  if (!learn_min_bytes_) {
    const std::string mode = config::get("SHOAL_TUNE_LEARN");
    SHOAL_CHECK(mode == "on" || mode == "off", InvalidArgument,
                "SHOAL_TUNE_LEARN='" << mode << "' is not on or off");
    learn_min_bytes_ =
        mode == "on" ? std::max<uint64_t>(config::get_bytes("SHOAL_TUNE_LEARN_MIN_BYTES"), 1) : 0;
    save_path_ = mode == "on" ? config::get("SHOAL_TUNE_SAVE") : "";
    if (!save_path_.empty()) {
      try {
        earlier_ = tune::read_learned_file(save_path_);
      } catch (const Error& e) {
        // This rank explores as if the file were empty (every rank does: they agree per
        // bucket), and the file is left as it is.
        SHOAL_WARN("SHOAL_TUNE_SAVE: " << e.what());
      }
    }
  }
  const uint64_t bytes = algorithms::model_bytes(a);
  if (*learn_min_bytes_ == 0 || bytes < *learn_min_bytes_) return choice.algorithm;
  // The alternative streams to one neighbour: the ring, in the measured links' order where
  // they were measured.
  const AlgorithmInfo* ring =
      algorithms::find_algorithm(a.collective, on_links ? "link_ring" : "ring");
  if (!ring || ring == choice.algorithm) return choice.algorithm;
  const auto key = tune::Learner::key_of(a.collective, bytes);
  // A bucket's candidates are fixed at its first call. Where the model prices a third row
  // close to its pick, that one is explored too.
  const bool fresh = learner_->fresh(key);
  const AlgorithmInfo* runner_up =
      fresh ? dispatcher().runner_up(a.collective, bytes, choice.algorithm, ring) : nullptr;
  if (fresh && !save_path_.empty()) settle_from_file(key, choice.algorithm, ring, runner_up);
  tune::Learner::Turn turn = learner_->next(key, choice.algorithm, ring, runner_up);
  if (turn.decide) {
    turn.row = learner_->decide(key, agree_([&] { return learner_->samples(key); }));
    const tune::Learner::Learned& l = learner_->learned(key);
    SHOAL_INFO("learned " << algorithms::to_string(a.collective) << " from " << bytes << " bytes: "
                          << turn.row->name << " of " << l.pick->name << ", " << l.alternative->name
                          << (l.runner_up ? ", " : "") << (l.runner_up ? l.runner_up->name : "")
                          << " (exploring cost " << l.exploration_s * 1e3 << " ms beyond it)");
  }
  if (turn.sample >= 0)
    plan.timed = [learner = learner_, key, sample = turn.sample](double seconds) {
      learner->record(key, sample, seconds);
    };
  return turn.row;
}

void Planner::settle_from_file(const tune::Learner::Key& key, const AlgorithmInfo* pick,
                               const AlgorithmInfo* ring, const AlgorithmInfo* runner_up) {
  const tune::Context& c = dispatcher().context();
  const tune::LearnedBucket here{key.first, c.world, c.ranks_per_host, c.transport, key.second};
  double mine = 0;  // 1 + the winner's registry index, 0 for none
  for (const auto& b : earlier_)
    if (tune::same_bucket(b, here) && b.pick == pick && b.alternative == ring &&
        b.runner_up == runner_up)
      mine = 1.0 + static_cast<double>(b.winner - algorithms::registry().data());
  // max(mine) == min(mine): every rank read the same winner.
  const std::vector<double> agreed = agree_([&] { return std::vector<double>{mine, -mine}; });
  if (agreed[0] < 1 || agreed[0] != -agreed[1]) return;
  const AlgorithmInfo* winner = &algorithms::registry()[static_cast<size_t>(agreed[0]) - 1];
  learner_->settle(key, pick, ring, runner_up, winner);
  SHOAL_INFO("learned " << algorithms::to_string(key.first) << " bucket 2^" << key.second
                        << " from SHOAL_TUNE_SAVE's file: " << winner->name);
}

}  // namespace shoal::comm
