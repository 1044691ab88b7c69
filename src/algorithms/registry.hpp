// The table of algorithms: one row per (algorithm, collective), with a one-line description,
// its constraints and an alpha-beta-gamma cost model. A call runs the SHOAL_ALGO override's
// row if one matches, else the row its CollectiveArgs names (the dispatcher's pick, src/tune),
// else the first row that serves its collective.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "algorithms/schedule.hpp"

namespace shoal::algorithms {

/// Hockney/alpha-beta-gamma parameters: seconds per message, per byte moved, per byte reduced.
struct CostParams {
  double alpha = 5e-6;
  double beta = 1e-10;   // 10 GB/s
  double gamma = 5e-11;  // 20 GB/s of reduction
  /// Across hosts: seconds per byte of memory work (reducing, copying, moving to a rank of the
  /// same host) that a step-synchronous call pays on top of its NIC time, with every rank and
  /// the network at work at once (the dispatcher's across-hosts model; calibrated from a Swing
  /// all_gather). gamma is one rank's reduction alone.
  double busy_gamma = 2e-10;
  /// The part of alpha that is a message's time of flight (half the round trip; 0: unknown).
  /// Messages sent at once to several peers overlap their flights but not the rest of alpha,
  /// the per-message overhead: what prices the direct rows against the ring on long paths.
  double flight = 0;
};

struct AlgorithmInfo {
  std::string_view name;
  Collective collective;
  std::string_view description;
  std::string_view constraints;
  void (*build)(Schedule&, const CollectiveArgs&);
  /// Predicted seconds on `p` ranks; `bytes` is the whole vector of all_reduce, broadcast and
  /// reduce, the gathered output of all_gather and gather, the input of reduce_scatter and
  /// scatter (count x element size x p), a rank's buffer for all_to_all.
  double (*cost)(int p, uint64_t bytes, const CostParams& c);
  /// Chunk-pipelined: a chunk's reduction and its host-local moves overlap the transfer of the
  /// next, so across hosts its memory work hides behind the NICs; otherwise every step waits
  /// for the whole of the previous one (the butterflies, Bruck, the trees of whole blocks).
  bool pipelined = false;
  /// Runs in the order of measured links (CollectiveArgs::ring_order): the planner offers it
  /// only on a communicator that has measured them, and tuning sweeps and the simulator's
  /// tables, which time rows without links, leave it out.
  bool follows_links = false;
  /// Sends to every other rank at once (the direct rows): what it gains is the flights it
  /// overlaps, and the model does not see its p-1 flows meet in each receiver's queue, so the
  /// dispatcher offers it only on long paths (tune::kLongFlightS).
  bool overlaps_flights = false;
};

/// Every algorithm, in order of preference per collective.
const std::vector<AlgorithmInfo>& registry();

/// The row named `name` that serves `collective`, or nullptr.
const AlgorithmInfo* find_algorithm(Collective collective, std::string_view name);

/// The row that runs `args`: the override's (SHOAL_ALGO) if one matches, else args.algorithm
/// (the dispatcher's), else the first row. Throws InvalidArgumentError when SHOAL_ALGO is
/// malformed, InternalError when args.algorithm serves another collective.
const AlgorithmInfo& choose(const CollectiveArgs& args);

/// The first row that serves `collective` (the choice without override or dispatcher).
const AlgorithmInfo& first_row(Collective collective);

/// A path of the planner's that SHOAL_ALGO and CallOptions name like a row.
enum class NamedPath : uint8_t { none, flat, hierarchical };
/// "flat" and "hierarchical"; none for any other name.
NamedPath named_path(std::string_view name);

/// A path's row beside the schedules' (comm/plan.hpp takes it): what it serves, what it
/// needs, and how the planner prices it against the rows. shoal-info lists them.
struct PathInfo {
  NamedPath path;
  std::string_view name;
  std::vector<Collective> collectives;
  std::string_view constraints;
  std::string_view description;
  std::string_view cost;
};
/// Both paths, flat first.
const std::vector<PathInfo>& paths();
/// The path named `name` if it serves `collective`, else nullptr.
const PathInfo* find_path(Collective collective, std::string_view name);

struct OverrideRule;
/// The paths a call can take, for the rules that name one.
struct PathSet {
  bool flat = false, hierarchical = false;
};
/// The first SHOAL_ALGO rule that matches this collective and count x element size and names a
/// row or a path in `takeable`, if any: a rule naming a path the call cannot take is skipped,
/// as if it were not written.
std::optional<OverrideRule> override_rule_for(Collective collective, uint64_t bytes,
                                              PathSet takeable);
/// The row of the first rule that names a row and matches, or nullptr (for callers that run
/// only rows).
const AlgorithmInfo* override_for(Collective collective, uint64_t bytes);

/// `n` of the cost models for a call: the whole vector of all_reduce, broadcast and reduce, the
/// gathered output of all_gather and gather, the input of reduce_scatter and scatter (count x
/// element size x p), a rank's buffer for all_to_all. The dispatcher and tuning files use it.
uint64_t model_bytes(const CollectiveArgs& args);

/// One rule of an override: collective, inclusive byte range of count x element size, and a
/// row or a path (the planner's "flat" or "hierarchical", taken where the call can take it).
struct OverrideRule {
  Collective collective;
  uint64_t min_bytes = 0, max_bytes = UINT64_MAX;
  const AlgorithmInfo* algorithm = nullptr;  // null for a path
  NamedPath path = NamedPath::none;          // none for a row
};
/// Parses "all_reduce:rabenseifner;all_gather:bruck;all_reduce:0-64K:binomial" (';' or ','
/// between rules, the first matching rule wins; "64K-" has no upper bound). Unknown
/// collectives or algorithms, or an algorithm that does not serve the collective, raise
/// InvalidArgumentError naming the choices.
std::vector<OverrideRule> parse_override(std::string_view spec);

namespace detail {
/// Tests and tools: replaces SHOAL_ALGO for the process ("" clears it). Throws like
/// parse_override. Ranks of one job must agree (the choice is part of every frame's signature).
void set_algorithm_override(std::string_view spec);
/// Tests: an override for the calling thread only, taking precedence ("" clears it). Lets
/// ranks run as threads choose differently (mismatch tests).
void set_thread_algorithm_override(std::string_view spec);
}  // namespace detail

}  // namespace shoal::algorithms
