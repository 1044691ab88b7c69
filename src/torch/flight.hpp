// A torch call in flight (internal to the backend): ProcessGroupShoal::run issues it and arms its
// completion; flight.cpp completes it on the process's completion threads or the waiting one.
#pragma once

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "process_group.hpp"

namespace shoal::torch_glue {

// Operations of every group not yet completed, for quiesce().
ProcessGroupShoal::Outstanding& everyone();

// A torch call between its issue and its completion. `remaining` counts what it waits for, plus
// one that run() holds while arming, so that parts already complete do not finish it early.
struct Flight : std::enable_shared_from_this<Flight> {
  ProcessGroupShoal::Op op;
  std::shared_ptr<ProcessGroupShoal::Outstanding> group;
  std::atomic<int> remaining{1};
  std::atomic<bool> waiter{false};   // a wait() completes the call on its own thread
  std::atomic<bool> claimed{false};  // complete() began
  std::mutex mutex;
  std::exception_ptr error;  // the first failure among the parts, guarded by mutex

  void part_done(std::exception_ptr e);  // may run on shoal's progress thread: never blocks
  void complete_once();                  // on a completion thread or the waiting thread
  void help();                           // the waiting thread's side

 private:
  void complete();
};

template <class F>
c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::run(c10d::OpType type, const char* title,
                                                      std::vector<at::Tensor> inputs,
                                                      std::vector<at::Tensor> outputs, F&& issue) {
  auto work =
      c10::make_intrusive<WorkShoal>(getRank(), type, title, std::move(inputs), std::move(outputs));
  auto flight = std::make_shared<Flight>();
  Op& op = flight->op;
  op.work = work;
  std::lock_guard<std::mutex> lock(issue_mutex_);
  open_comm(title);
  ++sequence_;
  std::exception_ptr failed;
  try {
    issue(op);
  } catch (...) {
    if (op.pending.empty()) throw;  // nothing in flight
    // Part of it is in flight: the Work completes (failed) once that part has, so that its
    // buffers outlive it.
    op.issue_error = failed = std::current_exception();
  }
  flight->group = outstanding_;
  outstanding_->add();
  everyone().add();
  flight->remaining.fetch_add(static_cast<int>(op.pending.size() + op.after.size()));
  for (const auto& w : op.pending)
    w.on_complete([flight](std::exception_ptr e) { flight->part_done(std::move(e)); });
  for (const auto& w : op.after)
    w->getFuture()->addCallback([flight](c10::ivalue::Future& f) {
      flight->part_done(f.hasError() ? f.exception_ptr() : nullptr);
    });
  work->set_helper([weak = std::weak_ptr<Flight>(flight)] {
    if (auto f = weak.lock()) f->help();  // else: completed already
  });
  flight->part_done(nullptr);  // run()'s own share
  if (coalescing_) coalescing_->push_back(work);
  if (failed) std::rethrow_exception(failed);
  return work;
}

}  // namespace shoal::torch_glue
