#include <sched.h>

#include "comm/spin.hpp"
#include "comm/work_state.hpp"
#include "core/check.hpp"

namespace shoal {

static detail::WorkState& state_of(const std::shared_ptr<detail::WorkState>& s) {
  SHOAL_CHECK(s != nullptr, InvalidArgument, "this Work handle is empty (default-constructed)");
  return *s;
}

// Short operations finish within microseconds: poll for a while, giving the core to the
// progress thread, before paying for a sleep and a wake-up.
static void poll_briefly(detail::WorkState& s) {
  if (s.finished.load(std::memory_order_acquire)) return;
  const auto budget = comm::spin_budget();
  if (budget.count() <= 0) return;
  const auto until = std::chrono::steady_clock::now() + budget;
  do {
    sched_yield();
    if (s.finished.load(std::memory_order_acquire)) return;
  } while (std::chrono::steady_clock::now() < until);
}

void Work::wait() const {
  auto& s = state_of(state_);
  // `error` is set before `finished` (release) and never changes after.
  if (s.finished.load(std::memory_order_acquire)) {
    if (s.error) std::rethrow_exception(s.error);
    return;
  }
  poll_briefly(s);
  std::unique_lock<std::mutex> lock(s.mutex);
  s.cv.wait(lock, [&] { return s.done; });
  if (s.error) std::rethrow_exception(s.error);
}

bool Work::wait(std::chrono::milliseconds timeout) const {
  auto& s = state_of(state_);
  std::unique_lock<std::mutex> lock(s.mutex);
  if (!s.cv.wait_for(lock, timeout, [&] { return s.done; })) return false;
  if (s.error) std::rethrow_exception(s.error);
  return true;
}

int Work::source() const { return state_of(state_).source.load(std::memory_order_acquire); }

bool Work::test() const {
  auto& s = state_of(state_);
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.done;
}

std::exception_ptr Work::error() const {
  auto& s = state_of(state_);
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.error;
}

void Work::on_complete(std::function<void(std::exception_ptr)> fn) const {
  auto& s = state_of(state_);
  SHOAL_CHECK(fn != nullptr, InvalidArgument, "Work::on_complete: empty callback");
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.done) {
      s.callbacks.push_back(std::move(fn));
      return;
    }
  }
  s.call(fn);
}

}  // namespace shoal
