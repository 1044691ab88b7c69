// WorkShoal: see process_group.hpp.
#include <chrono>
#include <exception>
#include <mutex>
#include <sstream>
#include <utility>
#include <vector>

#include "process_group.hpp"
#include "shoal/error.hpp"
#include "tensors.hpp"

namespace shoal::torch_glue {

using c10d::OpType;

WorkShoal::WorkShoal(int rank, OpType type, const char* title, std::vector<at::Tensor> inputs,
                     std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type, title, c10::optional<std::vector<at::Tensor>>(std::move(inputs))),
      name_(title),
      outputs_(std::move(outputs)),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

bool WorkShoal::isCompleted() {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool WorkShoal::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr WorkShoal::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_;
}

int WorkShoal::sourceRank() const {
  if (source_rank_ < 0) fail("sourceRank() is only defined for a receive from any source");
  return source_rank_;
}

bool WorkShoal::wait(std::chrono::milliseconds timeout) {
  const bool untimed = timeout == kNoTimeout || timeout.count() < 0;
  if (untimed && help_) help_();
  std::unique_lock<std::mutex> lock(mutex_);
  if (untimed) {
    cv_.wait(lock, [&] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    std::ostringstream msg;
    msg << "shoal (torch backend): rank " << rank_ << ": " << name_
        << " did not complete within the wait's " << timeout.count()
        << " ms timeout; the operation stays in flight (a peer has not joined it yet or "
        << "is slow): wait again, or make sure every rank issues the same calls";
    throw shoal::TimeoutError(msg.str());
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

void WorkShoal::complete(std::exception_ptr error) {
  // The future first: DDP and Python callbacks chain on it; wait() returns after both.
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
  finish(error);
}

}  // namespace shoal::torch_glue
