// What a Communicator holds: its place in the job, the store, the topology, the engine.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/schedule.hpp"
#include "comm/agreement.hpp"
#include "comm/engine.hpp"
#include "comm/executor.hpp"
#include "comm/hierarchical.hpp"
#include "comm/plan.hpp"
#include "comm/request.hpp"
#include "comm/topology.hpp"
#include "shoal/communicator.hpp"
#include "tune/dispatcher.hpp"
#include "tune/links.hpp"

namespace shoal::detail {

class CommImpl {
 public:
  CommImpl(std::shared_ptr<Store> store, int rank, int size, const Options& options);

  /// Runs one call: checks its arguments (InvalidArgumentError before anything is sent), plans
  /// it (comm/plan.hpp) and starts it on the executor the plan names.
  Work call(const comm::Request& request);
  /// Sets what `call` names for `r` (CallOptions::algorithm): a row (r.forced) or a path
  /// (r.forced_path). InvalidArgumentError for a name that is neither, for r's collective.
  void apply_call_options(comm::Request& r, const CallOptions* call) const;

  /// What the dispatcher's choice depends on (equal on all ranks): world, ranks per host, shm
  /// when every rank shares one host's memory, else tcp, and the cores the hosts give their ranks.
  tune::Context tune_context() const {
    return tune::make_context(topology.host_of,
                              engine->shm() != nullptr && engine->shm()->all_ranks_share_memory(),
                              topology.cores_of_host);
  }

  // ---- measured links (comm/links.cpp) ----
  /// Times every directed pair of ranks, one pair at a time (SHOAL_LINKS_BYTES each way), and
  /// uses the rates (use_links). Collective; the same rates on every rank.
  tune::Links measure_links();
  /// Uses `measured` from the next call on: the order link_ring follows and the planner's
  /// prices (tune/links.hpp). Every rank passes the same rates (ranks that differ order their
  /// rings differently, which the first link_ring call's signatures catch).
  void use_links(tune::Links measured);
  std::shared_ptr<const tune::Links> links;            // null until measured
  std::shared_ptr<const std::vector<int>> ring_order;  // the order links give; null until then

  /// Scheduled calls issued so far that ran `row` (tests read back what a call ran).
  uint64_t runs_of(const algorithms::AlgorithmInfo& row) const { return engine->runs_of(row); }

  /// Folds `signature` into what the ranks of the next collective compare (as
  /// CollectiveArgs::unchecked carries a queued broadcast's): the hierarchy's groups compare
  /// the whole hierarchical call, not only the phase each of them runs.
  void check_with_next_call(uint32_t signature) {
    unchecked_ = (unchecked_ * 0x9e3779b97f4a7c15ull + signature) | uint64_t{1} << 32;
  }

  /// "shm with 3 peer(s), tcp with 4 peer(s) on 10.0.0.2".
  std::string transport_summary() const;

  int rank = 0, size = 1;
  int shm_peers = 0, tcp_peers = 0;
  // Most TCP connections to one peer (SHOAL_SOCKET_STREAMS per shared NIC).
  int max_connections = 1;
  // The longest round trip this rank's TCP connections to other hosts measured at their
  // handshake, in seconds; 0 without any. Once the communicator is made, the job's (every
  // rank's longest, agreed at creation).
  double longest_round_trip_s = 0;
  comm::Topology topology;
  std::string listen_address;
  std::chrono::milliseconds timeout{0};
  std::string calibrate_option;  // Options::calibrate as given: shrink() and split() pass it on
  uint64_t chunk_bytes = 0;
  uint64_t comm_id = 0;
  uint64_t shrinks = 0;  // Communicator::shrink calls so far (each gets its own key scope)
  std::shared_ptr<Store> store;
  /// The store given to create() (or join()), kept by every communicator made from this one by
  /// shrink, grow and split: grow() and join() meet there, so a joiner needs only the job's store.
  std::shared_ptr<Store> job_store;
  std::unique_ptr<comm::Engine> engine;

  /// Decides every call's path (made once the engine exists: the flat path's limits are its).
  std::optional<comm::Planner> planner;

  // ---- split and hierarchical collectives (comm/split.cpp, comm/hierarchical.cpp) ----
  /// The child of Communicator::split (collective); empty for a negative color.
  Communicator split(int color, int key);
  /// Keeps issue order: waits for hierarchical work issued before (one load when there is none).
  void fence_hierarchical() {
    if (hierarchy && hierarchy->pending()) hierarchy->drain();
  }
  int splits = 0;  // split() calls so far, equal on all ranks: scopes the children's keys
  std::unique_ptr<comm::Hierarchy> hierarchy;  // after engine: stopped before the engine is

  /// The cost model's constants measured when this communicator was made (comm/calibration.cpp;
  /// none with calibration off, SHOAL_DISPATCH=off or one rank). Equal on all ranks.
  std::optional<algorithms::CostParams> calibrated_params;

 private:
  /// What set_up() builds and the engine then owns.
  struct Transport {
    std::vector<std::unique_ptr<transport::Stream>> streams;  // per rank (none for this one)
    std::unique_ptr<transport::shm::ShmMesh> shm;
    std::unique_ptr<comm::FlatMemory> flat;  // in shm, where every rank shares memory
  };
  /// Rendezvous, topology, connections and shared memory of a new communicator, before the
  /// ranks vote on it (comm/agreement.hpp).
  Transport set_up(const std::string& prefix, comm::Clock::time_point deadline);
  /// How the cost model learns the links at creation (Options::calibrate, else
  /// SHOAL_TUNE_CALIBRATE; off with SHOAL_DISPATCH=off or one rank), checked before the vote.
  enum class Calibration : uint64_t { off = 1, latency = 2, on = 3 };
  Calibration calibration_mode(const Options& options) const;
  /// Compares the settings every rank must hold equal (config::Agreement) and the calibration
  /// mode with one forced Bruck all_gather (collective), which also carries each rank's longest
  /// round trip: longest_round_trip_s becomes the job's. The first difference, or nullopt.
  std::optional<comm::Disagreement> compare_agreed_settings(Calibration mode);
  /// Sets calibrated_params: with `on`, a few forced ring calls timed on every rank
  /// (collective); with `latency`, the defaults with the agreed round trip's flight.
  void calibrate_cost_model(Calibration mode);

  /// The arguments of a call, checked (InvalidArgumentError); buffers and in_place not set.
  algorithms::CollectiveArgs checked_args(const comm::Request& r) const;
  /// One per path of the planner (comm/executor.hpp), by comm::Path.
  std::array<std::unique_ptr<comm::Executor>, comm::kNumPaths> executors_;
  uint64_t unchecked_ = 0;  // CollectiveArgs::unchecked of the next call
  /// Every ring order this communicator has used: calls in flight hold them by address.
  std::vector<std::shared_ptr<const std::vector<int>>> ring_orders_;
  /// SHOAL_LINKS, checked before the creation vote: measure at creation.
  bool links_wanted() const;
  /// The latest explored call of the planner's learning (Planner::set_agree): collectives
  /// complete in issue order, so once it has, every earlier one has too.
  Work last_explored_;
};

/// The library's access to a Communicator's implementation, which the public header grants to
/// this struct alone (tests reach the planner's counters and the engine through it too).
struct Internals {
  static CommImpl& of(Communicator& c) { return *c.impl_; }
};

}  // namespace shoal::detail
