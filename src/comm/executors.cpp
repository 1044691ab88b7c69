#include <cstring>
#include <memory>
#include <sstream>
#include <vector>

#include "comm/comm_impl.hpp"
#include "comm/executor.hpp"
#include "comm/flat.hpp"
#include "comm/work_state.hpp"

namespace shoal::comm {

namespace {

OpRequest op_request(const Plan& plan, const Request& r) {
  OpRequest op;
  op.args = plan.args;
  op.input = r.input;
  op.output = r.output;
  op.signature = plan.signature;
  op.timed = plan.timed;
  return op;
}

// The Work of every blocking flat collective that succeeded (nothing to allocate per call).
const std::shared_ptr<detail::WorkState>& succeeded_work() {
  static const auto state = [] {
    auto s = std::make_shared<detail::WorkState>();
    s->complete();
    return s;
  }();
  return state;
}

Work failed_work(std::exception_ptr e) {
  auto state = std::make_shared<detail::WorkState>();
  state->complete(std::move(e));
  return Work(state);
}

}  // namespace

Work ScheduleExecutor::start(const Plan& plan, const Request& r) {
  OpRequest op = op_request(plan, r);
  if (r.vectored) {
    op.input_pieces = std::move(r.vectored->input);
    op.output_pieces = std::move(r.vectored->output);
  }
  return Work(engine_.submit(op));
}

Work FlatExecutor::start(const Plan& plan, const Request& r) {
  OpRequest op = op_request(plan, r);
  op.flat_seq = seq_ + 1;
  seq_ += flat_rounds(plan.args, engine_.flat()->limits());
  if (r.vectored) {
    // The shared-slot path reads and writes one buffer: the pieces are packed into one and the
    // result copied out before the Work completes.
    const auto& a = plan.args;
    auto in = std::make_shared<std::vector<uint8_t>>(algorithms::input_bytes(a));
    auto out =
        a.in_place ? in : std::make_shared<std::vector<uint8_t>>(algorithms::output_bytes(a));
    for (const auto& p : r.vectored->input) std::memcpy(in->data() + p.offset, p.data, p.bytes);
    op.input = in->data();
    op.output = out->data();
    op.finish = [in, out, output = std::move(r.vectored->output)] {
      for (const auto& p : output) std::memcpy(p.data, out->data() + p.offset, p.bytes);
    };
  } else if (r.blocking && engine_.idle()) {
    return run_here(op);  // nothing in flight: on the caller's thread
  }
  return Work(engine_.submit(op));
}

Work FlatExecutor::run_here(const OpRequest& op) {
  const auto& a = op.args;
  if (engine_.broken()) return failed_work(engine_.broken_error());
  const uint64_t number = engine_.reserve_collective_number();
  // Checked only once the operation has to wait (so the fast path reads no clock).
  Clock::time_point deadline{};
  auto check = [&](int waiting_for) {
    if (engine_.broken()) std::rethrow_exception(engine_.broken_error());
    if (engine_.peer_closed(waiting_for))
      throw PeerFailureError(closed_without_joining(a.rank, number, waiting_for), waiting_for);
    const auto now = Clock::now();
    if (deadline == Clock::time_point{}) deadline = now + timeout_;
    if (now > deadline) {
      std::ostringstream os;
      os << "rank " << a.rank << ": " << algorithms::to_string(a.collective) << " #" << number
         << " (" << a.count << " x " << to_string(a.dtype)
         << ", shared memory) did not finish within the "
         << std::chrono::duration<double>(timeout_).count()
         << " s timeout (SHOAL_TIMEOUT), waiting for rank " << waiting_for
         << ". Are all ranks alive and issuing the same calls in the same order?";
      engine_.break_from_caller(ErrorCode::Timeout, os.str(), waiting_for);
      throw TimeoutError(os.str(), waiting_for);
    }
  };
  try {
    FlatCollective flat(*engine_.flat(), a, op.flat_seq, number, op.signature, op.input, op.output);
    flat.run(check);
  } catch (const Error& e) {
    // The peers may still be waiting in this collective (for this rank's buffers, or for it
    // to read theirs): a failed one breaks the communicator, so that they learn of it too
    // (its abort note is in place before this returns: Engine::break_from_caller).
    engine_.break_from_caller(e.code(), e.what(), e.peer());
    return failed_work(std::current_exception());
  }
  return Work(succeeded_work());
}

Work HierarchyExecutor::start(const Plan& /*plan*/, const Request& r) {
  if (comm_.engine->broken()) return failed_work(comm_.engine->broken_error());  // groups unaware
  if (!comm_.hierarchy) comm_.hierarchy = std::make_unique<Hierarchy>(comm_);
  return comm_.hierarchy->run(r);
}

}  // namespace shoal::comm
