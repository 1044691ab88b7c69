// The shared state behind a Work handle: completion flag, error, and a condition to wait on.
#pragma once

#include <condition_variable>
#include <exception>
#include <mutex>

#include "shoal/work.hpp"

namespace shoal::detail {

struct WorkState {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;

  void complete(std::exception_ptr e = nullptr) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (done) return;
      done = true;
      error = std::move(e);
    }
    cv.notify_all();
  }
};

}  // namespace shoal::detail
