// What a Communicator holds: its place in the job, the store, the topology, the engine.
#pragma once

#include <memory>
#include <string>

#include "algorithms/schedule.hpp"
#include "comm/engine.hpp"
#include "comm/topology.hpp"
#include "shoal/communicator.hpp"

namespace shoal::detail {

class CommImpl {
 public:
  CommImpl(std::shared_ptr<Store> store, int rank, int size, const Options& options);

  /// Validates the call (InvalidArgumentError before anything is sent) and queues it.
  Work submit(algorithms::Collective collective, const void* input, void* output, uint64_t count,
              DataType dtype, ReduceOp op, int root, int peer = -1, int tag = 0, bool blocking = false);

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
  std::shared_ptr<Store> store;
  std::unique_ptr<comm::Engine> engine;

 private:
  /// Small all_reduce among ranks that all share memory: run here, on the caller's thread.
  bool flat_eligible(const algorithms::CollectiveArgs& a) const;
  Work run_flat_here(const comm::OpRequest& request);
  uint64_t flat_max_bytes_ = 0;
  uint32_t flat_seq_ = 0;
};

}  // namespace shoal::detail
