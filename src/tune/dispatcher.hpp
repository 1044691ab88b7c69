// The dispatcher: which algorithm runs a call, from (collective, bytes, world size, ranks per
// host, transport). Measured times from a tuning file (SHOAL_TUNE_FILE, written by shoal-tune)
// of the nearest world, read as a smoothed curve over log(size) (tune/curves.hpp; outside its
// sizes: the ranking at the nearest); for a world larger than any measured,
// the simulator's predicted times when the file has them (shoal-sim tune; SHOAL_TUNE_SIM=off
// ignores them); the alpha-beta-gamma cost models of the registry where no table serves the
// collective and transport. Every input is
// the same on every rank (the file, the settings, the topology), so every rank picks the same
// row: the pick is part of each frame's signature.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "algorithms/registry.hpp"
#include "tune/curves.hpp"
#include "tune/links.hpp"
#include "tune/tuning_file.hpp"

namespace shoal::tune {

/// What the choice depends on besides the call.
struct Context {
  int world = 1;
  int ranks_per_host = 1;  // the most ranks on one host
  Transport transport = Transport::shm;
  int cores_per_host = 0;  // the fewest CPUs a host gives its ranks; 0: unknown (a core per rank)
};

/// Measured links (Communicator::measure_links) and the ring order they give; where present,
/// the rows of all_reduce, all_gather and reduce_scatter are priced on them (links.hpp).
struct MeasuredLinks {
  std::shared_ptr<const Links> links;
  std::shared_ptr<const std::vector<int>> ring_order;
  explicit operator bool() const { return links && ring_order; }
};

/// The context of a communicator: `host_of` is every rank's host index; `all_shared` says
/// whether every rank shares one host's memory (then the transport is shm); `cores_of_host`:
/// per host, the CPUs its ranks may run on (comm::Topology's).
Context make_context(const std::vector<int>& host_of, bool all_shared,
                     const std::vector<int>& cores_of_host = {});

/// Whether a host has more ranks than cores for them: then the cost model adds what the host's
/// ranks do in all, over its cores, to a row's time (HostWork).
inline bool ranks_share_cores(const Context& c) {
  return c.cores_per_host > 0 && c.ranks_per_host > c.cores_per_host;
}

/// Whether calls cross hosts of several ranks each: where the cost model counts the bytes
/// through a host's NICs and the memory work the NICs do not hide (HostTraffic).
inline bool across_hosts_of_several(const Context& c) {
  return c.transport == Transport::tcp && c.ranks_per_host > 1 && c.world > c.ranks_per_host;
}

/// Cost-model constants per transport, before SHOAL_TUNE_ALPHA/BETA/GAMMA/BUSY_GAMMA.
algorithms::CostParams default_cost_params(Transport t);
/// default_cost_params (or `measured`, the constants calibrated at creation) with
/// SHOAL_TUNE_ALPHA/BETA/GAMMA/BUSY_GAMMA applied (InvalidArgumentError when one is not a
/// non-negative number).
algorithms::CostParams cost_params(Transport t, const algorithms::CostParams* measured = nullptr);

/// What one call of a row does across hosts of `ranks_per_host` ranks, as fractions of the
/// call's bytes (model_bytes), counted from the row's own schedules for the ranks of host 0
/// (ranks in blocks per host, the layout launchers give).
struct HostTraffic {
  /// The bytes the host's ranks together send to other hosts: through the NICs they share,
  /// which is what a call across hosts waits for. The ring crosses each host boundary once
  /// ((p-1)/p, its own model's term); the butterflies send every rank's share across at once.
  double nic = 0;
  /// The busiest of those ranks' memory work: bytes it reduces, copies and sends to ranks of
  /// its own host.
  double memory = 0;
};
HostTraffic host_traffic(const algorithms::AlgorithmInfo& row, int world, int ranks_per_host);

/// What one call of a row makes the ranks of one host do in all, counted from its schedules
/// for host 0's ranks (the whole world on one host): messages sent, and bytes sent and reduced
/// as fractions of the call's bytes (model_bytes). Where ranks share cores, a message costs its
/// receiver a wake-up and every byte a core's time, whichever rank it is for: the cores work
/// through all of it in turn. A binomial tree sends 2(p-1) messages where recursive doubling
/// sends p log2 p and the ring 2p(p-1), which is why the tree wins small calls there.
struct HostWork {
  double messages = 0;
  double sent = 0, reduced = 0;
};
HostWork host_work(const algorithms::AlgorithmInfo& row, int world, int ranks_per_host);

/// The seconds `cores` cores take to work through `work` on a call of `bytes`: (alpha x
/// messages + beta x sent x bytes + gamma x reduced x bytes) / cores, which the cost model adds
/// to a row's critical path where ranks share cores (Brent's bound: time <= work / cores +
/// span). 0 for `cores` 0.
double shared_cores_cost(const HostWork& work, uint64_t bytes, const algorithms::CostParams& c,
                         int cores);

/// The row of `collective` with the least `cost`; ties go to the earlier row.
const algorithms::AlgorithmInfo& cost_model_choice(
    algorithms::Collective collective,
    const std::function<double(const algorithms::AlgorithmInfo&)>& cost);

struct Choice {
  enum class Source : uint8_t { first_row, cost_model, tuning_file, simulation, links };
  const algorithms::AlgorithmInfo* algorithm = nullptr;
  Source source = Source::first_row;
  double predicted_s = 0;  // the model's or the table's time; 0 for first_row
};
std::string_view to_string(Choice::Source s);

class Dispatcher {
 public:
  /// `file` may be null (cost model only); `enabled` false always gives the first row;
  /// `reading`: how the file's tables are read at a call's size (tune/curves.hpp).
  Dispatcher(Context context, algorithms::CostParams params, std::shared_ptr<const TuningFile> file,
             bool enabled = true, Reading reading = {}, const MeasuredLinks& links = {});

