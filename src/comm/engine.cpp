#include "comm/engine.hpp"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "algorithms/registry.hpp"
#include "comm/flat.hpp"
#include "comm/spin.hpp"
#include "core/check.hpp"
#include "core/config.hpp"
#include "core/reduce.hpp"
#include "transport/tcp/socket_stream.hpp"

namespace shoal::comm {

using algorithms::Buffer;
using algorithms::Collective;
using algorithms::StepKind;
using transport::FrameKind;

namespace {
constexpr uint32_t kWakeToken = UINT32_MAX;
// p2p frames' operation numbers have the top bit set: an ack names its frame by (seq, tag),
// and p2p frames share the connection with collectives' frames.
constexpr uint64_t kP2pSeqBit = uint64_t{1} << 63;

std::exception_ptr make_error(ErrorCode code, const std::string& message, int peer) {
  try {
    throw_error(code, message, peer);
  } catch (...) {
    return std::current_exception();
  }
}

// What every call fails with once the communicator broke (or a caller asked it to).
std::exception_ptr unusable_error(int rank, ErrorCode code, const std::string& why, int culprit) {
  return make_error(code,
                    "rank " + std::to_string(rank) +
                        ": the communicator is unusable after an earlier failure: " + why,
                    culprit);
}
}  // namespace

struct Engine::Op {
  uint32_t id = 0;
  OpRequest request;
  std::shared_ptr<detail::WorkState> work = std::make_shared<detail::WorkState>();
  FrameKind kind = FrameKind::collective;
  uint64_t seq = 0;
  uint32_t signature = 0;
  algorithms::Schedule schedule;
  std::string algorithm;
  // execution state (engine thread)
  std::vector<uint32_t> remaining;        // unmet dependencies per step
  std::vector<uint32_t> first_dependent;  // CSR over dependents
  std::vector<uint32_t> dependents;
  std::vector<uint32_t>
      frame_index;  // per send/recv step: its index among frames to/from that peer
  std::vector<uint8_t> ready;
  uint32_t steps_done = 0;
  bool finished = false;
  std::unique_ptr<FlatCollective> flat;  // a flat collective instead of a schedule
  Clock::time_point deadline;
  Clock::time_point started;

  bool is_p2p() const { return kind == FrameKind::p2p; }
};

Engine::Engine(int rank, int size, uint64_t comm_id,
               std::vector<std::unique_ptr<transport::Stream>> streams,
               std::unique_ptr<transport::shm::ShmMesh> shm, std::unique_ptr<FlatMemory> flat,
               std::chrono::milliseconds timeout)
    : rank_(rank),
      size_(size),
      comm_id_(comm_id),
      timeout_(timeout),
      shm_(std::move(shm)),
      flat_(std::move(flat)) {
  if (shm_) sleeping_flag_ = shm_->sleeping_flag();
  watch_peers_ = flat_ && size > 1;
  peer_closed_ = std::make_unique<std::atomic<bool>[]>(size);
  peer_failed_ = std::make_unique<std::atomic<bool>[]>(size);
  runs_ = std::make_unique<std::atomic<uint64_t>[]>(algorithms::registry().size());
  next_send_seq_.assign(size, 0);
  next_recv_seq_.assign(size, 0);
  send_queue_.resize(size);
  recv_queue_.resize(size);
  conns_.resize(size);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  SHOAL_CHECK(epoll_fd_ >= 0 && wake_fd_ >= 0, Internal, "epoll/eventfd: " << strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u32 = kWakeToken;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  for (int p = 0; p < size; ++p) {
    if (!streams[p]) continue;
    const int fd = streams[p]->fd();
    if (streams[p]->polled()) polled_.push_back(p);
    conns_[p] = std::make_unique<transport::Connection>(std::move(streams[p]), p, comm_id, this);
    epoll_event e{};
    e.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    e.data.u32 = static_cast<uint32_t>(p);
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &e);
  }
  heartbeat_limit_ =
      config::get_duration_or_auto("SHOAL_HEARTBEAT")
          .value_or(std::min<std::chrono::milliseconds>(timeout / 2, std::chrono::seconds(30)));
  if (heartbeat_limit_.count() > 0) {
    heartbeat_interval_ = std::clamp<std::chrono::milliseconds>(
        heartbeat_limit_ / 6, std::chrono::milliseconds(10), std::chrono::seconds(1));
    next_heartbeat_ = Clock::now() + heartbeat_interval_;
  }
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(submit_mutex_);
    stopping_ = true;
  }
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof one);
  (void)ignored;
  if (thread_.joinable()) thread_.join();
  conns_.clear();
  close(epoll_fd_);
  close(wake_fd_);
}

