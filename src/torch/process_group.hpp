// ProcessGroupShoal: a c10d backend over shoal::Communicator.
//
// Every call stages its tensors into contiguous buffers of a dtype shoal handles and issues the
// shoal operation(s) asynchronously under one mutex (so the issue order is shoal's). When the
// last of them completes (shoal::Work::on_complete, on shoal's progress thread), the call is
// handed to the process's completion threads, which copy results back into non-contiguous or
// converted tensors and complete the Work and its Future with the output tensors, in the order
// the calls finish.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "shoal/communicator.hpp"

namespace shoal::torch_glue {

// torch 2.x: a ProcessGroup dispatches each device's calls to a c10d::Backend; this is the CPU's.
using BackendBase = ::c10d::Backend;

struct Spec;  // how a tensor travels through shoal (process_group.cpp)

/// A group's options: torch's (the timeout) and shoal's per-group choices. `pg_options` of
/// init_process_group, new_group and split_group (Python: shoal.torch.Options); a split or
/// shrunk group inherits its parent's unless given its own.
struct ShoalOptions : c10d::Backend::Options {
  explicit ShoalOptions(std::chrono::milliseconds timeout = ::kBackendDefaultTimeout)
      : Options("shoal", timeout) {}
  /// Registry rows (`shoal-info --algorithms`) that run every call of that collective in this
  /// group, as CallOptions::algorithm; empty: shoal's usual choice.
  std::string all_reduce_algorithm, all_gather_algorithm, reduce_scatter_algorithm;
  c10::intrusive_ptr<c10d::Backend::Options> clone() const override { return clone_shoal(); }
  c10::intrusive_ptr<ShoalOptions> clone_shoal() const {
    return c10::make_intrusive<ShoalOptions>(*this);
  }
  /// `opts` as shoal's: a copy of it when it is one, else `inherited`'s with opts' timeout.
  static c10::intrusive_ptr<ShoalOptions> from(
      const c10::intrusive_ptr<c10d::Backend::Options>& opts, const ShoalOptions& inherited);
};

/// The Work of one torch call: completed by a completion thread once its operations finish.
class WorkShoal : public c10d::Work {
 public:
  WorkShoal(int rank, c10d::OpType type, const char* title, std::vector<at::Tensor> inputs,
            std::vector<at::Tensor> outputs);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override {}
  /// Waits for completion (at most `timeout` unless it is zero) and rethrows a failure.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  void complete(std::exception_ptr error);
  /// Set by the group before the Work is returned: a wait() without a timeout calls it, which
  /// waits for the call's shoal operations on the caller's thread and completes the call there
  /// (a blocking call's path has no hand-off to a completion thread).
  void set_helper(std::function<void()> help) { help_ = std::move(help); }
  void set_source_rank(int r) { source_rank_ = r; }
  const char* name() const { return name_; }

 private:
  const char* name_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  int source_rank_ = -1;
  std::function<void()> help_;
};

class ProcessGroupShoal : public BackendBase {
 public:
  ProcessGroupShoal(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                    c10::intrusive_ptr<ShoalOptions> options);
  /// A group around a communicator made elsewhere (shrink, grow, join): rank and size are the
  /// communicator's. `store` is the group's own store (receives from any source count sends in
  /// it), `root` the job's store under every prefix, where grow() and join() meet.
  ProcessGroupShoal(const c10::intrusive_ptr<c10d::Store>& store,
                    const c10::intrusive_ptr<c10d::Store>& root,
                    c10::intrusive_ptr<ShoalOptions> options, shoal::Communicator&& comm);
  ~ProcessGroupShoal() override;

  /// The creator torch.distributed calls: (store, rank, size, timeout) and the user's
  /// pg_options (null, torch's Options or ShoalOptions).
  static c10::intrusive_ptr<BackendBase> create(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
      std::chrono::milliseconds timeout, const c10::intrusive_ptr<c10d::Backend::Options>& options);
  c10::intrusive_ptr<Options> getBackendOptions() override { return options_; }

  // ---- elastic jobs (docs/torch.md): each returns a new group; this one stays as it is ----
  /// After a failure: the surviving ranks of this group form a new one, ranked in their old
  /// order (shoal::Communicator::shrink). Every survivor calls it; works on a broken group and
  /// does not wait for this group's queued or failed operations.
  c10::intrusive_ptr<ProcessGroupShoal> shrink();
  /// A larger group: this group's ranks keep their numbers and `joining` new processes, which
  /// call join(store, name) with the job's store and the same name, follow in order of arrival.
  /// Every rank of this group calls it; `name` must be new to the store.
  c10::intrusive_ptr<ProcessGroupShoal> grow(int joining, const std::string& name);
  /// The new process's side of grow(): `store` is the job's store (any prefix of it that
  /// torch added is ignored: the bottom store is used), `name` the one grow() was given.
  static c10::intrusive_ptr<ProcessGroupShoal> join(const c10::intrusive_ptr<c10d::Store>& store,
                                                    const std::string& name,
                                                    std::chrono::milliseconds timeout);

