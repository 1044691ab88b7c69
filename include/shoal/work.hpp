// Work: the handle of an asynchronous operation.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>

namespace shoal {

namespace detail {
struct WorkState;
}

/// Handle of an operation in flight. Copies share the same operation.
/// Buffers passed to the operation must stay valid until it completes.
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}

  /// Blocks until the operation completes; rethrows its error (shoal::Error) if it failed.
  void wait() const;
  /// Waits at most `timeout`; returns false if still running, rethrows the error if it failed.
  bool wait(std::chrono::milliseconds timeout) const;
  /// True once the operation has completed, successfully or not. Never blocks.
  bool test() const;
  /// The error the operation failed with, or null (also null while running).
  std::exception_ptr error() const;
  /// True if completed without error.
  bool succeeded() const { return test() && !error(); }
  bool valid() const { return state_ != nullptr; }
  /// A receive's sender: the rank it named, or for a receive from any source the rank whose
  /// message it took (-1 until then). -1 for every other operation.
  int source() const;
  /// Runs `fn(error)` (null on success) once the operation has completed: at once, on this
  /// thread, if it already has; else on the thread that completes it (shoal's progress thread,
  /// or a caller's), right after waiters are woken. Callbacks run in the order they were added.
  /// Keep them short and non-blocking, and do not call the communicator from them; an
  /// exception a callback throws is dropped.
  void on_complete(std::function<void(std::exception_ptr)> fn) const;

 private:
  std::shared_ptr<detail::WorkState> state_;
};

}  // namespace shoal
