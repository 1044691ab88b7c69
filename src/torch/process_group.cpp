// ProcessGroupShoal: see process_group.hpp. This file: creation, options, closing, and the
// elastic group operations (shrink, split, grow, join, coalescing). The collectives are in
// collectives/ (one file each), tensors' staging in tensors.cpp, completion in flight.cpp.
#include "process_group.hpp"

#include <Python.h>  // first, as Python asks; only to let go of the GIL in the destructor

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "flight.hpp"
#include "shoal/error.hpp"
#include "store_adapter.hpp"
#include "tensors.hpp"

namespace shoal::torch_glue {

using c10d::OpType;

namespace {

/// shoal's settings for a group: an explicit SHOAL_TIMEOUT wins; otherwise torch's timeout
/// (init_process_group(timeout=...)).
shoal::Options comm_options(std::chrono::milliseconds timeout) {
  shoal::Options options;
  if (!shoal::config::is_set("SHOAL_TIMEOUT")) options.timeout = timeout;
  return options;
}

/// The store below every c10d::PrefixStore torch put around it (the job's TCPStore/FileStore).
c10::intrusive_ptr<c10d::Store> root_of(c10::intrusive_ptr<c10d::Store> s) {
  for (int depth = 0; depth < 64 && s; ++depth) {
    auto* prefix = dynamic_cast<c10d::PrefixStore*>(s.get());
    if (!prefix) break;
    s = prefix->getUnderlyingStore();
  }
  return s;
}

/// Where grow(name) and join(name) meet in the job's store. The torch glue's own keys, in the
/// bottom store: the group's store carries prefixes (torch's, or shrink's) a joiner cannot know.
std::string grow_base(const std::string& name) { return "shoal_torch/grow/" + name; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// ProcessGroupShoal: creation, queue, completion

c10::intrusive_ptr<ShoalOptions> ShoalOptions::from(
    const c10::intrusive_ptr<c10d::Backend::Options>& opts, const ShoalOptions& inherited) {
  if (auto* mine = dynamic_cast<const ShoalOptions*>(opts.get()))
    return c10::make_intrusive<ShoalOptions>(*mine);
  auto copy = c10::make_intrusive<ShoalOptions>(inherited);
  if (opts && opts->timeout.count() > 0) copy->timeout = opts->timeout;
  return copy;
}

ProcessGroupShoal::ProcessGroupShoal(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                     int size, c10::intrusive_ptr<ShoalOptions> options)
    : BackendBase(rank, size),
      store_(store),
      root_(root_of(store)),
      options_(std::move(options)),
      timeout_(options_->timeout) {
  auto adapter = std::make_shared<C10dStore>(store, timeout_);
  comm_.emplace(shoal::Communicator::create(adapter, rank, size, comm_options(timeout_)));
  start();
}

ProcessGroupShoal::ProcessGroupShoal(const c10::intrusive_ptr<c10d::Store>& store,
                                     const c10::intrusive_ptr<c10d::Store>& root,
                                     c10::intrusive_ptr<ShoalOptions> options,
                                     shoal::Communicator&& comm)
    : BackendBase(comm.rank(), comm.size()),
      store_(store),
      root_(root),
      options_(std::move(options)),
      timeout_(options_->timeout) {
  comm_.emplace(std::move(comm));
  start();
}

void ProcessGroupShoal::start() {
  all_reduce_call_.algorithm = options_->all_reduce_algorithm;
  all_gather_call_.algorithm = options_->all_gather_algorithm;
  reduce_scatter_call_.algorithm = options_->reduce_scatter_algorithm;
}

// Shutting down, destroying and aborting are one: work still pending then is work the caller
// never waited for, and waiting for it (a peer that never joins) only delays the failure.
ProcessGroupShoal::~ProcessGroupShoal() { close(); }
void ProcessGroupShoal::shutdown() { close(); }
void ProcessGroupShoal::abort() { close(); }

void ProcessGroupShoal::close() {
  std::lock_guard<std::mutex> closing(close_mutex_);
  {
    std::lock_guard<std::mutex> lock(issue_mutex_);
    if (closed_) return;
    closed_ = true;  // from here run() raises instead of issuing
  }
  // destroy_process_group() drops the group with the GIL held, while the completion threads may
  // need it (a callback, freeing a tensor whose Python object they kept alive): let go of it.
  PyThreadState* saved = (Py_IsInitialized() && PyGILState_Check()) ? PyEval_SaveThread() : nullptr;
  if (!outstanding_->wait_for(std::chrono::milliseconds{0})) {
    // Work that no peer joins, or that the caller gave up on: fail it now, here and on every
    // rank shoal reaches, instead of waiting for the timeout.
    comm_->abort();
    // Every operation has now failed; only a completion callback that never returns is left,
    // and it does not use the communicator: say so rather than hang the caller.
    const auto bound = std::min<std::chrono::milliseconds>(timeout_, std::chrono::minutes(1));
    if (!outstanding_->wait_for(bound))
      std::fprintf(stderr,
                   "shoal (torch backend): rank %d: %d operation(s) still completing %lld ms "
                   "after the group was aborted (a callback that does not return?)\n",
                   getRank(), outstanding_->count(), static_cast<long long>(bound.count()));
  }
  comm_.reset();  // says goodbye to the peers
  if (saved) PyEval_RestoreThread(saved);
}

shoal::Communicator& ProcessGroupShoal::open_comm(const char* what) {
  if (closed_ || !comm_) fail(std::string(what) + ": the process group was shut down or aborted");
  return *comm_;
}

c10::intrusive_ptr<BackendBase> ProcessGroupShoal::create(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout, const c10::intrusive_ptr<c10d::Backend::Options>& options) {
  auto opts = ShoalOptions::from(options, ShoalOptions(timeout));
  if (!options || options->timeout.count() <= 0) opts->timeout = timeout;
  return c10::make_intrusive<ProcessGroupShoal>(store, rank, size, std::move(opts));
}

std::string ProcessGroupShoal::describe() const {
  return comm_ ? comm_->describe() : "shoal process group (shut down or aborted)";
}

std::vector<double> ProcessGroupShoal::measure_links() {
  return open_comm("measure_links").measure_links();
}

std::vector<int> ProcessGroupShoal::ring_order() { return open_comm("ring_order").ring_order(); }

// ---------------------------------------------------------------------------------------------
// elastic jobs: shrink, grow, join

c10::intrusive_ptr<ProcessGroupShoal> ProcessGroupShoal::shrink() {
  // This group's operations are not waited for: on a broken communicator they fail by
  // themselves, and the new communicator shares nothing with them.
  std::unique_lock<std::mutex> lock(issue_mutex_);  // no new operation on this group meanwhile
  const int n = ++shrinks_;
  shoal::Communicator comm = open_comm("shrink").shrink();
  lock.unlock();
  // The survivors call shrink() on this group equally often: n names the new group's keys.
  auto store = c10::make_intrusive<c10d::PrefixStore>("shoal_shrink_" + std::to_string(n), store_);
  return c10::make_intrusive<ProcessGroupShoal>(store, root_, options_->clone_shoal(),
                                                std::move(comm));
}

c10::intrusive_ptr<BackendBase> ProcessGroupShoal::shrink(
    const std::vector<int64_t>& ranks_to_exclude, int shrink_flags,
    const c10::intrusive_ptr<Options>& opts) {
  std::vector<int> exclude;
  for (int64_t r : ranks_to_exclude) {
    if (r < 0 || r >= getSize())
      fail("shrink: excluded rank " + std::to_string(r) + " is outside [0, " +
           std::to_string(getSize()) + ")");
    exclude.push_back(static_cast<int>(r));
  }
  constexpr int kShrinkAbort = 0x01;  // torch.distributed.SHRINK_ABORT
  std::unique_lock<std::mutex> lock(issue_mutex_);
  auto& comm = open_comm("shrink");
  if (shrink_flags & kShrinkAbort) comm.abort();
  const int n = ++shrinks_;
  shoal::Communicator rest = comm.shrink(exclude);
  lock.unlock();
  auto store = c10::make_intrusive<c10d::PrefixStore>("shoal_shrink_" + std::to_string(n), store_);
  return c10::make_intrusive<ProcessGroupShoal>(store, root_, ShoalOptions::from(opts, *options_),
                                                std::move(rest));
}

c10::intrusive_ptr<BackendBase> ProcessGroupShoal::split(
    const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
    const c10::intrusive_ptr<Options>& opts) {
  std::vector<bool> seen(static_cast<size_t>(getSize()), false);
  for (int r : ranks) {
    if (r < 0 || r >= getSize())
      fail("split: rank " + std::to_string(r) + " is outside [0, " + std::to_string(getSize()) +
           ")");
    if (seen[static_cast<size_t>(r)]) fail("split: rank " + std::to_string(r) + " appears twice");
    seen[static_cast<size_t>(r)] = true;
  }
  // Groups are disjoint, so their smallest rank tells them apart; the position is the new rank.
  const auto me = std::find(ranks.begin(), ranks.end(), getRank());
  const int color = me == ranks.end() ? shoal::Communicator::kNoColor
                                      : *std::min_element(ranks.begin(), ranks.end());
  std::unique_lock<std::mutex> lock(issue_mutex_);
  shoal::Communicator child = open_comm("split").split(color, static_cast<int>(me - ranks.begin()));
  lock.unlock();
  if (!child.valid()) return nullptr;
  return c10::make_intrusive<ProcessGroupShoal>(store, root_, ShoalOptions::from(opts, *options_),
                                                std::move(child));
}

void ProcessGroupShoal::startCoalescing() {
  std::lock_guard<std::mutex> lock(issue_mutex_);
  if (coalescing_) fail("startCoalescing: already coalescing (endCoalescing was not called)");
  coalescing_.emplace();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::endCoalescing() {
  std::vector<c10::intrusive_ptr<WorkShoal>> batch;
  {
    std::lock_guard<std::mutex> lock(issue_mutex_);
    if (!coalescing_) fail("endCoalescing: startCoalescing was not called");
    batch = std::move(*coalescing_);
    coalescing_.reset();
  }
  std::vector<at::Tensor> outputs;
  for (auto& w : batch)
    for (auto& t : w->result()) outputs.push_back(t);
  return run(OpType::COALESCED, "shoal:coalesced", {}, std::move(outputs),
             [&](Op& op) { op.after = std::move(batch); });
}

c10::intrusive_ptr<ProcessGroupShoal> ProcessGroupShoal::grow(int joining,
                                                              const std::string& name) {
  if (joining < 0) fail("grow: " + std::to_string(joining) + " joining processes");
  if (name.empty()) fail("grow: the name that joining processes pass to join() is empty");
  if (!root_) fail("grow: this group has no store to meet the joining processes in");
  const std::string base = grow_base(name);
  std::shared_ptr<shoal::Store> root = std::make_shared<C10dStore>(root_, timeout_);
  std::lock_guard<std::mutex> lock(issue_mutex_);
  if (getRank() == 0) {
    if (root->check({base + "/sizes"}))
      fail("grow: the name '" + name +
           "' was used by an earlier grow() in this job's store: pass a new one");
    root->set(base + "/sizes", std::to_string(getSize()) + "," + std::to_string(joining));
  }
  auto comm =
      shoal::Communicator::create(std::make_shared<shoal::PrefixStore>(base + "/comm", root),
                                  getRank(), getSize() + joining, comm_options(timeout_));
  auto store = c10::make_intrusive<c10d::PrefixStore>(base + "/pg", root_);
  return c10::make_intrusive<ProcessGroupShoal>(store, root_, options_->clone_shoal(),
                                                std::move(comm));
}

c10::intrusive_ptr<ProcessGroupShoal> ProcessGroupShoal::join(
    const c10::intrusive_ptr<c10d::Store>& store, const std::string& name,
    std::chrono::milliseconds timeout) {
  if (!store) fail("join: needs the job's store");
  if (name.empty()) fail("join: empty name (pass the one the job gives grow())");
  const auto root_store = root_of(store);
  const std::string base = grow_base(name);
  std::shared_ptr<shoal::Store> root = std::make_shared<C10dStore>(root_store, timeout);
  std::string sizes;
  try {
    sizes = root->get_string(base + "/sizes");  // waits for the job's grow(), up to timeout
  } catch (const shoal::TimeoutError& e) {
    throw shoal::TimeoutError("shoal (torch backend): join '" + name +
                              "': the job did not call grow(joining, '" + name + "') within " +
                              std::to_string(timeout.count()) + " ms (" + e.what() + ")");
  }
  const int64_t index = root->add(base + "/joined", 1) - 1;
  const auto comma = sizes.find(',');
  if (comma == std::string::npos)
    throw shoal::InternalError("shoal (torch backend): join '" + name + "': malformed sizes '" +
                               sizes + "'");
  const int old_size = std::stoi(sizes.substr(0, comma)),
            joining = std::stoi(sizes.substr(comma + 1));
  if (index >= joining)
    fail("join '" + name + "': the job admits " + std::to_string(joining) +
         " new process(es) and " + std::to_string(index + 1) +
         " tried to join: start as many joiners as grow() was told");
  auto comm = shoal::Communicator::create(
      std::make_shared<shoal::PrefixStore>(base + "/comm", root),
      old_size + static_cast<int>(index), old_size + joining, comm_options(timeout));
  auto pg_store = c10::make_intrusive<c10d::PrefixStore>(base + "/pg", root_store);
  return c10::make_intrusive<ProcessGroupShoal>(
      pg_store, root_store, c10::make_intrusive<ShoalOptions>(timeout), std::move(comm));
}

}  // namespace shoal::torch_glue