std::shared_ptr<detail::WorkState> Engine::submit(const OpRequest& request) {
  auto op = std::make_unique<Op>();
  op->request = request;
  const auto& a = request.args;
  op->kind = (a.collective == Collective::send || a.collective == Collective::recv)
                 ? FrameKind::p2p
                 : FrameKind::collective;
  op->signature = request.signature;
  if (request.flat_seq != 0)
    op->algorithm = "flat";
  else if (a.count > 0 || a.collective == Collective::barrier) {
    const algorithms::AlgorithmInfo* row = nullptr;
    op->schedule = algorithms::build_schedule(a, &op->algorithm, &row);
    runs_[row - algorithms::registry().data()].fetch_add(1, std::memory_order_relaxed);
  }
  auto work = op->work;
  if (a.collective == Collective::recv) work->source.store(a.peer, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(submit_mutex_);
    if (failure_.error()) {
      work->complete(failure_.error());
      return work;
    }
    if (stopping_) {
      work->complete(make_error(ErrorCode::Aborted, "the communicator is being destroyed", -1));
      return work;
    }
    if (a.collective == Collective::send)
      op->seq = next_send_seq_[a.peer]++;
    else if (a.collective == Collective::recv)
      op->seq = a.peer < 0 ? next_any_source_seq_++ : next_recv_seq_[a.peer]++;
    else
      op->seq = next_collective_seq_++;
    outstanding_.fetch_add(1, std::memory_order_acq_rel);
    submitted_.push_back(std::move(op));
  }
  if (sleeping_.load()) {
    uint64_t one = 1;
    ssize_t ignored = write(wake_fd_, &one, sizeof one);
    (void)ignored;
  }
  return work;
}

bool Engine::idle() const { return outstanding_.load(std::memory_order_acquire) == 0; }

void Engine::advance_flat() {
  Op& op = *flat_running_;
  try {
    if (op.flat->advance()) {
      op.finished = true;
      flat_running_ = nullptr;
      ++progress_count_;
      return;
    }
    // A call of many rounds waits for its peers once or twice a round: while they keep coming
    // this is progress, and the loop keeps polling rather than sleeping 1 ms a round.
    if (op.flat->moved()) ++progress_count_;
    op.flat->watch_peer();
    const int q = op.flat->waiting_for();
    if (peer_closed(q))
      on_connection_error(q, ErrorCode::PeerFailure, closed_without_joining(rank_, op.seq, q));
  } catch (const Error& e) {
    on_connection_error(e.peer(), e.code(), e.what());
  }
}

uint64_t Engine::runs_of(const algorithms::AlgorithmInfo& row) const {
  return runs_[&row - algorithms::registry().data()].load(std::memory_order_relaxed);
}

uint64_t Engine::reserve_collective_number() {
  // Only while idle (nothing queued), from the thread that submits: no race with submit().
  return next_collective_seq_.fetch_add(1, std::memory_order_relaxed);
}

std::exception_ptr Engine::broken_error() const {
  if (!broken()) return nullptr;
  std::lock_guard<std::mutex> lock(submit_mutex_);
  if (failure_.error()) return failure_.error();
  // A caller's break the progress thread has not applied yet: the words, and the culprit, it
  // will use (a culprit relayed from outside this group decoded, as break_comm does).
  const FailureCause& c = *failure_.caller_cause();
  std::string where;
  const int culprit = outer_culprit(c.culprit, where);
  return unusable_error(rank_, c.code, c.message + where, culprit);
}

int Engine::outer_culprit(int peer, std::string& where) const {
  // Inside another communicator: the culprit by its outer rank too (the caller knows only those).
  if (outer_context_.empty()) return peer;
  int culprit = peer;
  where = " [in " + outer_context_;
  if (peer >= 0 && peer < static_cast<int>(outer_ranks_.size())) {
    culprit = outer_ranks_[peer];
    where += ": its rank " + std::to_string(peer) + " is rank " + std::to_string(culprit);
  } else if (peer <= -2) {
    culprit = -2 - peer;  // outside_culprit(): a failure relayed from outside this group
  }
  // The message names this rank by its rank in here too ("cut off from rank 3").
  if (rank_ < static_cast<int>(outer_ranks_.size()))
    where += "; this is its rank " + std::to_string(rank_) + ", rank " +
             std::to_string(outer_ranks_[rank_]);
  where += "]";
  return culprit;
}

void Engine::break_from_caller(ErrorCode code, const std::string& message, int culprit) {
  {
    std::lock_guard<std::mutex> lock(submit_mutex_);
    // From here on the caller's thread sees the break (broken(), broken_error()): a call on it
    // that does not go through the progress thread (the flat path) must not slip past it.
    if (!failure_.note_from_caller({code, message, culprit})) return;
  }
  // The same note break_comm() leaves later through the streams (the first note stays).
  if (auto* own = shm_ ? shm_->own_header() : nullptr)
    transport::shm::post_abort_note(*own, code, culprit, message);
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof one);
  (void)ignored;
}

