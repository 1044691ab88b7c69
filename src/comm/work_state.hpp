// The shared state behind a Work handle: completion flag, error, and a condition to wait on.
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>

#include "shoal/work.hpp"

namespace shoal::detail {

struct WorkState {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;  // guarded by mutex
  std::atomic<bool> finished{false};  // the same, readable without the lock (for polling)
  std::exception_ptr error;

  void complete(std::exception_ptr e = nullptr) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (done) return;
      done = true;
      error = std::move(e);
      finished.store(true, std::memory_order_release);
    }
    cv.notify_all();
  }
};

}  // namespace shoal::detail