  /// From SHOAL_DISPATCH, SHOAL_TUNE_FILE (read and checked here), SHOAL_TUNE_SIM,
  /// SHOAL_TUNE_SMOOTHING and SHOAL_TUNE_ALPHA/BETA/GAMMA/BUSY_GAMMA; `measured`: the constants
  /// calibrated at creation.
  static Dispatcher from_environment(const Context& context,
                                     const algorithms::CostParams* measured = nullptr,
                                     const MeasuredLinks& links = {});

  /// The row for a call of `collective` moving `bytes` (algorithms::model_bytes). Does not look
  /// at SHOAL_ALGO: algorithms::choose gives that priority. With measured links, all_reduce,
  /// all_gather and reduce_scatter are priced on them (they know the links, which the tables
  /// and the constants do not); elsewhere the rows that follow links are never picked.
  Choice choose(algorithms::Collective collective, uint64_t bytes) const;
  /// The third candidate learning explores beside `pick` and `alternative`: the row of
  /// `collective` the cost model (or measured links) prices cheapest after them, where that
  /// price is within kCloseCost of the model's own best: the model is not sure there. Null
  /// where no row is that close, and without the cost model (disabled, one row).
  const algorithms::AlgorithmInfo* runner_up(algorithms::Collective collective, uint64_t bytes,
                                             const algorithms::AlgorithmInfo* pick,
                                             const algorithms::AlgorithmInfo* alternative) const;
  /// How close (a factor of the model's best price) a row must be priced to be explored.
  static constexpr double kCloseCost = 1.5;

  /// Whether the hierarchical composition (comm/hierarchical.hpp) is faster than every row for
  /// a call of `bytes`, by the table's "hierarchical" times (outside its sizes: at the nearest
  /// one); nullopt when the table has none (the cost model decides then). A tie stays flat.
  std::optional<bool> hierarchical_is_faster(algorithms::Collective collective,
                                             uint64_t bytes) const;

  /// The modelled time of the hierarchical composition for a call of `bytes` across hosts of
  /// several ranks (the same number on each), in the across-hosts model of the rows: its
  /// host-local phases cost alpha per step and busy_gamma per byte of their memory work, its
  /// inter-host phase the cheapest row on one rank per host, whose bytes cross the host's NICs
  /// once per rank of the host (the rank-aligned groups run at once). nullopt for other
  /// layouts and collectives.
  std::optional<double> hierarchy_cost(algorithms::Collective collective, uint64_t bytes) const;
  /// The modelled time, across hosts of several ranks, of the row that would run the call flat
  /// (choose's); nullopt for other layouts.
  std::optional<double> flat_cost(algorithms::Collective collective, uint64_t bytes) const;

