// The shared state behind a Work handle: completion flag, error, and a condition to wait on.
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <vector>

#include "shoal/work.hpp"

namespace shoal::detail {

struct WorkState {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;                  // guarded by mutex
  std::atomic<bool> finished{false};  // the same, readable without the lock (for polling)
  std::exception_ptr error;
  std::atomic<int> source{-1};  // a receive's sender (set before completion)
  std::vector<std::function<void(std::exception_ptr)>> callbacks;  // guarded by mutex, until done

  void complete(std::exception_ptr e = nullptr) {
    std::vector<std::function<void(std::exception_ptr)>> run;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (done) return;
      done = true;
      error = std::move(e);
      finished.store(true, std::memory_order_release);
      run.swap(callbacks);
    }
    cv.notify_all();
    for (auto& fn : run) call(fn);
  }
  void call(const std::function<void(std::exception_ptr)>& fn) const {
    try {
      fn(error);  // `error` never changes once done
    } catch (...) {
    }
  }
};

}  // namespace shoal::detail