void Engine::set_outer_names(std::string context, std::vector<int> world_ranks) {
  std::lock_guard<std::mutex> lock(submit_mutex_);
  outer_context_ = std::move(context);
  outer_ranks_ = std::move(world_ranks);
}

void Engine::set_break_listener(BreakListener listener) {
  std::lock_guard<std::mutex> lock(listener_mutex_);
  break_listener_ = std::move(listener);
}

std::string Engine::describe(const Op& op) const {
  const auto& a = op.request.args;
  std::ostringstream os;
  os << algorithms::to_string(a.collective) << " #" << op.seq;
  if (a.collective == Collective::send) os << " to rank " << a.peer;
  if (a.collective == Collective::recv)
    os << (a.peer < 0 ? " from any rank" : " from rank " + std::to_string(a.peer));
  if (a.collective != Collective::barrier) {
    os << " (" << (op.algorithm.empty() ? "" : op.algorithm + ", ") << a.count << " x "
       << to_string(a.dtype);
    if (a.collective == Collective::all_reduce || a.collective == Collective::reduce ||
        a.collective == Collective::reduce_scatter)
      os << ", " << to_string(a.op);
    if (a.root >= 0) os << ", root " << a.root;
    if (op.is_p2p()) os << ", tag " << a.tag;
    os << ")";
  }
  return os.str();
}

void Engine::admit_new_ops() {
  std::unique_lock<std::mutex> lock(submit_mutex_);
  if (failure_.caller_cause() && !failure_.applied()) {
    const FailureCause b = *failure_.caller_cause();
    lock.unlock();
    break_comm(b.code, b.message, b.culprit);
    lock.lock();
  }
  if (!submitted_.empty()) ++progress_count_;
  while (!submitted_.empty()) {
    waiting_.push_back(std::move(submitted_.front()));
    submitted_.pop_front();
  }
}

void Engine::start_ready_ops() {
  while (!waiting_.empty() && !failure_.applied()) {
    // Sends and receives start at once; a collective once no other collective runs (they share
    // the scratch buffer and their frames' order).
    Op& next = *waiting_.front();
    bool ok = true;
    if (!next.is_p2p())
      for (const auto& r : running_) ok = ok && r->is_p2p();
    if (!ok) return;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    start(*running_.back());
  }
}

void Engine::start(Op& op) {
  op.id = next_op_id_++;
  op.started = Clock::now();
  op.deadline = op.started + timeout_;
  if (op.request.flat_seq != 0) {  // a flat collective: polled by the loop until it is done
    op.flat = std::make_unique<FlatCollective>(*flat_, op.request.args, op.request.flat_seq, op.seq,
                                               op.signature, op.request.input, op.request.output);
    flat_running_ = &op;
    advance_flat();
    return;
  }
  if (op.kind == FrameKind::collective && flat_)
    announce_collective(*flat_, rank_, op.seq, op.signature);
  auto& sch = op.schedule;
  const size_t n = sch.steps.size();
  op.remaining.assign(n, 0);
  op.ready.assign(n, 0);
  op.frame_index.assign(n, 0);
  op.first_dependent.assign(n + 1, 0);
  for (const auto& [before, after] : sch.edges) {
    ++op.remaining[after];
    ++op.first_dependent[before + 1];
  }
  for (size_t i = 0; i < n; ++i) op.first_dependent[i + 1] += op.first_dependent[i];
  op.dependents.assign(sch.edges.size(), 0);
  {
    std::vector<uint32_t> fill(op.first_dependent.begin(), op.first_dependent.end() - 1);
    for (const auto& [before, after] : sch.edges) op.dependents[fill[before]++] = after;
  }
  if (sch.scratch_bytes > scratch_.size()) scratch_.resize(sch.scratch_bytes);
  std::vector<uint32_t> sends_to(size_, 0), recvs_from(size_, 0);
  for (uint32_t i = 0; i < n; ++i) {
    const auto& st = sch.steps[i];
    if (st.kind == StepKind::send) {
      op.frame_index[i] = sends_to[st.peer]++;
      send_queue_[st.peer].push_back({&op, i});
    } else if (st.kind == StepKind::recv && st.peer >= 0) {
      op.frame_index[i] = recvs_from[st.peer]++;
      recv_queue_[st.peer].push_back({&op, i});
    }
  }
  if (n == 0) {
    op.finished = true;
    return;
  }
  // Transfers first, their frames written before any local step runs: a send (on shared memory
  // a large one goes by reference, pulled by its receiver) is under way while this rank copies
  // its own block (gather's, scatter's, all_to_all's). Completions wait for drain().
  ready_local_.clear();
  for (uint32_t i = 0; i < n && !failure_.engine_cause(); ++i) {
    if (op.remaining[i] != 0) continue;
    const StepKind k = sch.steps[i].kind;
    if (k == StepKind::send || k == StepKind::recv)
      make_ready(op, i);
    else
      ready_local_.push_back(i);
  }
  if (!ready_local_.empty()) progress_dirty();
  for (uint32_t i : ready_local_)
    if (!failure_.engine_cause()) make_ready(op, i);
}

