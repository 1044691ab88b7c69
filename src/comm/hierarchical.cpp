#include "comm/hierarchical.hpp"

#include <sched.h>

#include <algorithm>
#include <cstring>

#include "algorithms/hierarchy.hpp"
#include "comm/comm_impl.hpp"
#include "core/check.hpp"
#include "core/reduce.hpp"

namespace shoal {

using algorithms::Collective;

namespace comm {

namespace {
// The tag of the phases below that are point-to-point: their frames stay in order with the
// groups' collectives (a rank of the group in another call fails at once, not at the timeout).
constexpr int kPhaseTag = static_cast<int>(transport::kOrderedP2pTag);
}  // namespace

bool hierarchy_fits(const Topology& t) {
  std::vector<int> per_host(t.num_hosts, 0);
  for (int h : t.host_of) ++per_host[h];
  return !per_host.empty() &&
         std::all_of(per_host.begin(), per_host.end(), [&](int n) { return n == per_host[0]; }) &&
         algorithms::hierarchy_fits(static_cast<int>(t.host_of.size()), per_host[0]);
}

Hierarchy::Hierarchy(shoal::detail::CommImpl& parent) : parent_(parent) {
  const auto& t = parent.topology;
  ranks_of_host_.resize(t.num_hosts);
  for (int r = 0; r < parent.size; ++r) ranks_of_host_[t.host_of[r]].push_back(r);
  host_ = t.host_of[parent.rank];
  local_rank_ = t.local_rank;
  hosts_ = t.num_hosts;
  per_host_ = t.local_size;
}

Hierarchy::~Hierarchy() {
  parent_.engine->set_break_listener(nullptr);  // waits for a call in progress
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Hierarchy::ensure_groups() {
  if (local_.valid()) return;
  // Local ranks by global rank and hosts by first rank, as ranks_of_host_ numbers them.
  local_ = parent_.split(host_, parent_.rank);
  aligned_ = parent_.split(local_rank_, host_);
  SHOAL_CHECK(
      local_.size() == per_host_ && local_.rank() == local_rank_ && aligned_.size() == hosts_ &&
          aligned_.rank() == host_,
      Internal,
      "rank " << parent_.rank << ": hierarchical sub-communicators do not match the topology");
  // Errors of the groups name the culprit by its rank in the parent (what the caller knows).
  std::vector<int> aligned_ranks;
  for (int h = 0; h < hosts_; ++h) aligned_ranks.push_back(global(h, local_rank_));
  auto list = [](const std::vector<int>& ranks) {
    std::string s;
    for (int r : ranks) {
      if (!s.empty()) s += ',';
      s += std::to_string(r);
    }
    return s;
  };
  detail::Internals::of(local_).engine->set_outer_names("the hierarchy's intra-host group (ranks " +
                                                            list(ranks_of_host_[host_]) +
                                                            " of the communicator)",
                                                        ranks_of_host_[host_]);
  detail::Internals::of(aligned_).engine->set_outer_names(
      "the hierarchy's inter-host group (ranks " + list(aligned_ranks) + " of the communicator)",
      aligned_ranks);
  // The parent breaking (a failure it saw, abort()) breaks the groups: a hierarchical call
  // waiting there fails now, not at its timeout.
  parent_.engine->set_break_listener([this, aligned_ranks](
                                         ErrorCode code, const std::string& message, int culprit) {
    auto index_of = [culprit](const std::vector<int>& ranks) {
      const auto it = std::find(ranks.begin(), ranks.end(), culprit);
      return it == ranks.end() ? Engine::outside_culprit(culprit)
                               : static_cast<int>(it - ranks.begin());
    };
    const std::string why = "the communicator of the hierarchical collective broke: " + message;
    detail::Internals::of(local_).engine->break_from_caller(code, why,
                                                            index_of(ranks_of_host_[host_]));
    detail::Internals::of(aligned_).engine->break_from_caller(code, why, index_of(aligned_ranks));
  });
}

// The parent's earlier operations finish before a hierarchical one starts (issue order; they
// may touch the same buffers). Later parent calls are held back by fence(), so idle stays idle.
void Hierarchy::wait_parent_idle() const {
  for (int i = 0; !parent_.engine->idle(); ++i) {
    if (i < 200)
      sched_yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(std::min(1000, 10 * (i - 199))));
  }
}

static Work finished_work(std::exception_ptr e = nullptr) {
  auto s = std::make_shared<shoal::detail::WorkState>();
  s->complete(std::move(e));
  return Work(s);
}

Work Hierarchy::run(const Request& call) {
  ensure_groups();
  if (call.blocking && !pending()) {
    wait_parent_idle();
    try {
      execute(call);
    } catch (...) {
      return finished_work(std::current_exception());
    }
    return finished_work();
  }
  auto state = std::make_shared<shoal::detail::WorkState>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.fetch_add(1, std::memory_order_acq_rel);
    queue_.push_back({call, state});
    if (!thread_.joinable()) thread_ = std::thread([this] { worker(); });
  }
  cv_.notify_all();
  return Work(state);
}

void Hierarchy::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
}

