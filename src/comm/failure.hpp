// How a communicator's engine fails: one state and its transitions.
//
//   healthy --note_from_caller--> noted by a caller  --+
//      |                                               +--begin_applying, set_broken--> broken
//      +-------note_from_engine--> noted by the engine --+
//
// A cause (code, message, culprit) is noted by a caller's thread (Engine::break_from_caller: a
// flat collective that failed there, abort(), a hierarchy relaying its parent's break) or by
// the progress thread (a broken connection, a peer's abort frame, a mismatch, a timeout). The
// progress thread applies the first cause it takes (Engine::break_comm: the peers are told,
// every operation fails) and records the error every later call fails with. Callers see the
// break once they noted it themselves or once it was applied (broken(): one atomic load); a
// cause the engine noted stays the engine's until applied.
#pragma once

#include <atomic>
#include <exception>
#include <optional>
#include <string>

#include "shoal/error.hpp"

namespace shoal::comm {

struct FailureCause {
  ErrorCode code;
  std::string message;
  int culprit;
};

class FailureState {
 public:
  // ---- any thread; [lock]: under the engine's submission lock, which also keeps a call from
  // being queued after the break has failed the queue ----
  bool broken() const { return visible_.load(std::memory_order_acquire); }
  /// [lock] Notes a caller's cause; false, changing nothing, when a caller noted one already or
  /// a cause was applied.
  bool note_from_caller(FailureCause cause) {
    if (error_ || caller_) return false;
    caller_ = std::move(cause);
    visible_.store(true, std::memory_order_release);
    return true;
  }
  /// [lock] The cause a caller noted, if any (applied or not).
  const std::optional<FailureCause>& caller_cause() const { return caller_; }
  /// [lock] The error the communicator broke with; null until a cause was applied.
  const std::exception_ptr& error() const { return error_; }
  /// [lock] The applied cause's error: what every later call fails with.
  void set_broken(std::exception_ptr error) {
    error_ = std::move(error);
    visible_.store(true, std::memory_order_release);
  }

  // ---- the progress thread ----
  /// Notes the engine's own cause; the first one stays.
  void note_from_engine(FailureCause cause) {
    if (!engine_) engine_ = std::move(cause);
  }
  /// The cause the engine noted, if any: its steps stop until it is applied.
  const std::optional<FailureCause>& engine_cause() const { return engine_; }
  /// Starts applying a cause: false when one was applied already (the first one stays).
  bool begin_applying() {
    if (applied_) return false;
    applied_ = true;
    return true;
  }
  bool applied() const { return applied_; }

 private:
  std::atomic<bool> visible_{false};
  std::optional<FailureCause> caller_;  // [lock]
  std::exception_ptr error_;            // [lock]
  std::optional<FailureCause> engine_;  // progress thread
  bool applied_ = false;                // progress thread
};

}  // namespace shoal::comm