uint8_t* Engine::resolve(Op& op, const algorithms::Slice& s) {
  uint8_t* base = nullptr;
  switch (s.buffer) {
    case Buffer::input:
      base = const_cast<uint8_t*>(static_cast<const uint8_t*>(op.request.input));
      break;
    case Buffer::output:
      base = static_cast<uint8_t*>(op.request.output);
      break;
    case Buffer::scratch:
      base = scratch_.data();
      break;
  }
  return base ? base + s.offset : nullptr;
}

void Engine::runs(Op& op, const algorithms::Slice& s, std::vector<iovec>& out) {
  out.clear();
  const std::vector<Piece>* pieces = s.buffer == Buffer::input    ? &op.request.input_pieces
                                     : s.buffer == Buffer::output ? &op.request.output_pieces
                                                                  : nullptr;
  if (!pieces || pieces->empty()) {
    out.push_back({resolve(op, s), s.bytes});
    return;
  }
  // The last piece starting at or before s.offset holds it (the first starts at 0).
  auto it = std::upper_bound(pieces->begin(), pieces->end(), s.offset,
                             [](uint64_t off, const Piece& p) { return off < p.offset; });
  --it;
  for (uint64_t at = s.offset, left = s.bytes; left > 0; ++it) {
    const uint64_t from = at - it->offset, take = std::min(it->bytes - from, left);
    out.push_back({it->data + from, take});
    at += take;
    left -= take;
  }
}

void Engine::make_ready(Op& op, uint32_t i) {
  const auto& st = op.schedule.steps[i];
  if (st.kind == StepKind::recv && st.peer < 0) {
    post_any_source(op, i);
  } else if (st.kind == StepKind::send || st.kind == StepKind::recv) {
    op.ready[i] = 1;
    try_post(st.peer);
  } else {
    run_local(op, i);
  }
}

void Engine::run_local(Op& op, uint32_t i) {
  const auto& st = op.schedule.steps[i];
  const auto& a = op.request.args;
  const uint64_t es = size_of(a.dtype);
  auto apply = [&](uint8_t* d, const uint8_t* s, const uint8_t* s2, uint64_t bytes) {
    switch (st.kind) {
      case StepKind::reduce:
        kernels::reduce(d, s, s2, bytes / es, a.dtype, a.op);
        break;
      case StepKind::copy:
        if (d != s) std::memcpy(d, s, bytes);
        break;
      case StepKind::finalize:
        kernels::finalize_avg(d, bytes / es, a.dtype, a.size);
        break;
      default:
        break;
    }
  };
  const bool local =
      st.kind == StepKind::reduce || st.kind == StepKind::copy || st.kind == StepKind::finalize;
  if (local && st.dst.bytes > 0) {
    if (op.request.input_pieces.empty() && op.request.output_pieces.empty()) {
      apply(resolve(op, st.dst), resolve(op, st.src), resolve(op, st.src2), st.dst.bytes);
    } else {
      // A vectored buffer: the slices in runs that lie in one piece of each.
      const algorithms::Slice* slices[3] = {&st.dst, &st.src, &st.src2};
      const int used = st.kind == StepKind::reduce ? 3 : st.kind == StepKind::copy ? 2 : 1;
      size_t at[3] = {0, 0, 0};
      uint64_t off[3] = {0, 0, 0};
      for (int k = 0; k < used; ++k) runs(op, *slices[k], local_runs_[k]);
      auto ptr = [&](int k) {
        return k < used ? static_cast<uint8_t*>(local_runs_[k][at[k]].iov_base) + off[k] : nullptr;
      };
      for (uint64_t done = 0; done < st.dst.bytes;) {
        uint64_t n = st.dst.bytes - done;
        for (int k = 0; k < used; ++k)
          n = std::min<uint64_t>(n, local_runs_[k][at[k]].iov_len - off[k]);
        apply(ptr(0), ptr(1), ptr(2), n);
        for (int k = 0; k < used; ++k)
          if ((off[k] += n) == local_runs_[k][at[k]].iov_len) ++at[k], off[k] = 0;
        done += n;
      }
    }
  }
  step_done(op, i);
}

