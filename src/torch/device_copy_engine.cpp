#include "device_copy_engine.hpp"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <string>

#include "shoal/error.hpp"

namespace shoal::torch_glue {

namespace {
c10::Stream side_stream(c10::Device device) {
  return c10::impl::VirtualGuardImpl(device.type()).getStreamFromGlobalPool(device, false);
}
}  // namespace

DeviceCopyEngine::DeviceCopyEngine(c10::Device device)
    : device_(device),
      caller_(c10::impl::VirtualGuardImpl(device.type()).getStream(device)),
      issued_(device.type()),
      down_{side_stream(device), {}, 1},
      up_{side_stream(device), {}, 1} {
  issued_.record(caller_);
}

DeviceCopyEngine::~DeviceCopyEngine() { drain(); }

void* DeviceCopyEngine::allocate_host(size_t bytes) {
  at::Tensor t = at::empty({static_cast<int64_t>(std::max<size_t>(1, bytes))},
                           at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  void* p = t.data_ptr();
  pinned_.emplace(p, std::move(t));
  return p;
}

void DeviceCopyEngine::release_host(void* host) { pinned_.erase(host); }

void DeviceCopyEngine::after_caller() {
  issued_.block(down_.stream);
  issued_.block(up_.stream);
}

uint64_t DeviceCopyEngine::copy(staging::Direction d, void* to, const void* from, size_t bytes) {
  Queue& q = queue(d);
  const auto n = static_cast<int64_t>(bytes);
  const auto host = at::TensorOptions().dtype(at::kByte);
  const auto dev = at::TensorOptions().dtype(at::kByte).device(device_);
  const bool down = d == staging::Direction::to_host;
  at::Tensor dst = at::from_blob(to, {n}, down ? host : dev);
  at::Tensor src = at::from_blob(const_cast<void*>(from), {n}, down ? dev : host);
  c10::StreamGuard on(q.stream);
  dst.copy_(src, /*non_blocking=*/true);
  q.events.emplace_back(device_.type());
  q.events.back().record(q.stream);
  return q.first + q.events.size() - 1;
}

void DeviceCopyEngine::wait(staging::Direction d, uint64_t ticket) {
  Queue& q = queue(d);
  if (ticket < q.first) return;
  if (ticket - q.first >= q.events.size())
    throw InternalError("staging: copy #" + std::to_string(ticket) + " was never queued");
  q.events[ticket - q.first].synchronize();  // this stream's event: no device-wide wait
  // Events up to it are done: drop them (a long call queues one per piece).
  while (q.first <= ticket) {
    q.events.pop_front();
    ++q.first;
  }
}

void DeviceCopyEngine::before_caller() {
  // The caller may overwrite the input and read the output from now on: its stream waits for
  // both directions' copies.
  for (Queue* q : {&down_, &up_}) {
    c10::Event done(device_.type());
    done.record(q->stream);
    done.block(caller_);
  }
}

void DeviceCopyEngine::drain() noexcept {
  for (Queue* q : {&down_, &up_}) {
    try {
      if (!q->events.empty()) q->events.back().synchronize();
    } catch (...) {  // a failed device: nothing more to wait for
    }
  }
}

}  // namespace shoal::torch_glue
