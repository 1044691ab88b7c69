#include "comm/plan.hpp"

#include <string>
#include <string_view>

#include "algorithms/registry.hpp"
#include "comm/flat.hpp"
#include "core/check.hpp"
#include "core/config.hpp"

namespace shoal::comm {

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
  const uint64_t slots = layout_.flat_slot_bytes;
  if (slots == 0 || !flat_fits(a, slots, layout_.flat_direct_bytes)) return false;
  // Vectored: within the slots the flat path is faster than a schedule by far more than
  // packing the pieces costs; beyond them (direct, by address) it is not.
  return !r.vectored || flat_decision_bytes(a) <= slots;
}

bool Planner::flat_eligible(const Request& r, const algorithms::CollectiveArgs& a) const {
  if (!flat_fits_here(r, a)) return false;
  // Beyond the slots only the direct path is flat, and there a SHOAL_ALGO rule for the call
  // wins (within them the flat path stays: documented).
  return r.vectored || flat_decision_bytes(a) <= layout_.flat_slot_bytes ||
         !algorithms::override_for(a.collective, a.count * size_of(a.dtype));
}

Plan Planner::plan(const Request& r, const algorithms::CollectiveArgs& checked) {
  Plan p;
  p.args = checked;
  algorithms::CollectiveArgs& a = p.args;
  if (r.forced) {
    a.algorithm = r.forced;
    a.forced = true;
    p.signature = algorithms::signature(a);
    ++planned_[static_cast<int>(Path::schedule)];
    return p;
  }
  const bool hierarchical_collective = a.collective == Collective::all_reduce ||
                                       a.collective == Collective::all_gather ||
                                       a.collective == Collective::reduce_scatter;
  if (r.forced_path == Request::ForcedPath::hierarchy) {
    // Every input is equal on all ranks: every rank refuses alike, before anything is sent.
    SHOAL_CHECK(layout_.hierarchy_fits && hierarchical_collective && !r.vectored, InvalidArgument,
                algorithms::to_string(a.collective)
                    << ": CallOptions 'hierarchical' needs all_reduce, all_gather or "
                       "reduce_scatter, not vectored, on hosts of equal rank counts, several "
                       "ranks and hosts each");
    if (a.count > 0) {
      p.path = Path::hierarchy;
      ++planned_[static_cast<int>(Path::hierarchy)];
      return p;
    }
  } else if (r.forced_path == Request::ForcedPath::flat && a.count > 0) {
    SHOAL_CHECK(flat_fits_here(r, a), InvalidArgument,
                algorithms::to_string(a.collective)
                    << ": CallOptions 'flat' needs every rank on one host's shared memory and a "
                       "call the slots (SHOAL_FLAT_MAX_BYTES) or the direct path serve");
  }
  // A SHOAL_ALGO rule may name a path: taken where the call can take it, else the rows decide.
  const std::string_view rule_path =
      r.forced_path == Request::ForcedPath::none
          ? algorithms::override_path_for(a.collective, a.count * size_of(a.dtype))
          : std::string_view{};
  if (rule_path == "hierarchical" && r.may_use_hierarchy && !r.vectored &&
      hierarchical_collective && a.count > 0 && layout_.hierarchy_fits) {
    p.path = Path::hierarchy;
    ++planned_[static_cast<int>(Path::hierarchy)];
    return p;
  }
  const bool flat_by_rule = rule_path == "flat" && a.count > 0 && flat_fits_here(r, a);
  if (r.forced_path == Request::ForcedPath::none && rule_path.empty() && r.may_use_hierarchy &&
      !r.vectored && hierarchical_collective && a.count > 0 &&
      hierarchy_mode() != HierarchyMode::off) {
    // The size auto decides by: the whole vector, the gathered output, the scattered input.
    const uint64_t bytes =
        a.count * size_of(a.dtype) *
        (a.collective == Collective::all_reduce ? 1 : static_cast<uint64_t>(a.size));
    if (hierarchy_mode() == HierarchyMode::on || hierarchy_wanted(a.collective, bytes)) {
      p.path = Path::hierarchy;
      ++planned_[static_cast<int>(Path::hierarchy)];
      return p;
    }
  }
  // Made at the first call whatever its path: its settings are checked there, on every rank.
  const tune::Dispatcher& d = dispatcher();
  if ((r.forced_path == Request::ForcedPath::flat && a.count > 0) || flat_by_rule ||
      flat_eligible(r, a)) {
    p.path = Path::flat;
    p.queued = flat_queued(a, layout_.flat_slot_bytes, layout_.flat_direct_bytes);
    p.signature = algorithms::signature(a);
    ++planned_[static_cast<int>(Path::flat)];
    return p;
  }
  // A schedule: the dispatcher's row, then the final one (a SHOAL_ALGO rule wins), fixed here
  // so that the signature and the engine see the same.
  a.algorithm = d.choose(a.collective, algorithms::model_bytes(a)).algorithm;
  a.algorithm = &algorithms::choose(a);
  a.forced = true;
  p.signature = algorithms::signature(a);
  ++planned_[static_cast<int>(Path::schedule)];
  return p;
}

}  // namespace shoal::comm