void Hierarchy::worker() {
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued has run
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    try {
      wait_parent_idle();
      execute(item.call);
    } catch (...) {
      error = std::current_exception();
    }
    item.state->complete(error);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
    cv_.notify_all();
  }
}

// What every rank must agree on about a hierarchical call, whatever phases it runs.
static uint32_t call_signature(const Request& c, int size) {
  algorithms::CollectiveArgs a;
  a.collective = c.collective;
  a.dtype = c.dtype;
  a.op = c.op;
  a.count = c.count;
  a.size = size;
  return algorithms::signature(a);
}

void Hierarchy::execute(const Request& call) {
  calls_.fetch_add(1, std::memory_order_relaxed);
  // The phases alone miss a difference every rank of a host shares (sum on one host, avg on
  // another: both run sum phases), so each group's next call compares the whole call too.
  const uint32_t whole = call_signature(call, parent_.size);
  detail::Internals::of(local_).check_with_next_call(whole);
  detail::Internals::of(aligned_).check_with_next_call(whole);
  try {
    switch (call.collective) {
      case Collective::all_reduce:
        all_reduce(call);
        break;
      case Collective::all_gather:
        all_gather(call);
        break;
      case Collective::reduce_scatter:
        reduce_scatter(call);
        break;
      default:
        SHOAL_THROW(Internal, "no hierarchical " << algorithms::to_string(call.collective));
    }
  } catch (const Error& e) {
    // The parent broke first (abort(), a failure it saw): its error is the cause.
    if (parent_.engine->broken()) std::rethrow_exception(parent_.engine->broken_error());
    // A phase failed half way: peers may wait for frames of a later phase. Break both groups
    // so that they fail now (abort frames) rather than at their timeout, and the parent, whose
    // collective this was (its next call must not run as if nothing happened). The error
    // already names the culprit by its parent rank.
    for (Communicator* c : {&local_, &aligned_})
      if (c->valid())
        detail::Internals::of(*c).engine->break_from_caller(e.code(), e.what(),
                                                            Engine::outside_culprit(e.peer()));
    parent_.engine->break_from_caller(e.code(), e.what(), e.peer());
    throw;
  }
}

