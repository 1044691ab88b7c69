// Hierarchical all_reduce, all_gather and reduce_scatter across hosts (PCCL's hierarchy): an
// intra-host phase on the sub-communicator of this host's ranks (shared memory) and an
// inter-host phase on the rank-aligned sub-communicator (local rank i of every host), all of
// whose groups run at once so that every host's NICs carry traffic. docs/algorithms.md.
//
// The sub-communicators are made once, at the first hierarchical call (a collective split of
// the parent, on the caller's thread). Asynchronous calls run on one helper thread, in issue
// order; calls on the parent wait for pending hierarchical work first (fence()).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "algorithms/schedule.hpp"
#include "comm/request.hpp"
#include "comm/topology.hpp"
#include "comm/work_state.hpp"
#include "shoal/communicator.hpp"

namespace shoal::detail {
class CommImpl;
}

namespace shoal::comm {

/// True when the layout allows the hierarchy: several hosts, several ranks on each, the same
/// number on every host (uneven layouts run the flat algorithms).
bool hierarchy_fits(const Topology& topology);

class Hierarchy {
 public:
  explicit Hierarchy(shoal::detail::CommImpl& parent);
  /// Finishes queued operations, stops the helper thread, then closes the sub-communicators.
  ~Hierarchy();
  Hierarchy(const Hierarchy&) = delete;
  Hierarchy& operator=(const Hierarchy&) = delete;

  /// Runs `call` (on this thread when it blocks and nothing is queued, else on the helper
  /// thread); creates the sub-communicators at the first call.
  Work run(const Request& call);
  /// True while an operation issued here has not completed. Cheap.
  bool pending() const { return pending_.load(std::memory_order_acquire) > 0; }
  /// Waits until no operation issued here is pending.
  void drain();
  /// Hierarchical operations run so far (tests check that the path was taken).
  uint64_t calls() const { return calls_.load(std::memory_order_relaxed); }

 private:
  struct Item {
    Request call;
    std::shared_ptr<shoal::detail::WorkState> state;
  };
  void ensure_groups();
  void wait_parent_idle() const;
  void execute(const Request& call);
  void all_reduce(const Request& c);
  void all_gather(const Request& c);
  void reduce_scatter(const Request& c);
  void worker();
  /// Global rank of local rank `l` of host `h`.
  int global(int h, int l) const { return ranks_of_host_[h][l]; }

  shoal::detail::CommImpl& parent_;
  int host_ = 0, local_rank_ = 0, hosts_ = 1, per_host_ = 1;
  std::vector<std::vector<int>> ranks_of_host_;
  Communicator local_, aligned_;  // made by ensure_groups()
  std::vector<uint8_t> scratch_;  // reduce_scatter's receive and accumulation space, kept

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> queue_;  // guarded by mutex_
  bool stopping_ = false;   // guarded by mutex_
  std::thread thread_;      // started at the first asynchronous call
  std::atomic<int> pending_{0};
  std::atomic<uint64_t> calls_{0};
};

}  // namespace shoal::comm
