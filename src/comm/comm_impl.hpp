// What a Communicator holds: its place in the job, the store, the topology, the engine.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>

#include "algorithms/schedule.hpp"
#include "comm/agreement.hpp"
#include "comm/engine.hpp"
#include "comm/hierarchical.hpp"
#include "comm/topology.hpp"
#include "shoal/communicator.hpp"
#include "tune/dispatcher.hpp"

namespace shoal::detail {

class CommImpl {
 public:
  CommImpl(std::shared_ptr<Store> store, int rank, int size, const Options& options);

  /// Validates the call (InvalidArgumentError before anything is sent) and queues it.
  /// `forced`: the row the caller asked for (CallOptions), past SHOAL_ALGO and the dispatcher.
  Work submit(algorithms::Collective collective, const void* input, void* output, uint64_t count,
              DataType dtype, ReduceOp op, int root, int peer = -1, int tag = 0,
              bool blocking = false, const algorithms::AlgorithmInfo* forced = nullptr);
  /// A vectored call (Communicator's Segment forms): `count` as in submit(); the pieces' totals
  /// are checked against it.
  Work submit_vectored(algorithms::Collective collective, std::vector<comm::Piece> input,
                       std::vector<comm::Piece> output, uint64_t count, DataType dtype, ReduceOp op,
                       bool in_place, const algorithms::AlgorithmInfo* forced);
  /// The row `call` names for `collective` (null when it names none); InvalidArgumentError
  /// for a name the registry does not have for that collective.
  const algorithms::AlgorithmInfo* forced_algorithm(algorithms::Collective collective,
                                                    const CallOptions* call) const;

  /// What the dispatcher's choice depends on (equal on all ranks): world, ranks per host, shm
  /// when every rank shares one host's memory, else tcp, and the cores the hosts give their ranks.
  tune::Context tune_context() const {
    return tune::make_context(topology.host_of,
                              engine->shm() != nullptr && engine->shm()->all_ranks_share_memory(),
                              topology.cores_of_host);
  }

  /// Flat collectives issued so far (comm/flat.hpp), direct ones included.
  uint32_t flat_calls() const { return flat_seq_; }
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
  int max_rails = 1;  // most TCP connections to one peer (one per shared NIC)
  comm::Topology topology;
  std::string listen_address;
  std::chrono::milliseconds timeout{0};
  uint64_t chunk_bytes = 0;
  uint64_t comm_id = 0;
  uint64_t shrinks = 0;  // Communicator::shrink calls so far (each gets its own key scope)
  std::shared_ptr<Store> store;
  /// The store given to create() (or join()), kept by every communicator made from this one by
  /// shrink, grow and split: grow() and join() meet there, so a joiner needs only the job's store.
  std::shared_ptr<Store> job_store;
  std::unique_ptr<comm::Engine> engine;

  /// The dispatcher, made at the first call that needs it: reads and checks SHOAL_DISPATCH and
  /// SHOAL_TUNE_FILE; every input is equal on all ranks, and so is every pick.
  const tune::Dispatcher& dispatcher() {
    if (!dispatcher_)
      dispatcher_.emplace(tune::Dispatcher::from_environment(
          tune_context(), calibrated_params ? &*calibrated_params : nullptr));
    return *dispatcher_;
  }

  // ---- split and hierarchical collectives (comm/split.cpp, comm/hierarchical.cpp) ----
  /// The child of Communicator::split (collective); empty for a negative color.
  Communicator split(int color, int key);
  /// Runs the call hierarchically when SHOAL_HIERARCHICAL and the layout say so, else nullopt
  /// (also for invalid arguments, which submit() then reports).
  std::optional<Work> try_hierarchical(const comm::HierCall& call, bool blocking);
  /// Keeps issue order: waits for hierarchical work issued before (one load when there is none).
  void fence_hierarchical() {
    if (hierarchy && hierarchy->pending()) hierarchy->drain();
  }
  int splits = 0;  // split() calls so far, equal on all ranks: scopes the children's keys
  std::optional<comm::HierarchyMode> hierarchy_mode;  // read at the first eligible call
  tune::Dispatcher::SizeRange hierarchy_sizes;
  /// SHOAL_HIERARCHICAL=auto's verdict for `collective` at `bytes`: the dispatcher's
  /// (auto_hierarchy), computed once per collective and size — a training loop repeats its
  /// sizes, and the verdict is a pure function of them for this communicator.
  bool hierarchy_wanted(algorithms::Collective collective, uint64_t bytes);
  struct HierarchyVerdict {
    uint64_t bytes = UINT64_MAX;  // none yet
    bool take = false;
  };
  std::array<HierarchyVerdict, 3> hierarchy_verdicts;  // all_reduce, all_gather, reduce_scatter
  std::unique_ptr<comm::Hierarchy> hierarchy;          // after engine: stopped before the engine is

  /// The cost model's constants measured when this communicator was made (comm/calibration.cpp;
  /// none with SHOAL_TUNE_CALIBRATE=off, SHOAL_DISPATCH=off or one rank). Equal on all ranks.
  std::optional<algorithms::CostParams> calibrated_params;

 private:
  /// What set_up() builds and the engine then owns.
  struct Transport {
    std::vector<std::unique_ptr<transport::Stream>> streams;  // per rank (none for this one)
    std::unique_ptr<transport::shm::ShmMesh> shm;
  };
  /// Rendezvous, topology, connections and shared memory of a new communicator, before the
  /// ranks vote on it (comm/agreement.hpp).
  Transport set_up(const std::string& prefix, comm::Clock::time_point deadline);
  /// Compares the settings every rank must hold equal (config::Agreement) with one forced Bruck
  /// all_gather (collective); the first difference, or nullopt.
  std::optional<comm::Disagreement> compare_agreed_settings();
  /// Whether to calibrate (SHOAL_TUNE_CALIBRATE, checked before the creation vote).
  bool calibration_wanted() const;
  /// Sets calibrated_params: a few forced ring calls timed on every rank (collective).
  void calibrate_cost_model();

  /// The dispatcher's row for `a` (null: the first row). A flat call (no schedule to pick, the
  /// latency path) only gets the dispatcher made.
  /// The arguments of a call, checked (InvalidArgumentError); buffers and in_place not set.
  algorithms::CollectiveArgs checked_args(algorithms::Collective collective, uint64_t count,
                                          DataType dtype, ReduceOp op, int root, int peer,
                                          int tag) const;
  const algorithms::AlgorithmInfo* dispatch(const algorithms::CollectiveArgs& a, bool flat) {
    const tune::Dispatcher& d = dispatcher();
    if (flat) return nullptr;
    return d.choose(a.collective, algorithms::model_bytes(a)).algorithm;
  }
  std::optional<tune::Dispatcher> dispatcher_;

  /// Small collectives among ranks that all share memory: shared slots, no schedule
  /// (comm/flat.hpp).
  bool flat_eligible(const algorithms::CollectiveArgs& a) const;
  Work run_flat_here(const comm::OpRequest& request);
  uint64_t flat_max_bytes_ = 0;
  uint64_t flat_direct_bytes_ = UINT64_MAX;  // ShmMesh::flat_direct_bytes()
  uint32_t flat_seq_ = 0;
  uint64_t unchecked_ = 0;  // CollectiveArgs::unchecked of the next call
};

}  // namespace shoal::detail
