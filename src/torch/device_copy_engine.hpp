// The copy engine of device (CUDA) tensors: staging::CopyEngine over torch's device-generic
// streams and events, so that the extension needs no CUDA headers or libraries of its own (torch
// loads its CUDA runtime; without it, a CUDA tensor never reaches this).
//
// Copies to the host run on one side stream of the device, copies back on another (a GPU has a
// copy engine each way). Both start after an event recorded on the caller's current stream when
// the engine is made (the kernels that produced the input), and the caller's stream waits for an
// event after the last copy back: nothing synchronises the device, no other stream waits.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <deque>
#include <map>

#include "staging/copy_engine.hpp"

namespace shoal::torch_glue {

class DeviceCopyEngine final : public staging::CopyEngine {
 public:
  /// Records the caller's current stream of `device` now (the call's issue point).
  explicit DeviceCopyEngine(c10::Device device);
  ~DeviceCopyEngine() override;
  void* allocate_host(size_t bytes) override;
  void release_host(void* host) override;
  void after_caller() override;
  uint64_t copy(staging::Direction d, void* to, const void* from, size_t bytes) override;
  void wait(staging::Direction d, uint64_t ticket) override;
  void before_caller() override;
  void drain() noexcept override;

 private:
  struct Queue {
    c10::Stream stream;
    std::deque<c10::Event> events;  // one per copy: events[i] is ticket first + i
    uint64_t first = 1;
  };
  Queue& queue(staging::Direction d) { return d == staging::Direction::to_host ? down_ : up_; }

  c10::Device device_;
  c10::Stream caller_;
  c10::Event issued_;  // on the caller's stream at construction
  Queue down_, up_;
  std::map<void*, at::Tensor> pinned_;  // allocate_host's buffers (torch's caching host allocator)
};

}  // namespace shoal::torch_glue