// Waits for every Work, then rethrows the first error: no buffer is left in use on return.
static void wait_all(std::vector<Work>& works) {
  std::exception_ptr first;
  for (auto& w : works) {
    try {
      w.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  works.clear();
  if (first) std::rethrow_exception(first);
}

// intra-host reduce_scatter -> all_reduce of each rank's slice on its rank-aligned group ->
// intra-host all_gather, all in place in the output; the count % ranks-per-host elements left
// over go through an all_reduce on each group (tiny: fewer than ranks per host).
void Hierarchy::all_reduce(const Request& c) {
  const size_t es = size_of(c.dtype);
  const uint64_t q = c.count / per_host_, rem = c.count % per_host_;
  const auto* in = static_cast<const uint8_t*>(c.input);
  auto* out = static_cast<uint8_t*>(c.output);
  // avg is summed in both phases and divided once, by the whole world, as the flat path does.
  const ReduceOp op = c.op == ReduceOp::avg ? ReduceOp::sum : c.op;
  const int world = parent_.size;
  if (q > 0) {
    uint8_t* slice = out + local_rank_ * q * es;
    local_.reduce_scatter(in, slice, q, c.dtype, op);  // in place when in == out
    aligned_.all_reduce(slice, q, c.dtype, op);
    if (c.op == ReduceOp::avg) kernels::finalize_avg(slice, q, c.dtype, world);
    local_.all_gather(slice, out, q, c.dtype);  // the in-place form: slice is block local_rank_
  }
  if (rem > 0) {
    const uint64_t at = per_host_ * q * es;
    local_.all_reduce(in + at, out + at, rem, c.dtype, op);
    aligned_.all_reduce(out + at, rem, c.dtype, op);
    if (c.op == ReduceOp::avg) kernels::finalize_avg(out + at, rem, c.dtype, world);
  }
}

// Inter-host first: each rank exchanges its block with its rank-aligned peers, receiving
// straight into the final places (any layout: no shuffle copy); then it forwards each block,
// as it arrives, to the other ranks of its host, which receive into the final places too.
void Hierarchy::all_gather(const Request& c) {
  const size_t bytes = c.count * size_of(c.dtype);
  const auto* in = static_cast<const uint8_t*>(c.input);
  auto* out = static_cast<uint8_t*>(c.output);
  auto block = [&](int h, int l) { return out + static_cast<size_t>(global(h, l)) * bytes; };
  if (block(host_, local_rank_) != in) std::memcpy(block(host_, local_rank_), in, bytes);
  // Host order of the blocks a rank forwards: its own host, then as the inter receives are
  // posted. Ranks of one host agree on it, so sends and receives match pair by pair.
  auto nth_host = [&](int k) { return (host_ - k + hosts_) % hosts_; };
  std::vector<Work> inter, intra;
  for (int k = 1; k < hosts_; ++k)
    inter.push_back(aligned_.recv_async(block(nth_host(k), local_rank_), c.count, c.dtype,
                                        nth_host(k), kPhaseTag));
  for (int k = 1; k < hosts_; ++k)
    inter.push_back(aligned_.send_async(in, c.count, c.dtype, (host_ + k) % hosts_, kPhaseTag));
  for (int j = 1; j < per_host_; ++j) {
    const int from = (local_rank_ - j + per_host_) % per_host_;
    for (int k = 0; k < hosts_; ++k)
      intra.push_back(
          local_.recv_async(block(nth_host(k), from), c.count, c.dtype, from, kPhaseTag));
  }
  std::exception_ptr error;
  for (int k = 0; k < hosts_ && !error; ++k) {
    try {
      if (k > 0) inter[k - 1].wait();
    } catch (...) {
      error = std::current_exception();
      break;
    }
    for (int j = 1; j < per_host_; ++j)
      intra.push_back(local_.send_async(block(nth_host(k), local_rank_), c.count, c.dtype,
                                        (local_rank_ + j) % per_host_, kPhaseTag));
  }
  if (error) {
    // The receives of this host's peers cannot complete: fail them now (execute() breaks the
    // groups), then let every Work finish before the buffers are given back.
    detail::Internals::of(local_).engine->break_from_caller(ErrorCode::PeerFailure,
                                                            "hierarchical all_gather failed", -1);
    try {
      wait_all(inter);
    } catch (...) {
    }
    try {
      wait_all(intra);
    } catch (...) {
    }
    std::rethrow_exception(error);
  }
  wait_all(inter);
  wait_all(intra);
}

// Intra-host first: each rank receives from every other rank of its host the blocks this rank
// is aligned with (block (h, its local rank) for every host h), straight from their inputs, and
// reduces them with its own; then a reduce_scatter on its rank-aligned group leaves its block.
void Hierarchy::reduce_scatter(const Request& c) {
  const size_t es = size_of(c.dtype), bytes = c.count * es, host_bytes = hosts_ * bytes;
  const auto* in = static_cast<const uint8_t*>(c.input);
  const ReduceOp op = c.op == ReduceOp::avg ? ReduceOp::sum : c.op;
  auto block = [&](int h, int l) { return in + static_cast<size_t>(global(h, l)) * bytes; };
  // acc (one block per host) then one receive area per other local rank.
  if (scratch_.size() < per_host_ * host_bytes) scratch_.resize(per_host_ * host_bytes);
  uint8_t* acc = scratch_.data();
  auto area = [&](int j) { return acc + j * host_bytes; };  // j = 1 .. per_host_ - 1
  std::vector<std::vector<Work>> recvs(per_host_);
  std::vector<Work> sends;
  for (int j = 1; j < per_host_; ++j) {
    const int from = (local_rank_ - j + per_host_) % per_host_;
    for (int h = 0; h < hosts_; ++h)
      recvs[j].push_back(local_.recv_async(area(j) + h * bytes, c.count, c.dtype, from, kPhaseTag));
  }
  for (int j = 1; j < per_host_; ++j) {
    const int to = (local_rank_ + j) % per_host_;
    for (int h = 0; h < hosts_; ++h)
      sends.push_back(local_.send_async(block(h, to), c.count, c.dtype, to, kPhaseTag));
  }
  std::exception_ptr error;
  for (int j = 1; j < per_host_; ++j) {
    try {
      wait_all(recvs[j]);
    } catch (...) {
      if (!error) error = std::current_exception();
      continue;
    }
    if (error) continue;
    if (j == 1) {
      for (int h = 0; h < hosts_; ++h)
        kernels::reduce(acc + h * bytes, block(h, local_rank_), area(1) + h * bytes, c.count,
                        c.dtype, op);
    } else {
      kernels::reduce_into(acc, area(j), hosts_ * c.count, c.dtype, op);
    }
  }
  try {
    wait_all(sends);
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  if (error) std::rethrow_exception(error);
  aligned_.reduce_scatter(acc, c.output, c.count, c.dtype, op);
  if (c.op == ReduceOp::avg) kernels::finalize_avg(c.output, c.count, c.dtype, parent_.size);
}

}  // namespace comm

}  // namespace shoal
