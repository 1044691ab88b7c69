#include "staging/copy_engine.hpp"

#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/check.hpp"

namespace shoal::staging {

namespace {
int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}
size_t index(Direction d) { return d == Direction::to_host ? 0 : 1; }
}  // namespace

HostCopyEngine::HostCopyEngine() {
  for (Direction d : {Direction::to_host, Direction::to_device})
    queues_[index(d)].worker = std::thread([this, d] { work(d); });
}

HostCopyEngine::~HostCopyEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& q : queues_) q.worker.join();
  for (void* b : buffers_) std::free(b);
}

void* HostCopyEngine::allocate_host(size_t bytes) {
  void* p = std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64));
  SHOAL_CHECK(p != nullptr, Internal, "cannot allocate " << bytes << " bytes of host memory");
  std::lock_guard<std::mutex> lock(mutex_);
  buffers_.push_back(p);
  return p;
}

void HostCopyEngine::release_host(void* host) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = std::find(buffers_.begin(), buffers_.end(), host);
  if (it == buffers_.end()) return;
  std::free(*it);
  buffers_.erase(it);
}

uint64_t HostCopyEngine::copy(Direction d, void* to, const void* from, size_t bytes) {
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Queue& q = queues_[index(d)];
    ticket = ++q.issued;
    q.tasks.push_back({ticket, to, from, bytes});
  }
  cv_.notify_all();
  return ticket;
}

void HostCopyEngine::wait(Direction d, uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  Queue& q = queues_[index(d)];
  cv_.wait(lock, [&] { return q.done >= ticket || q.error; });
  if (q.error) std::rethrow_exception(q.error);
}

void HostCopyEngine::fail_copy(Direction d, uint64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  queues_[index(d)].fail_at = n;
}

void HostCopyEngine::drain() noexcept {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] {
    return std::all_of(std::begin(queues_), std::end(queues_),
                       [](const Queue& q) { return q.tasks.empty(); });
  });
}

std::vector<HostCopyEngine::Event> HostCopyEngine::events() {
  drain();
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

uint64_t HostCopyEngine::in_flight() {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t n = 0;
  for (const auto& q : queues_) n += q.issued - q.done;
  return n;
}

void HostCopyEngine::work(Direction d) {
  Queue& q = queues_[index(d)];
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !q.tasks.empty(); });
    if (q.tasks.empty()) return;  // stopping, nothing left
    const Task t = q.tasks.front();
    const bool fail = t.ticket == q.fail_at;
    lock.unlock();
    const int64_t start = now_ns();
    if (!fail) std::memcpy(t.to, t.from, t.bytes);
    const int64_t end = now_ns();
    lock.lock();
    // A copy engine stops at its first failure (a GPU's sticky error): later copies fail too.
    if (fail && !q.error)
      q.error = std::make_exception_ptr(
          InternalError("injected failure of copy #" + std::to_string(t.ticket) +
                        (d == Direction::to_host ? " to the host" : " to the device")));
    events_.push_back({d, t.ticket, d == Direction::to_host ? t.to : t.from, start, end,
                       fail || q.error != nullptr});
    q.tasks.pop_front();
    q.done = t.ticket;
    cv_.notify_all();
  }
}

}  // namespace shoal::staging