void Engine::step_done(Op& op, uint32_t i) {
  ++op.steps_done;
  ++progress_count_;
  for (uint32_t k = op.first_dependent[i]; k < op.first_dependent[i + 1]; ++k) {
    uint32_t d = op.dependents[k];
    if (--op.remaining[d] == 0 && !failure_.engine_cause()) make_ready(op, d);
  }
  if (op.steps_done == op.schedule.steps.size()) op.finished = true;
}

void Engine::try_post(int peer) {
  auto* conn = conns_[peer].get();
  bool posted = false;
  for (auto* q : {&send_queue_[peer], &recv_queue_[peer]}) {
    while (!q->empty() && q->front().op->ready[q->front().step]) {
      Op& op = *q->front().op;
      const uint32_t i = q->front().step;
      q->pop_front();
      const auto& st = op.schedule.steps[i];
      const uint64_t cookie = (static_cast<uint64_t>(op.id) << 32) | i;
      if (st.kind == StepKind::send) {
        transport::SendRequest r;
        r.header.kind = op.kind;
        r.header.comm_id = comm_id_;
        r.header.seq = op.is_p2p() ? op.seq | kP2pSeqBit : op.seq;
        // p2p frames carry the user's tag (one queue per tag); a collective's, the frame index
        r.header.tag = op.is_p2p() ? static_cast<uint32_t>(op.request.args.tag) : op.frame_index[i];
        r.header.signature = op.signature;
        r.header.length = st.src.bytes;
        if (op.request.input_pieces.empty() && op.request.output_pieces.empty()) {
          r.data = resolve(op, st.src);
        } else {
          runs(op, st.src, r.gather);
          if (r.gather.size() == 1) r.data = static_cast<const uint8_t*>(r.gather[0].iov_base);
          if (r.gather.size() <= 1) r.gather.clear();
        }
        r.cookie = cookie;
        conn->post_send(r);
      } else {
        conn->post_recv(receive_request(op, i));
      }
      posted = true;
    }
  }
  if (posted) dirty_.push_back(peer);
}

transport::RecvRequest Engine::receive_request(Op& op, uint32_t i) {
  const auto& st = op.schedule.steps[i];
  transport::RecvRequest r;
  r.kind = op.kind;
  r.seq = op.seq;
  r.tag = op.is_p2p() ? static_cast<uint32_t>(op.request.args.tag) : op.frame_index[i];
  r.signature = op.signature;
  r.length = st.dst.bytes;
  if (op.request.input_pieces.empty() && op.request.output_pieces.empty()) {
    r.dst = resolve(op, st.dst);
  } else {
    runs(op, st.dst, r.scatter);
    if (r.scatter.size() == 1) r.dst = static_cast<uint8_t*>(r.scatter[0].iov_base);
    if (r.scatter.size() <= 1) r.scatter.clear();
  }
  r.cookie = (static_cast<uint64_t>(op.id) << 32) | i;
  r.order = r.cookie;  // operations start in issue order, and op ids follow it
  return r;
}

// A receive from any source takes the earliest frame with its tag that a connection already
// holds; else it waits in any_source_ for the first to arrive (claim_any_source).
void Engine::post_any_source(Op& op, uint32_t i) {
  const auto r = receive_request(op, i);
  int from = -1;
  uint64_t earliest = UINT64_MAX;
  for (int p = 0; p < size_; ++p)
    if (conns_[p])
      if (auto arrival = conns_[p]->held_p2p(r.tag); arrival && *arrival < earliest)
        earliest = *arrival, from = p;
  if (from >= 0) {
    op.work->source.store(from, std::memory_order_release);
    conns_[from]->post_recv(r);
    dirty_.push_back(from);
    return;
  }
  any_source_.push_back({&op, i});
  for (int p = 0; p < size_; ++p)  // a parked frame may hide the one this receive waits for
    if (conns_[p]) {
      conns_[p]->unpark();
      dirty_.push_back(p);
    }
}

std::optional<transport::RecvRequest> Engine::claim_any_source(int peer,
                                                               const transport::FrameHeader& h,
                                                               uint64_t before) {
  for (auto it = any_source_.begin(); it != any_source_.end(); ++it) {
    Op& op = *it->op;
    if (static_cast<uint32_t>(op.request.args.tag) != h.tag) continue;
    // A receive named for this peer and tag that was posted earlier takes the frame instead.
    if (((static_cast<uint64_t>(op.id) << 32) | it->step) > before) return std::nullopt;
    auto r = receive_request(op, it->step);
    op.work->source.store(peer, std::memory_order_release);
    any_source_.erase(it);
    return r;
  }
  return std::nullopt;
}

