#include "comm/work_state.hpp"
#include "core/check.hpp"

namespace shoal {

static detail::WorkState& state_of(const std::shared_ptr<detail::WorkState>& s) {
  SHOAL_CHECK(s != nullptr, InvalidArgument, "this Work handle is empty (default-constructed)");
  return *s;
}

void Work::wait() const {
  auto& s = state_of(state_);
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

}  // namespace shoal
