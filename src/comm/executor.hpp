// The executors: what runs a planned call (comm/plan.hpp). Each path has one, behind one
// interface; CommImpl::call plans a request and starts it on the executor of its path.
//
//   schedule   -> ScheduleExecutor: the engine runs the row's schedule (point-to-point frames)
//   flat       -> FlatExecutor: the flat protocol (comm/flat.hpp), on the caller's thread when
//                 the call blocks and nothing is in flight, else on the engine's
//   hierarchy  -> HierarchyExecutor: phases on the host's and the rank-aligned groups
//                 (comm/hierarchical.hpp)
#pragma once

#include <chrono>
#include <cstdint>

#include "comm/plan.hpp"
#include "comm/request.hpp"
#include "shoal/work.hpp"

namespace shoal::detail {
class CommImpl;
}

namespace shoal::comm {

class Engine;

class Executor {
 public:
  virtual ~Executor() = default;
  /// Starts `request` as `plan` says (a vectored call's pieces are moved out); the Work
  /// completes when the call has.
  virtual Work start(const Plan& plan, const Request& request) = 0;
};

class ScheduleExecutor final : public Executor {
 public:
  explicit ScheduleExecutor(Engine& engine) : engine_(engine) {}
  Work start(const Plan& plan, const Request& request) override;

 private:
  Engine& engine_;
};

class FlatExecutor final : public Executor {
 public:
  FlatExecutor(Engine& engine, std::chrono::milliseconds timeout)
      : engine_(engine), timeout_(timeout) {}
  Work start(const Plan& plan, const Request& request) override;

 private:
  /// On the caller's thread (nothing in flight), bounded by the timeout.
  Work run_here(const OpRequest& op);
  Engine& engine_;
  const std::chrono::milliseconds timeout_;
  uint32_t seq_ = 0;  // flat collectives issued so far: their number in the protocol
};

class HierarchyExecutor final : public Executor {
 public:
  explicit HierarchyExecutor(detail::CommImpl& comm) : comm_(comm) {}
  Work start(const Plan& plan, const Request& request) override;

 private:
  detail::CommImpl& comm_;
};

}  // namespace shoal::comm