Engine::Op* Engine::find_op(uint32_t id) {
  for (auto& op : running_)
    if (op->id == id) return op.get();
  return nullptr;
}

void Engine::on_send_complete(uint64_t cookie) { completions_.push_back(cookie); }
void Engine::on_recv_complete(uint64_t cookie) { completions_.push_back(cookie); }
void Engine::on_connection_error(int culprit, ErrorCode code, const std::string& message) {
  if (code == ErrorCode::PeerFailure && culprit >= 0 && culprit < size_ && culprit != rank_)
    peer_failed_[culprit].store(true, std::memory_order_release);
  if (failure_.engine_cause()) return;  // the first one stays
  std::string full = message;
  if (code == ErrorCode::PeerFailure) {
    // The first connection to break is not always the dead rank's: a survivor that saw the
    // death first and closed may reach us sooner. Name every rank whose end is already closed.
    std::string others;
    for (int p = 0; p < size_; ++p)
      if (p != rank_ && p != culprit && conns_[p] && conns_[p]->peer_gone())
        others += (others.empty() ? "rank " : ", rank ") + std::to_string(p);
    if (!others.empty())
      full += "; " + others + " closed their connections too: one of them may have failed first";
  }
  // Applied at the top of the loop, never while an operation's steps are being walked.
  failure_.note_from_engine({code, full, culprit});
}

void Engine::on_peer_abort(int peer, int culprit, ErrorCode code, const std::string& message) {
  // A mismatch has two sides: a peer that found one names this rank, whose other side is that
  // peer (the rank this rank's error must name).
  if (code == ErrorCode::Mismatch && culprit == rank_) culprit = peer;
  on_connection_error(culprit, code, message);
}

// Ranks in the same collective with different arguments: caught here where no frame of it
// reaches the other (each believes it is the root, both wait to receive), else by the frames.
void Engine::on_peer_in_collective(int peer, uint64_t seq, uint32_t signature) {
  for (const auto& op : running_) {
    if (op->is_p2p() || op->seq != seq || op->signature == signature) continue;
    std::ostringstream os;
    os << "rank " << peer << " is in collective #" << seq << " with different arguments (signature "
       << std::hex << signature << " where rank " << std::dec << rank_ << "'s is " << std::hex
       << op->signature << std::dec
       << "): every rank must issue the same collectives with the same counts, types, ops and "
          "roots, in the same order";
    on_connection_error(peer, ErrorCode::Mismatch, os.str());
    return;
  }
}

void Engine::progress_dirty() {
  std::vector<int> work;
  work.swap(dirty_);
  for (int p : work)
    if (conns_[p]) conns_[p]->progress();
}

void Engine::drain() {
  while (!failure_.applied()) {
    if (failure_.engine_cause()) {
      const FailureCause e = *failure_.engine_cause();
      break_comm(e.code, e.message, e.culprit);
      return;
    }
    if (!dirty_.empty()) {
      progress_dirty();
      continue;
    }
    if (!completions_.empty()) {
      std::vector<uint64_t> work;
      work.swap(completions_);
      for (uint64_t c : work) {
        if (failure_.engine_cause()) break;
        if (Op* op = find_op(static_cast<uint32_t>(c >> 32)))
          step_done(*op, static_cast<uint32_t>(c));
      }
      continue;
    }
    break;
  }
}