  const std::string getBackendName() const override { return "shoal"; }
  std::string describe() const;
  /// Communicator::measure_links (collective over the group, between its calls) and the ring
  /// order the link_ring rows follow.
  std::vector<double> measure_links();
  std::vector<int> ring_order();

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = {}) override;
  /// Blocks until every rank arrived, through the group's store (not the mesh, so that it names
  /// the ranks that are stuck or dead): rank 0 raises naming the first rank that did not arrive
  /// within the timeout, or all of them with `wait_all_ranks`; the others raise naming rank 0.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks = false) override;

  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return sequence_; }

  /// new_group/split_group without a new rendezvous: Communicator::split over this group (every
  /// rank of it calls split; `ranks` are this group's ranks of the new group, in their new
  /// order). A rank not in `ranks` gets nullptr, as torch expects.
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<BackendBase> split(const c10::intrusive_ptr<c10d::Store>& store,
                                        const std::vector<int>& ranks,
                                        const c10::intrusive_ptr<Options>& opts) override;
  /// torch's shrink_group: the ranks not in `ranks_to_exclude` call it and form a new group
  /// (Communicator::shrink with the exclusion list); SHRINK_ABORT aborts this group first.
  bool supportsShrinking() const override { return true; }
  c10::intrusive_ptr<BackendBase> shrink(
      const std::vector<int64_t>& ranks_to_exclude, int shrink_flags = 0,
      const c10::intrusive_ptr<Options>& opts = nullptr) override;
  /// batch_isend_irecv and _coalescing_manager: the calls between the two are issued as usual
  /// (each already in flight at once) and endCoalescing's Work completes after all of them,
  /// failing with the first failure among them.
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  /// Pending work fails at once with AbortedError here and on every rank shoal reaches
  /// (Communicator::abort); the group releases everything and later calls raise.
  void abort() override;
  /// As abort(): work still pending fails at once (AbortedError); everything is released.
  void shutdown() override;

  /// One torch call in flight: the shoal operations it issued, the torch Works it completes
  /// after, and what to do once they finish.
  struct Op {
    c10::intrusive_ptr<WorkShoal> work;
    std::vector<shoal::Work> pending;
    std::vector<c10::intrusive_ptr<WorkShoal>> after;  // a batch's members (endCoalescing)
    std::vector<std::function<void()>> finish;         // copy-backs, run after success in order
    std::vector<at::Tensor> keep;                      // staging buffers the shoal operations use
    std::exception_ptr issue_error;                    // the issue failed part-way
  };
  /// Operations not yet completed: a group's (close() waits for them) or every group's.
  struct Outstanding {
    void add();
    void done();
    /// At most `timeout`; true once none is left.
    bool wait_for(std::chrono::milliseconds timeout);
    int count();

   private:
    std::mutex mutex_;
    std::condition_variable cv_;
    int count_ = 0;
  };

  /// Waits (at most `timeout`) until every group's operations have completed, callbacks
  /// included: registered with atexit, so that none touches Python objects (a callback, a
  /// tensor) while the interpreter finalizes. Call without the GIL.
  static void quiesce(std::chrono::milliseconds timeout);

 private:
  /// Issues one torch call (`issue(op)` under issue_mutex_) and arms its completion.
  template <class F>
  c10::intrusive_ptr<c10d::Work> run(c10d::OpType type, const char* title,
                                     std::vector<at::Tensor> inputs,
                                     std::vector<at::Tensor> outputs, F&& issue);
  /// all_reduce of a sparse COO tensor (SUM), in place, as gloo does it.
  c10::intrusive_ptr<c10d::Work> allreduce_sparse_coo(at::Tensor& t,
                                                      const c10d::AllreduceOptions& opts);
  // One all_gather (reduce_scatter) of a pair of tensors, staged, into `op`.
  void issue_all_gather(Op& op, const at::Tensor& input, const at::Tensor& output);
  void issue_reduce_scatter(Op& op, const at::Tensor& input, const at::Tensor& output,
                            const Spec& s);

  void start();  // the constructors' common part
  /// shutdown(), abort() and the destructor: pending work fails at once; releases everything.
  void close();
  /// The communicator, with issue_mutex_ held; raises once the group is closed.
  shoal::Communicator& open_comm(const char* what);

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Store> root_;  // the job's store below every PrefixStore
  c10::intrusive_ptr<ShoalOptions> options_;
  std::chrono::milliseconds timeout_;
  shoal::CallOptions all_reduce_call_, all_gather_call_, reduce_scatter_call_;
  int shrinks_ = 0;  // shrink() calls on this group: names the new groups' stores
  std::optional<shoal::Communicator> comm_;

  std::mutex issue_mutex_;  // torch's issue order == shoal's
  bool closed_ = false;     // shutdown/abort began: no new operation
  std::mutex close_mutex_;  // one close at a time
  // Between startCoalescing and endCoalescing: the Works issued meanwhile.
  std::optional<std::vector<c10::intrusive_ptr<WorkShoal>>> coalescing_;
  uint64_t sequence_ = 0;
  uint64_t monitored_barriers_ = 0;  // names each monitored barrier's keys in the store

  std::shared_ptr<Outstanding> outstanding_ = std::make_shared<Outstanding>();
};

}  // namespace shoal::torch_glue
