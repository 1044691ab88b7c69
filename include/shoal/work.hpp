// Work: the handle of an asynchronous operation.
#pragma once

#include <chrono>
#include <exception>
#include <memory>

namespace shoal {

namespace detail { struct WorkState; }

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

 private:
  std::shared_ptr<detail::WorkState> state_;
};

}  // namespace shoal