  /// The sizes SHOAL_HIERARCHICAL=auto may take the hierarchy for where no table times it:
  /// min <= bytes < max (SHOAL_HIERARCHICAL_MIN_BYTES and _MAX_BYTES; 0: no bound).
  struct SizeRange {
    uint64_t min = 0, max = 0;
    bool contains(uint64_t bytes) const { return bytes >= min && (max == 0 || bytes < max); }
  };
  static SizeRange hierarchy_sizes_from_environment();

  /// SHOAL_HIERARCHICAL=auto's decision for a call of `bytes` on a layout that allows the
  /// hierarchy: hierarchical_is_faster where the table has hierarchical times; else, within
  /// `sizes`, whether hierarchy_cost is below flat_cost. `from`: "tuning file", "simulation",
  /// "cost model" or "size range" (outside it).
  struct AutoHierarchy {
    bool take = false;
    std::string_view from;
  };
  AutoHierarchy auto_hierarchy(algorithms::Collective collective, uint64_t bytes,
                               const SizeRange& sizes) const;

  /// The table this dispatcher reads for `collective`, or nullptr: of the same transport, the
  /// measured one nearest in world size, then ranks per host; but when the world is larger than
  /// every measured one (or none is measured), the nearest simulated one of such a world.
  const Measurements* table_for(algorithms::Collective collective) const;

  const Context& context() const { return context_; }
  const algorithms::CostParams& params() const { return params_; }
  bool enabled() const { return enabled_; }
  const Reading& reading() const { return reading_; }

 private:
  static constexpr int kCollectives = static_cast<int>(algorithms::Collective::recv) + 1;
  Context context_;
  algorithms::CostParams params_;
  std::shared_ptr<const TuningFile> file_;
  bool enabled_;
  Reading reading_;
  std::array<const Measurements*, kCollectives> tables_{};
  std::array<Curves, kCollectives> curves_{};  // tables_ as read
  std::array<int, kCollectives> rows_{};       // how many rows serve each collective
  /// Across hosts of several ranks, per registry row of all_reduce, all_gather and
  /// reduce_scatter: host_traffic at this context, and on one rank per host of as many hosts
  /// (the hierarchy's inter-host phase). Empty for other layouts.
  std::vector<HostTraffic> traffic_, inter_traffic_;
  /// The collectives whose flat pick is the across-hosts model's (no table decides).
  std::array<bool, kCollectives> nic_aware_{};
  /// Where ranks share cores, per registry row of all_reduce, all_gather and reduce_scatter:
  /// host_work at this context. Empty otherwise.
  std::vector<HostWork> work_;
  /// With measured links, per registry row of all_reduce, all_gather and reduce_scatter:
  /// tune::link_seconds_per_byte. Empty otherwise.
  std::vector<double> link_cost_;
  /// With measured latencies, likewise: tune::link_latency_seconds. Empty otherwise.
  std::vector<double> link_latency_;
  /// The longest flight (calibrated, or on measured links) is kLongFlightS or more: the rows
  /// that overlap flights are offered.
  bool long_paths_ = false;
  /// Whether the cost model may pick `row` here (the rows that overlap flights: long paths).
  bool offered(const algorithms::AlgorithmInfo& row) const {
    return long_paths_ || !row.overlaps_flights;
  }
  /// With measured latencies: the alpha per step beside them.
  double step_alpha_ = 0;
  /// The collectives link_cost_ prices (they skip the tables).
  std::array<bool, kCollectives> on_links_{};
  void choose_tables();
  /// The cost model's time of `row` for `bytes`: its alpha-beta-gamma model, across hosts of
  /// several ranks the across-hosts model (HostTraffic), with measured links their model
  /// (alpha per step, the busiest link, gamma per byte reduced), plus shared_cores_cost where
  /// ranks share cores; infinite for a row that follows links where none are measured.
  double row_cost(const algorithms::AlgorithmInfo& row, uint64_t bytes) const;
};

}  // namespace shoal::tune