void Engine::finish_ops() {
  // Each as it finishes: collectives run one at a time, so they complete in issue order; a
  // send or receive waiting for its peer holds back nothing issued after it.
  for (auto it = running_.begin(); it != running_.end();) {
    if (!(*it)->finished) {
      ++it;
      continue;
    }
    ++progress_count_;
    if ((*it)->request.finish) (*it)->request.finish();
    if ((*it)->request.timed)
      (*it)->request.timed(std::chrono::duration<double>(Clock::now() - (*it)->started).count());
    (*it)->work->complete();
    it = running_.erase(it);
    outstanding_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void Engine::break_comm(ErrorCode code, const std::string& message, int peer) {
  if (!failure_.begin_applying()) return;
  SHOAL_INFO("communicator breaks: " << message);
  // The out-of-band note first (shared memory): it reaches peers even over a connection that
  // is broken or mid-frame, where no abort frame can follow.
  for (auto& c : conns_)
    if (c) c->stream().post_abort(code, peer, message);
  for (auto& c : conns_)
    if (c) {
      if (!c->can_send_abort()) {
        c->abandon();
        c->stream().shutdown_write();  // the peer, if alive, learns at once that we stopped
      } else {
        c->send_abort_and_close(code, peer, message);
      }
    }
  for (auto& q : send_queue_) q.clear();
  for (auto& q : recv_queue_) q.clear();
  any_source_.clear();
  completions_.clear();
  dirty_.clear();
  if (code == ErrorCode::PeerFailure && peer >= 0 && peer < size_ && peer != rank_)
    peer_failed_[peer].store(true, std::memory_order_release);
  std::string where;
  int culprit;
  {
    std::lock_guard<std::mutex> lock(submit_mutex_);
    culprit = outer_culprit(peer, where);
  }
  const std::string who = "rank " + std::to_string(rank_) + ": ";
  for (auto& op : running_) {
    op->work->complete(
        make_error(code, who + describe(*op) + " failed: " + message + where, culprit));
    outstanding_.fetch_sub(1, std::memory_order_acq_rel);
  }
  running_.clear();
  flat_running_ = nullptr;
  std::deque<std::unique_ptr<Op>> queued;
  {
    std::lock_guard<std::mutex> lock(submit_mutex_);
    failure_.set_broken(unusable_error(rank_, code, message + where, culprit));
    queued.swap(submitted_);
  }
  for (auto* q : {&waiting_, &queued})
    for (auto& op : *q) {
      op->work->complete(
          make_error(code, who + describe(*op) + " was not started: " + message + where, culprit));
      outstanding_.fetch_sub(1, std::memory_order_acq_rel);
    }
  waiting_.clear();
  std::lock_guard<std::mutex> lock(listener_mutex_);
  if (break_listener_) break_listener_(code, message + where, culprit);
}

void Engine::check_timeouts() {
  if (running_.empty() || failure_.applied()) return;
  const auto now = Clock::now();
  if (watch_peers_ && now - last_watch_ >= kWatchInterval) {
    last_watch_ = now;
    if (watch_collective_peers()) return;
  }
  for (auto& op : running_) {
    if (now < op->deadline) continue;
    std::ostringstream os;
    os << describe(*op) << " did not finish within the "
       << std::chrono::duration<double>(timeout_).count() << " s timeout (SHOAL_TIMEOUT)";
    std::string waiting;
    for (auto& c : conns_)
      if (c && (c->expecting())) waiting += "; " + c->describe_state();
    for (int p = 0; p < size_; ++p)
      if (!recv_queue_[p].empty()) waiting += "; waiting to receive from rank " + std::to_string(p);
    if (!any_source_.empty()) waiting += "; waiting to receive from any rank";
    os << (waiting.empty() ? "" : waiting)
       << ". Are all ranks alive and issuing the same calls in the same order?";
    break_comm(ErrorCode::Timeout, os.str(), -1);
    return;
  }
}

// A collective that waits for frames a peer will never send (it issued another call, say the
// same reduce with another root) would wait until the timeout; on shared memory the peer's
// announcement tells at once. Returns true when it broke the communicator.
bool Engine::watch_collective_peers() {
  for (const auto& op : running_) {
    if (op->is_p2p() || op->flat) continue;
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      const auto [relative, signature] = announced_by(*flat_, q, op->seq);
      if (relative != 0 || signature == op->signature) continue;
      break_comm(
          ErrorCode::Mismatch,
          "rank " + std::to_string(q) +
              " entered this collective with different arguments: every rank must issue the same "
              "collectives with the same counts, types, ops and roots, in the same order",
          q);
      return true;
    }
  }
  return false;
}

bool Engine::check_heartbeats(Clock::time_point now) {
  if (heartbeat_limit_.count() == 0 || failure_.applied() || now < next_heartbeat_) return false;
  // This thread itself did not run for a while (the process was stopped, the host suspended):
  // the peers' heartbeats wait unread; judge nobody before they had an interval to arrive.
  const bool self_stalled = now - next_heartbeat_ > heartbeat_limit_ / 2;
  next_heartbeat_ = now + heartbeat_interval_;
  // The collective this rank waits in goes with the heartbeats (on_peer_in_collective).
  std::optional<std::pair<uint64_t, uint32_t>> in_collective;
  for (const auto& op : running_)
    if (!op->is_p2p()) in_collective.emplace(op->seq, op->signature);
  for (int p = 0; p < size_; ++p) {
    auto& c = conns_[p];
    if (!c || c->broken() || peer_closed(p)) continue;
    auto silent = c->silence(now);
    if (silent >= heartbeat_limit_) {  // read what may be waiting before judging
      c->progress();
      if (c->broken() || failure_.engine_cause()) continue;
      silent = c->silence(now);
    }
    if (silent >= heartbeat_limit_ && !self_stalled) {
      std::ostringstream os;
      os.precision(2);
      os << "rank " << p << " sent nothing for " << std::fixed
         << std::chrono::duration<double>(silent).count() << " s (heartbeats go every "
         << std::chrono::duration<double>(heartbeat_interval_).count()
         << " s; SHOAL_HEARTBEAT=" << std::chrono::duration<double>(heartbeat_limit_).count()
         << " s): it is frozen (stopped, swapping, stuck in the kernel) or cut off from rank "
         << rank_ << " by the network";
      peer_failed_[p].store(true, std::memory_order_release);
      break_comm(ErrorCode::PeerFailure, os.str(), p);
      return true;
    }
    c->keep_alive(now, heartbeat_interval_, in_collective);
    dirty_.push_back(p);
  }
  return false;
}

int Engine::next_timeout_ms() const {
  // The earliest of: the heartbeat check, the peers' watch, the running operations' deadlines.
  const bool beating = heartbeat_limit_.count() > 0 && !failure_.applied();
  if (running_.empty() && !beating) return -1;
  auto earliest = beating ? next_heartbeat_ : Clock::time_point::max();
  if (!running_.empty() && watch_peers_)
    earliest = std::min(earliest, last_watch_ + kWatchInterval);
  for (const auto& op : running_) earliest = std::min(earliest, op->deadline);
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(earliest - Clock::now()).count() + 1;
  return ms < 0 ? 0 : static_cast<int>(std::min<int64_t>(ms, 60000));
}

void Engine::loop() {
  epoll_event events[64];
  for (;;) {
    admit_new_ops();
    for (;;) {
      size_t before = running_.size() + waiting_.size();
      start_ready_ops();
      drain();
      finish_ops();
      if (running_.size() + waiting_.size() == before || waiting_.empty()) break;
    }
    check_timeouts();
    if (check_heartbeats(Clock::now())) continue;
    {
      std::lock_guard<std::mutex> lock(submit_mutex_);
      if (stopping_ && submitted_.empty() && waiting_.empty() && running_.empty()) break;
    }
    // Poll while an operation runs or one just finished (the next call usually follows at once),
    // then sleep. `sleeping_` is raised before the last look at the queue, so a submitter either
    // sees it and wakes us, or its operation is seen here.
    // Shared-memory streams signal nothing while we poll: look at them on every turn.
    if (!running_.empty())
      for (int p : polled_) dirty_.push_back(p);
    if (flat_running_ && !failure_.applied()) {
      advance_flat();
      drain();
      finish_ops();
    }
    // Poll (yielding the core: the caller's thread may share it) while things move; sleep once
    // nothing moved for the spin budget.
    int n = 0;
    const auto now = Clock::now();
    if (progress_count_ != progress_seen_) {
      progress_seen_ = progress_count_;
      last_activity_ = now;
    }
    if (now - last_activity_ < spin_budget()) {
      n = epoll_wait(epoll_fd_, events, 64, 0);
      if (n == 0) sched_yield();
    } else {
      sleeping_.store(true);
      if (sleeping_flag_) sleeping_flag_->store(1, std::memory_order_seq_cst);
      bool idle;
      {
        std::lock_guard<std::mutex> lock(submit_mutex_);
        idle = submitted_.empty();
      }
      for (int p : polled_) idle = idle && !conns_[p]->stream().ready();
      // A flat collective learns of its peers only by looking: sleep at most 1 ms then. Alone
      // in flight, it sleeps on the word it waits for, which the peer wakes when it publishes:
      // a call of many rounds does not lose up to 1 ms a round (a send or receive submitted
      // meanwhile waits up to that 1 ms; nothing else can start before the collective ends).
      int wait_ms = next_timeout_ms();
      if (flat_running_) wait_ms = wait_ms < 0 ? 1 : std::min(wait_ms, 1);
      if (idle && flat_running_ && running_.size() == 1 && wait_ms > 0) {
        flat_running_->flat->sleep(std::chrono::milliseconds(wait_ms));
        n = epoll_wait(epoll_fd_, events, 64, 0);
      } else if (idle) {
        n = epoll_wait(epoll_fd_, events, 64, wait_ms);
      }
      if (sleeping_flag_) sleeping_flag_->store(0, std::memory_order_relaxed);
      sleeping_.store(false);
      for (int p : polled_) dirty_.push_back(p);
    }
    if (n > 0) last_activity_ = Clock::now();
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u32 == kWakeToken) {
        uint64_t v;
        while (read(wake_fd_, &v, sizeof v) > 0) {
        }
      } else {
        const int peer = static_cast<int>(events[i].data.u32);
        conns_[peer]->stream().notify_readable();
        dirty_.push_back(peer);
      }
    }
  }
  if (!failure_.applied())
    for (auto& c : conns_)
      if (c) c->say_goodbye(1000);
}

}  // namespace shoal::comm
