// Device memory reached through pinned host buffers: the copy engine a staged collective moves
// its bytes with. The CUDA engine (src/torch/cuda_copy_engine.cpp) queues copies on side streams
// ordered after the caller's stream with events; HostCopyEngine does the same with threads over
// host memory, so that the pipeline's order, chunking and failures are tested on any machine.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace shoal::staging {

/// The two directions copy independently (a GPU has a copy engine each way), each in order.
enum class Direction { to_host, to_device };

class CopyEngine {
 public:
  virtual ~CopyEngine() = default;
  /// Pinned host memory of `bytes` (released with the engine, or by release_host).
  virtual void* allocate_host(size_t bytes) = 0;
  virtual void release_host(void* host) = 0;
  /// Copies queued from now on start after the work the caller queued before (the producers of
  /// the input, on the caller's stream). No host wait.
  virtual void after_caller() = 0;
  /// Queues a copy; returns its ticket, one more than the direction's previous one.
  virtual uint64_t copy(Direction d, void* to, const void* from, size_t bytes) = 0;
  /// Blocks the calling thread until the direction's copies up to `ticket` are done; throws the
  /// failure of the first that failed.
  virtual void wait(Direction d, uint64_t ticket) = 0;
  /// Work the caller queues from now on starts after every copy queued so far (the consumers
  /// of the output). No host wait.
  virtual void before_caller() = 0;
  /// Blocks until no copy is in flight, whether they failed or not (before host buffers they
  /// use are released on a failure's path). Never throws.
  virtual void drain() noexcept = 0;
};

/// "Device" memory that is host memory, one thread per direction doing the copies in order.
/// For tests: it logs every copy and can fail the n-th one of a direction.
class HostCopyEngine final : public CopyEngine {
 public:
  struct Event {
    Direction direction;
    uint64_t ticket;
    const void* host;  // the host buffer's side of the copy
    int64_t start_ns;  // when the copy began (monotonic)
    int64_t end_ns;    // when it ended
    bool failed;
  };
  HostCopyEngine();
  ~HostCopyEngine() override;
  void* allocate_host(size_t bytes) override;
  void release_host(void* host) override;
  void after_caller() override { ++after_caller_calls_; }
  uint64_t copy(Direction d, void* to, const void* from, size_t bytes) override;
  void wait(Direction d, uint64_t ticket) override;
  void before_caller() override { ++before_caller_calls_; }
  void drain() noexcept override;

  /// The `n`-th copy (1-based) of direction `d` fails instead of copying.
  void fail_copy(Direction d, uint64_t n);
  /// Every copy so far, in the order they ended; after drain().
  std::vector<Event> events();
  /// Copies queued and not yet done.
  uint64_t in_flight();
  int after_caller_calls() const { return after_caller_calls_; }
  int before_caller_calls() const { return before_caller_calls_; }

 private:
  struct Task {
    uint64_t ticket;
    void* to;
    const void* from;
    size_t bytes;
  };
  struct Queue {
    std::deque<Task> tasks;
    uint64_t issued = 0, done = 0, fail_at = 0;
    std::exception_ptr error;
    std::thread worker;
  };
  void work(Direction d);

  std::mutex mutex_;
  std::condition_variable cv_;
  Queue queues_[2];
  bool stopping_ = false;
  std::vector<Event> events_;
  std::vector<void*> buffers_;
  int after_caller_calls_ = 0, before_caller_calls_ = 0;
};

}  // namespace shoal::staging
