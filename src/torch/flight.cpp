// See flight.hpp.
#include "flight.hpp"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

namespace shoal::torch_glue {

ProcessGroupShoal::Outstanding& everyone() {
  static auto* all = new ProcessGroupShoal::Outstanding;  // never destroyed: completions may
  return *all;                                            // outlive main()
}

namespace {

// The process's completion threads. A completion runs the copy-backs and the torch Work's
// future callbacks, which are Python (DDP's hooks) and may wait for a collective they issue
// (PowerSGD's): so neither runs on shoal's progress thread, and a call that is ready while
// every thread is inside a completion gets a thread of its own. A thread left idle for a while
// leaves, unless it is the last one.
class Completer {
 public:
  static Completer& get() {
    static auto* c = new Completer;  // never destroyed: its threads are detached
    return *c;
  }
  void post(std::shared_ptr<Flight> f) {
    std::lock_guard<std::mutex> lock(mutex_);
    ready_.push_back(std::move(f));
    if (ready_.size() > static_cast<size_t>(idle_)) {
      ++threads_;
      std::thread([this] { serve(); }).detach();
    }
    cv_.notify_one();
  }

 private:
  static constexpr auto kLinger = std::chrono::seconds(2);
  void serve() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      ++idle_;
      const auto ready = [&] { return !ready_.empty(); };
      bool work = true;
      if (threads_ > 1)
        work = cv_.wait_for(lock, kLinger, ready);
      else
        cv_.wait(lock, ready);  // the last thread: no timer on an idle process
      --idle_;
      if (!work) break;
      auto f = std::move(ready_.front());
      ready_.pop_front();
      lock.unlock();
      f->complete_once();
      f.reset();  // the tensors go while no lock is held
      lock.lock();
    }
    --threads_;
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Flight>> ready_;
  int idle_ = 0;     // threads waiting for a ready call
  int threads_ = 0;  // threads alive
};

}  // namespace

void Flight::part_done(std::exception_ptr e) {
  if (e) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!error) error = std::move(e);
  }
  // seq_cst with help()'s store to `waiter`: either this sees the waiter, or the waiter sees
  // `remaining` at zero and the claim decides who completes.
  if (remaining.fetch_sub(1) == 1 && !waiter.load()) Completer::get().post(shared_from_this());
}

void Flight::help() {
  if (waiter.exchange(true)) return;  // another thread helps: the caller waits for it
  // op.pending and op.after do not change once armed (complete() leaves them to the Flight).
  for (const auto& w : op.pending) {
    try {
      w.wait();  // shoal's wait: a short poll that yields the core, then a sleep
    } catch (...) {
      // reported to part_done with the error
    }
  }
  for (const auto& m : op.after) {
    try {
      m->wait();
    } catch (...) {
    }
  }
  // The operations are done; their on_complete callbacks (a few instructions on the progress
  // thread, which has the core once this thread yields) may still be counting down.
  while (remaining.load() != 0) sched_yield();
  complete_once();
}

void Flight::complete_once() {
  if (!claimed.exchange(true)) complete();
}

void Flight::complete() {
  std::exception_ptr failed = op.issue_error ? op.issue_error : error;
  if (!failed) {
    try {
      for (auto& f : op.finish) f();
    } catch (...) {
      failed = std::current_exception();
    }
  }
  op.work->complete(failed);
  // The tensors go before the call counts as done; pending and after stay (a waiter reads them).
  op.work.reset();
  op.finish.clear();
  op.keep.clear();
  group->done();
  everyone().done();
}

void ProcessGroupShoal::Outstanding::add() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++count_;
}

void ProcessGroupShoal::Outstanding::done() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (--count_ == 0) cv_.notify_all();
}

bool ProcessGroupShoal::Outstanding::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  return cv_.wait_for(lock, timeout, [&] { return count_ == 0; });
}

int ProcessGroupShoal::Outstanding::count() {
  std::lock_guard<std::mutex> lock(mutex_);
  return count_;
}

void ProcessGroupShoal::quiesce(std::chrono::milliseconds timeout) { everyone().wait_for(timeout); }

}  // namespace shoal::torch_glue
