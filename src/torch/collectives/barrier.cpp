// barrier and monitored_barrier of ProcessGroupShoal.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "../flight.hpp"
#include "../process_group.hpp"
#include "shoal/error.hpp"

namespace shoal::torch_glue {

using c10d::OpType;
using Op = ProcessGroupShoal::Op;

void ProcessGroupShoal::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  // The messages say what gloo's say (torch's tests and users' scripts match on them).
  const auto timeout = opts.timeout == c10d::kUnsetTimeout ? timeout_ : opts.timeout;
  const std::string base = "shoal_monitored_barrier/" + std::to_string(monitored_barriers_++) + "/";
  const int me = getRank(), p = getSize();
  const std::string ms = std::to_string(timeout.count()) + " ms";
  if (me != 0) {
    store_->set(base + std::to_string(me), std::vector<uint8_t>{1});
    try {
      store_->wait({base + "done"}, timeout);
    } catch (const std::exception& e) {
      throw shoal::TimeoutError("shoal (torch backend): Rank " + std::to_string(me) +
                                " successfully reached monitoredBarrier, but received errors while "
                                "waiting for send/recv from rank 0: it did not release the barrier "
                                "within " +
                                ms +
                                " (rank 0 is stuck or dead, or it found ranks "
                                "that did not arrive and raised: see its error)");
    }
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<int> missing, arrived_ranks;
  for (int r = 1; r < p; ++r) {
    // As gloo: without wait_all_ranks the ranks share the timeout, with it each has all of it.
    const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    const auto left = wait_all_ranks ? timeout : timeout - elapsed;
    if (!wait_all_ranks && left.count() <= 0) {
      std::string done;
      for (int q : arrived_ranks) done += (done.empty() ? "" : ", ") + std::to_string(q);
      throw shoal::TimeoutError(
          "shoal (torch backend): Rank 0 timed out in monitoredBarrier after " + ms +
          " (ranks that arrived: " + (done.empty() ? "none" : done) + ")");
    }
    const std::string key = base + std::to_string(r);
    bool arrived;
    try {
      if (left.count() > 0) store_->wait({key}, left);  // 0 would mean "no timeout"
      arrived = store_->check({key});
    } catch (const std::exception&) {
      arrived = false;
    }
    if (arrived) {
      arrived_ranks.push_back(r);
    } else {
      missing.push_back(r);
      if (!wait_all_ranks) break;
    }
  }
  if (!missing.empty()) {
    std::string names;
    for (int r : missing) names += (names.empty() ? "" : ", ") + std::to_string(r);
    throw shoal::TimeoutError("shoal (torch backend): [Rank 0]: Rank" +
                              std::string(missing.size() > 1 ? "s " : " ") + names +
                              " failed to pass monitoredBarrier in " + ms);
  }
  store_->set(base + "done", std::vector<uint8_t>{1});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::barrier(const c10d::BarrierOptions&) {
  return run(OpType::BARRIER, "shoal:barrier", {}, {},
             [&](Op& op) { op.pending.push_back(comm_->barrier_async()); });
}

}  // namespace shoal::torch_glue
