// Virtual-time execution of the schedules of all ranks of one collective call on a
// ClusterModel (docs/scale.md). compile() builds every rank's schedule (src/algorithms, the
// same builders the engine runs) and keeps only what timing needs; simulate() plays them as
// a discrete-event simulation:
//  - a step becomes ready when its dependencies are done;
//  - reduce/copy/finalize run on the rank's core, one at a time, bytes x per-byte cost;
//  - the sends of a rank to one peer leave in order, one at a time (one stream per pair); a
//    send starts when it is ready and the previous one on its pair is done, and, above
//    eager_bytes, when the matching receive is posted (the engine stops reading a large
//    frame with no receive posted); a receive is done when its bytes arrived and it is posted;
//  - a transfer is a flow over the sender's NIC (out), the receiver's NIC (in) and, with a
//    fat tree, the leaves' core links — or, between ranks of one host, over the host's memory
//    bus. Flows overlapping on a resource share it: each flow runs at the least, over its
//    resources, of capacity / number of flows there (equal share at the bottleneck,
//    recomputed at every start and end of a flow; not work-conserving max-min). The last
//    byte arrives a latency after it left.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "algorithms/registry.hpp"
#include "sim/model.hpp"

namespace shoal::sim {

/// The steps of all ranks of one call, reduced to what timing needs.
struct Programs {
  struct Channel {
    int src = 0, dst = 0;
    std::vector<uint32_t> sends, recvs;  // global step ids, in step order
  };
  // One record per step, all a step's fields on one cache line: at thousands of ranks the
  // simulation is bound by memory latency, every event touching another rank's steps.
  struct Rec {
    uint64_t bytes = 0;      // bytes moved, reduced, copied
    uint32_t chan = 0;       // send/recv: index into channels
    uint32_t ndeps = 0;      // dependencies of the step
    uint32_t out_first = 0;  // dependents of step i: out[rec[i].out_first .. rec[i+1].out_first)
    uint32_t rank_kind = 0;  // rank << 8 | algorithms::StepKind
    int rank() const { return static_cast<int>(rank_kind >> 8); }
    algorithms::StepKind kind() const {
      return static_cast<algorithms::StepKind>(rank_kind & 0xff);
    }
  };
  int p = 0;
  std::vector<uint32_t> first;  // rank r's steps are [first[r], first[r+1])
  std::vector<Rec> rec;         // one more than steps(): the end of the last step's dependents
  std::vector<uint32_t> out;
  std::vector<Channel> channels;
  std::string error;         // sends and receives of a pair that do not match
  double build_seconds = 0;  // wall time of the schedule builders

  size_t steps() const { return rec.empty() ? 0 : rec.size() - 1; }
};

/// The arguments of a call of `collective` on `p` ranks whose nccl-tests size is `size_bytes`
/// (the all_reduce/broadcast/reduce vector, the all_gather output, the reduce_scatter input).
algorithms::CollectiveArgs args_for(algorithms::Collective collective, uint64_t size_bytes, int p,
                                    DataType dtype = DataType::float32);

/// Appends one rank's schedule for the call (args.rank) to the schedule.
using Builder = std::function<void(algorithms::Schedule&, const algorithms::CollectiveArgs&)>;

/// Builds the schedule of every rank with `build` (called from `threads` threads at once; 0:
/// the hardware's cores).
Programs compile(const algorithms::CollectiveArgs& proto, const Builder& build, int threads = 0);
/// compile() with a registry row's builder (nullptr: algorithms::build_schedule's choice).
Programs compile(const algorithms::CollectiveArgs& proto, const algorithms::AlgorithmInfo* row,
                 int threads = 0);

struct SimResult {
  double time = 0;  // virtual seconds until the last rank finished
  uint64_t messages = 0, bytes_sent = 0, bytes_received = 0, reduce_bytes = 0, copy_bytes = 0;
  uint64_t events = 0;
  double run_seconds = 0;  // wall time of the simulation
  std::string error;       // a deadlock (steps that never ran) or compile()'s error
};

/// With token buckets (ClusterModel::nic_burst_bytes), the call is one of many back to back
/// (a benchmark's loop, a training step's): the buckets start at the steady level, the one a
/// call leaves as it found it (full when the call leaves the links idle long enough to refill
/// them, empty when it moves more than they refill; else found by bisection, all buckets at
/// one level, judged by the most drained one).
SimResult simulate(const Programs& prog, const ClusterModel& model);

/// The nccl-tests bus bandwidth factor of a collective on p ranks.
double bus_factor(algorithms::Collective c, int p);

}  // namespace shoal::sim
