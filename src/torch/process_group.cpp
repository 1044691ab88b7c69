// ProcessGroupShoal: see process_group.hpp. Everything torch-specific about staging tensors
// (dtype mapping, contiguity, copy-back) lives in this file.
#include "process_group.hpp"

#include <Python.h>  // first, as Python asks; only to let go of the GIL in the destructor
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "core/config.hpp"
#include "device_copy_engine.hpp"
#include "shoal/error.hpp"
#include "staging/pipeline.hpp"
#include "store_adapter.hpp"

namespace shoal::torch_glue {

using c10d::OpType;
using Op = ProcessGroupShoal::Op;

namespace {

[[noreturn]] void fail(const std::string& what) {
  throw shoal::InvalidArgumentError("shoal (torch backend): " + what);
}

std::string dtype_name(at::ScalarType t) { return c10::toString(t); }

}  // namespace

/// How a tensor travels through shoal: element type, op, elements per torch element, and the
/// dtype of the staging buffer (the tensor's own unless shoal needs a wider one).
struct Spec {
  shoal::DataType dt = shoal::DataType::uint8;
  shoal::ReduceOp op = shoal::ReduceOp::sum;
  int64_t factor = 1;
  at::ScalarType work = at::kByte;
  std::optional<double> premul;  // PREMUL_SUM: inputs are scaled by this before the sum
};

namespace {

std::optional<shoal::DataType> native_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return shoal::DataType::float32;
    case at::kDouble:
      return shoal::DataType::float64;
    case at::kHalf:
      return shoal::DataType::float16;
    case at::kBFloat16:
      return shoal::DataType::bfloat16;
    case at::kChar:
      return shoal::DataType::int8;
    case at::kByte:
      return shoal::DataType::uint8;
    case at::kInt:
      return shoal::DataType::int32;
    case at::kLong:
      return shoal::DataType::int64;
    default:
      return std::nullopt;
  }
}

/// `staged`: the call takes device (CUDA) tensors too, through pinned host buffers.
void check_tensor(const at::Tensor& t, const char* op, bool staged = false) {
  if (!t.defined()) fail(std::string(op) + ": undefined tensor");
  if (!t.device().is_cpu() && !(staged && t.device().is_cuda()))
    fail(std::string(op) + ": tensors must be on the CPU, got one on " + t.device().str() +
         " (CUDA tensors: all_reduce, broadcast, all_gather_into_tensor and "
         "reduce_scatter_tensor; docs/torch.md)");
  if (t.is_sparse()) fail(std::string(op) + ": sparse tensors are not supported");
}

/// Data movement: any dtype travels, as bytes when shoal has no type for it.
Spec move_spec(const at::Tensor& t) {
  Spec s;
  s.work = t.scalar_type();
  if (auto dt = native_type(t.scalar_type())) {
    s.dt = *dt;
  } else {
    s.dt = shoal::DataType::uint8;
    s.factor = static_cast<int64_t>(t.element_size());
  }
  return s;
}

const char* op_name(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "UNKNOWN";
  }
}

/// Reductions: shoal's ops on its eight types; bool as uint8 (SUM = MAX, PRODUCT = MIN, and
/// the bitwise ops on 0/1), int16 widened to int32, complex SUM/AVG as pairs of reals.
Spec reduce_spec(const at::Tensor& t, const c10d::ReduceOp& reduce_op, const char* opname) {
  const auto rop = reduce_op.op_;
  const auto type = t.scalar_type();
  Spec s;
  s.work = type;
  auto unsupported = [&](const std::string& why) {
    fail(std::string(opname) + ": ReduceOp." + op_name(rop) + " on " + dtype_name(type) +
         " is not supported: " + why);
  };
  if (type == at::kBool) {
    s.dt = shoal::DataType::uint8;
    switch (rop) {
      case c10d::ReduceOp::SUM:
      case c10d::ReduceOp::MAX:
        s.op = shoal::ReduceOp::max;
        break;
      case c10d::ReduceOp::PRODUCT:
      case c10d::ReduceOp::MIN:
        s.op = shoal::ReduceOp::min;
        break;
      case c10d::ReduceOp::BAND:
        s.op = shoal::ReduceOp::band;
        break;
      case c10d::ReduceOp::BOR:
        s.op = shoal::ReduceOp::bor;
        break;
      case c10d::ReduceOp::BXOR:
        s.op = shoal::ReduceOp::bxor;
        break;
      default:
        unsupported("bool tensors reduce with SUM, PRODUCT, MIN, MAX, BAND, BOR or BXOR");
    }
    return s;
  }
  switch (rop) {
    case c10d::ReduceOp::SUM:
      s.op = shoal::ReduceOp::sum;
      break;
    case c10d::ReduceOp::AVG:
      s.op = shoal::ReduceOp::avg;
      break;
    case c10d::ReduceOp::PRODUCT:
      s.op = shoal::ReduceOp::prod;
      break;
    case c10d::ReduceOp::MIN:
      s.op = shoal::ReduceOp::min;
      break;
    case c10d::ReduceOp::MAX:
      s.op = shoal::ReduceOp::max;
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      if (!at::isFloatingType(type)) unsupported("PREMUL_SUM scales floating-point tensors only");
      auto* sup = dynamic_cast<c10d::PreMulSumSupplement*>(reduce_op.supplement_.get());
      if (!sup)
        unsupported(
            "the op carries no factor (make it with torch.distributed._make_nccl_premul_sum)");
      s.op = shoal::ReduceOp::sum;
      s.premul =
          sup->tensor_factor.defined() ? sup->tensor_factor.item<double>() : sup->double_factor;
      break;
    }
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      if (at::isFloatingType(type) || at::isComplexType(type))
        unsupported("bitwise reductions are defined for integer and bool tensors only");
      s.op = rop == c10d::ReduceOp::BAND  ? shoal::ReduceOp::band
             : rop == c10d::ReduceOp::BOR ? shoal::ReduceOp::bor
                                          : shoal::ReduceOp::bxor;
      break;
    default:
      unsupported("shoal supports SUM, PRODUCT, MIN, MAX, AVG, PREMUL_SUM, BAND, BOR, BXOR");
  }
  if (auto dt = native_type(type)) {
    s.dt = *dt;
  } else if (type == at::kShort) {
    s.dt = shoal::DataType::int32;  // int16 reduces in int32 and narrows back (wraps like int16)
    s.work = at::kInt;
  } else if (type == at::kComplexFloat || type == at::kComplexDouble) {
    if (s.op != shoal::ReduceOp::sum && s.op != shoal::ReduceOp::avg)
      unsupported("complex tensors reduce with SUM or AVG only");
    s.dt = type == at::kComplexFloat ? shoal::DataType::float32 : shoal::DataType::float64;
    s.factor = 2;
  } else {
    unsupported(
        "shoal reduces float32/64, float16, bfloat16, int8/16/32/64, uint8, bool and complex");
  }
  return s;
}

size_t count_of(const at::Tensor& buf, const Spec& s) {
  return static_cast<size_t>(buf.numel() * s.factor);
}

/// A contiguous tensor of dtype `work` holding t's values: t itself when it already is one.
at::Tensor stage_in(Op& op, const at::Tensor& t, at::ScalarType work) {
  if (t.is_contiguous() && t.scalar_type() == work) {
    op.keep.push_back(t);
    return t;
  }
  auto b = at::empty(t.sizes(), t.options().dtype(work));
  b.copy_(t);
  op.keep.push_back(b);
  return b;
}

/// Like stage_in, for a tensor the operation writes: a staging copy is copied back into t
/// (converting the dtype) once the operation succeeded.
at::Tensor stage_out(Op& op, const at::Tensor& t, at::ScalarType work, bool copy_in,
                     bool copy_back = true) {
  if (t.is_contiguous() && t.scalar_type() == work) {
    op.keep.push_back(t);
    return t;
  }
  auto b = at::empty(t.sizes(), t.options().dtype(work));
  if (copy_in) b.copy_(t);
  op.keep.push_back(b);
  if (copy_back) op.finish.push_back([t, b]() { t.copy_(b); });
  return b;
}

/// The buffer a reduction reads (and, for in-place calls, writes): stage_out's, or under
/// PREMUL_SUM a scaled copy, so that the caller's tensor keeps its values if the call fails.
at::Tensor stage_reduce(Op& op, const at::Tensor& t, const Spec& s, bool copy_back = true) {
  if (!s.premul) return stage_out(op, t, s.work, true, copy_back);
  auto b = at::empty(t.sizes(), t.options().dtype(s.work));
  b.copy_(t);
  b.mul_(*s.premul);
  op.keep.push_back(b);
  if (copy_back) op.finish.push_back([t, b]() { t.copy_(b); });
  return b;
}

/// The buffer a reduction only reads: the tensor itself where it can be, a scaled copy under
/// PREMUL_SUM.
at::Tensor stage_reduce_in(Op& op, const at::Tensor& t, const Spec& s) {
  return s.premul ? stage_reduce(op, t, s, false) : stage_in(op, t, s.work);
}

/// `big` (an all_gather's output, a reduce_scatter's input) must have `small`'s dtype and
/// `world` times its elements; `what` names the pair in the error.
void check_world_multiple(const at::Tensor& big, const at::Tensor& small, int world,
                          const std::string& what, bool staged = false) {
  check_tensor(big, what.c_str(), staged);
  check_tensor(small, what.c_str(), staged);
  if (big.device() != small.device())
    fail(what + " and the other tensor must be on one device, got " + big.device().str() + " and " +
         small.device().str());
  if (big.scalar_type() != small.scalar_type() || big.numel() != small.numel() * world)
    fail(what + " must have dtype " + dtype_name(small.scalar_type()) + " and world size (" +
         std::to_string(world) + ") times " + std::to_string(small.numel()) + " elements, got " +
         std::to_string(big.numel()) + " " + dtype_name(big.scalar_type()));
}

int64_t total_numel(const std::vector<at::Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) n += t.numel();
  return n;
}

/// One flat buffer of dtype `work` holding the tensors one after another.
at::Tensor flatten(Op& op, const std::vector<at::Tensor>& ts, at::ScalarType work) {
  auto flat = at::empty({total_numel(ts)}, ts.front().options().dtype(work));
  int64_t off = 0;
  for (const auto& t : ts) {
    flat.narrow(0, off, t.numel()).view(t.sizes()).copy_(t);
    off += t.numel();
  }
  op.keep.push_back(flat);
  return flat;
}

/// After success, copies consecutive pieces of `flat` (from element `offset`) into the tensors.
void unflatten_later(Op& op, const at::Tensor& flat, std::vector<at::Tensor> ts,
                     int64_t offset = 0) {
  op.finish.push_back([flat, ts = std::move(ts), offset]() {
    int64_t off = offset;
    for (const auto& t : ts) {
      t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  });
}

/// A call on device tensors, after its staging buffers (device memory, on the caller's stream)
/// are made: `staged` runs the collective through pinned host buffers (src/staging) on this
/// thread, then the copy-backs run here too, on the caller's stream. Its Work is complete when
/// run() returns it.
template <class Staged>
void run_staged_now(Op& op, const at::Tensor& any, Staged&& staged) {
  DeviceCopyEngine engine(any.device());  // the caller's stream, after the staging copies
  staged(engine);
  for (auto& f : op.finish) f();
  op.finish.clear();
}

const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* opname,
                         bool staged = false) {
  if (ts.size() != 1)
    fail(std::string(opname) + ": expects exactly one tensor per rank, got " +
         std::to_string(ts.size()) +
         " (several tensors per call are for several devices; shoal is CPU-only)");
  check_tensor(ts[0], opname, staged);
  return ts[0];
}

void check_same(const at::Tensor& t, const at::Tensor& ref, const char* opname, const char* what) {
  check_tensor(t, opname);
  if (t.scalar_type() != ref.scalar_type())
    fail(std::string(opname) + ": " + what + " has dtype " + dtype_name(t.scalar_type()) +
         ", expected " + dtype_name(ref.scalar_type()));
  if (t.numel() != ref.numel())
    fail(std::string(opname) + ": " + what + " has " + std::to_string(t.numel()) +
         " elements, expected " + std::to_string(ref.numel()));
}

char* byte_ptr(const at::Tensor& buf, int64_t element_offset) {
  return static_cast<char*>(buf.data_ptr()) +
         element_offset * static_cast<int64_t>(buf.element_size());
}

shoal::Segment segment(const at::Tensor& buf, const Spec& s, int64_t element_offset = 0,
                       int64_t numel = -1) {
  return {byte_ptr(buf, element_offset),
          static_cast<size_t>((numel < 0 ? buf.numel() : numel) * s.factor)};
}

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
// WorkShoal

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

namespace {

// Operations of every group not yet completed, for quiesce().
ProcessGroupShoal::Outstanding& everyone() {
  static auto* all = new ProcessGroupShoal::Outstanding;  // never destroyed: completions may
  return *all;                                            // outlive main()
}

// A torch call between its issue and its completion. `remaining` counts what it waits for, plus
// one that run() holds while arming, so that parts already complete do not finish it early.
struct Flight : std::enable_shared_from_this<Flight> {
  ProcessGroupShoal::Op op;
  std::shared_ptr<ProcessGroupShoal::Outstanding> group;
  std::atomic<int> remaining{1};
  std::atomic<bool> waiter{false};   // a wait() completes the call on its own thread
  std::atomic<bool> claimed{false};  // complete() began
  std::mutex mutex;
  std::exception_ptr error;  // the first failure among the parts, guarded by mutex

  void part_done(std::exception_ptr e);  // may run on shoal's progress thread: never blocks
  void complete_once();                  // on a completion thread or the waiting thread
  void help();                           // the waiting thread's side

 private:
  void complete();
};

// The process's completion threads. A completion runs the copy-backs and the torch Work's
// future callbacks, which are Python (DDP's hooks) and may wait for a collective they issue
// (PowerSGD's): so neither runs on shoal's progress thread, and a call that is ready while
// every thread is inside a completion gets a thread of its own. A thread left idle for a while
// leaves, unless it is the last one.
class Completer {
 public:
  static Completer& get() {
    static auto* c = new Completer;  // never destroyed: its threads are detached
    return *c;
  }
  void post(std::shared_ptr<Flight> f) {
    std::lock_guard<std::mutex> lock(mutex_);
    ready_.push_back(std::move(f));
    if (ready_.size() > static_cast<size_t>(idle_)) {
      ++threads_;
      std::thread([this] { serve(); }).detach();
    }
    cv_.notify_one();
  }

 private:
  static constexpr auto kLinger = std::chrono::seconds(2);
  void serve() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      ++idle_;
      const auto ready = [&] { return !ready_.empty(); };
      bool work = true;
      if (threads_ > 1)
        work = cv_.wait_for(lock, kLinger, ready);
      else
        cv_.wait(lock, ready);  // the last thread: no timer on an idle process
      --idle_;
      if (!work) break;
      auto f = std::move(ready_.front());
      ready_.pop_front();
      lock.unlock();
      f->complete_once();
      f.reset();  // the tensors go while no lock is held
      lock.lock();
    }
    --threads_;
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Flight>> ready_;
  int idle_ = 0;     // threads waiting for a ready call
  int threads_ = 0;  // threads alive
};

void Flight::part_done(std::exception_ptr e) {
  if (e) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!error) error = std::move(e);
  }
  // seq_cst with help()'s store to `waiter`: either this sees the waiter, or the waiter sees
  // `remaining` at zero and the claim decides who completes.
  if (remaining.fetch_sub(1) == 1 && !waiter.load()) Completer::get().post(shared_from_this());
}

void Flight::help() {
  if (waiter.exchange(true)) return;  // another thread helps: the caller waits for it
  // op.pending and op.after do not change once armed (complete() leaves them to the Flight).
  for (const auto& w : op.pending) {
    try {
      w.wait();  // shoal's wait: a short poll that yields the core, then a sleep
    } catch (...) {
      // reported to part_done with the error
    }
  }
  for (const auto& m : op.after) {
    try {
      m->wait();
    } catch (...) {
    }
  }
  // The operations are done; their on_complete callbacks (a few instructions on the progress
  // thread, which has the core once this thread yields) may still be counting down.
  while (remaining.load() != 0) sched_yield();
  complete_once();
}

void Flight::complete_once() {
  if (!claimed.exchange(true)) complete();
}

void Flight::complete() {
  std::exception_ptr failed = op.issue_error ? op.issue_error : error;
  if (!failed) {
    try {
      for (auto& f : op.finish) f();
    } catch (...) {
      failed = std::current_exception();
    }
  }
  op.work->complete(failed);
  // The tensors go before the call counts as done; pending and after stay (a waiter reads them).
  op.work.reset();
  op.finish.clear();
  op.keep.clear();
  group->done();
  everyone().done();
}

}  // namespace

void ProcessGroupShoal::Outstanding::add() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++count_;
}

void ProcessGroupShoal::Outstanding::done() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (--count_ == 0) cv_.notify_all();
}

bool ProcessGroupShoal::Outstanding::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  return cv_.wait_for(lock, timeout, [&] { return count_ == 0; });
}

int ProcessGroupShoal::Outstanding::count() {
  std::lock_guard<std::mutex> lock(mutex_);
  return count_;
}

template <class F>
c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::run(OpType type, const char* title,
                                                      std::vector<at::Tensor> inputs,
                                                      std::vector<at::Tensor> outputs, F&& issue) {
  auto work =
      c10::make_intrusive<WorkShoal>(getRank(), type, title, std::move(inputs), std::move(outputs));
  auto flight = std::make_shared<Flight>();
  Op& op = flight->op;
  op.work = work;
  std::lock_guard<std::mutex> lock(issue_mutex_);
  open_comm(title);
  ++sequence_;
  std::exception_ptr failed;
  try {
    issue(op);
  } catch (...) {
    if (op.pending.empty()) throw;  // nothing in flight
    // Part of it is in flight: the Work completes (failed) once that part has, so that its
    // buffers outlive it.
    op.issue_error = failed = std::current_exception();
  }
  flight->group = outstanding_;
  outstanding_->add();
  everyone().add();
  flight->remaining.fetch_add(static_cast<int>(op.pending.size() + op.after.size()));
  for (const auto& w : op.pending)
    w.on_complete([flight](std::exception_ptr e) { flight->part_done(std::move(e)); });
  for (const auto& w : op.after)
    w->getFuture()->addCallback([flight](c10::ivalue::Future& f) {
      flight->part_done(f.hasError() ? f.exception_ptr() : nullptr);
    });
  work->set_helper([weak = std::weak_ptr<Flight>(flight)] {
    if (auto f = weak.lock()) f->help();  // else: completed already
  });
  flight->part_done(nullptr);  // run()'s own share
  if (coalescing_) coalescing_->push_back(work);
  if (failed) std::rethrow_exception(failed);
  return work;
}

void ProcessGroupShoal::quiesce(std::chrono::milliseconds timeout) { everyone().wait_for(timeout); }

// ---------------------------------------------------------------------------------------------
// collectives

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::allreduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions& opts) {
  if (tensors.size() == 1 && tensors[0].defined() && tensors[0].is_sparse() &&
      tensors[0].device().is_cpu())
    return allreduce_sparse_coo(tensors[0], opts);
  const auto& t = single(tensors, "allreduce", true);
  const Spec s = reduce_spec(t, opts.reduceOp, "allreduce");
  return run(OpType::ALLREDUCE, "shoal:all_reduce", tensors, tensors, [&](Op& op) {
    auto buf = stage_reduce(op, t, s);
    if (!t.device().is_cpu())
      return run_staged_now(op, t, [&](DeviceCopyEngine& e) {
        staging::staged_all_reduce(e, *comm_, buf.data_ptr(), buf.data_ptr(), count_of(buf, s),
                                   s.dt, s.op);
      });
    op.pending.push_back(comm_->all_reduce_async(buf.data_ptr(), buf.data_ptr(), count_of(buf, s),
                                                 s.dt, s.op, all_reduce_call_));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::allreduce_sparse_coo(
    at::Tensor& t, const c10d::AllreduceOptions& opts) {
  if (opts.reduceOp.op_ != c10d::ReduceOp::SUM)
    fail("allreduce: sparse tensors reduce with SUM only, got ReduceOp." +
         std::string(op_name(opts.reduceOp.op_)));
  std::vector<at::Tensor> io{t};
  return run(OpType::ALLREDUCE, "shoal:all_reduce_sparse", io, io, [&](Op& op) {
    // As gloo: every rank's indices and values are gathered (padded to the largest count) and
    // summed by coalescing; the steps wait in turn, each behind the operations before it.
    const auto in = t.coalesce();
    const int p = getSize(), sparse_dim = static_cast<int>(in.sparse_dim());
    auto counts = at::empty({p}, at::kLong);
    int64_t nnz = in._nnz();
    comm_->all_gather(&nnz, counts.data_ptr(), 1, shoal::DataType::int64);
    const int64_t most = counts.max().item<int64_t>();
    auto indices = at::zeros({sparse_dim, most}, at::kLong);
    indices.narrow(1, 0, nnz).copy_(in._indices());
    auto value_shape = in._values().sizes().vec();
    value_shape[0] = most;
    auto values = at::zeros(value_shape, in._values().options());
    values.narrow(0, 0, nnz).copy_(in._values());
    auto all_indices = at::empty({p, sparse_dim, most}, at::kLong);
    comm_->all_gather(indices.data_ptr(), all_indices.data_ptr(),
                      static_cast<size_t>(indices.numel()), shoal::DataType::int64);
    value_shape.insert(value_shape.begin(), p);
    auto all_values = at::empty(value_shape, values.options());
    comm_->all_gather(values.data_ptr(), all_values.data_ptr(),
                      static_cast<size_t>(values.nbytes()), shoal::DataType::uint8);
    std::vector<at::Tensor> idx, val;
    for (int r = 0; r < p; ++r) {
      const int64_t n = counts[r].item<int64_t>();
      idx.push_back(all_indices[r].narrow(1, 0, n));
      val.push_back(all_values[r].narrow(0, 0, n));
    }
    t.copy_(at::sparse_coo_tensor(at::cat(idx, 1), at::cat(val, 0), t.sizes()).coalesce());
    (void)op;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  if (tensors.empty()) fail("allreduce_coalesced: no tensors");
  for (const auto& t : tensors) {
    check_tensor(t, "allreduce_coalesced");
    if (t.scalar_type() != tensors[0].scalar_type())
      fail("allreduce_coalesced: every tensor must have the same dtype, got " +
           dtype_name(t.scalar_type()) + " and " + dtype_name(tensors[0].scalar_type()));
  }
  const Spec s = reduce_spec(tensors[0], opts.reduceOp, "allreduce_coalesced");
  return run(
      OpType::ALLREDUCE_COALESCED, "shoal:all_reduce_coalesced", tensors, tensors, [&](Op& op) {
        std::vector<shoal::Segment> bufs;
        for (const auto& t : tensors) bufs.push_back(segment(stage_reduce(op, t, s), s));
        const std::vector<shoal::ConstSegment> in(bufs.begin(), bufs.end());
        op.pending.push_back(comm_->all_reduce_async(in, bufs, s.dt, s.op, all_reduce_call_));
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::broadcast(std::vector<at::Tensor>& tensors,
                                                            const c10d::BroadcastOptions& opts) {
  const auto& t = single(tensors, "broadcast", true);
  if (opts.rootTensor != 0) fail("broadcast: rootTensor must be 0");
  const int root = static_cast<int>(opts.rootRank);
  const Spec s = move_spec(t);
  return run(OpType::BROADCAST, "shoal:broadcast", tensors, tensors, [&](Op& op) {
    const bool is_root = getRank() == root;
    auto buf = stage_out(op, t, s.work, is_root, !is_root);
    if (!t.device().is_cpu())
      return run_staged_now(op, t, [&](DeviceCopyEngine& e) {
        staging::staged_broadcast(e, *comm_, buf.data_ptr(), count_of(buf, s), s.dt, root);
      });
    op.pending.push_back(comm_->broadcast_async(buf.data_ptr(), count_of(buf, s), s.dt, root));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::reduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOptions& opts) {
  const auto& t = single(tensors, "reduce");
  if (opts.rootTensor != 0) fail("reduce: rootTensor must be 0");
  const int root = static_cast<int>(opts.rootRank);
  const Spec s = reduce_spec(t, opts.reduceOp, "reduce");
  return run(OpType::REDUCE, "shoal:reduce", tensors, tensors, [&](Op& op) {
    auto buf = stage_reduce(op, t, s, getRank() == root);
    op.pending.push_back(
        comm_->reduce_async(buf.data_ptr(), buf.data_ptr(), count_of(buf, s), s.dt, s.op, root));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  const auto& in = single(inputs, "allgather");
  if (outputs.size() != 1 || outputs[0].size() != static_cast<size_t>(getSize()))
    fail("allgather: expects one output list of " + std::to_string(getSize()) + " tensors");
  for (const auto& o : outputs[0]) check_same(o, in, "allgather", "an output tensor");
  const Spec s = move_spec(in);
  return run(OpType::ALLGATHER, "shoal:all_gather", inputs, outputs[0], [&](Op& op) {
    const std::vector<shoal::ConstSegment> send = {segment(stage_in(op, in, s.work), s)};
    std::vector<shoal::Segment> recv;
    for (const auto& o : outputs[0]) recv.push_back(segment(stage_out(op, o, s.work, false), s));
    op.pending.push_back(comm_->all_gather_async(send, recv, s.dt, all_gather_call_));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::_allgather_base(at::Tensor& output,
                                                                  at::Tensor& input,
                                                                  const c10d::AllgatherOptions&) {
  check_world_multiple(output, input, getSize(), "_allgather_base: the output", true);
  return run(OpType::_ALLGATHER_BASE, "shoal:all_gather_base", {input}, {output},
             [&](Op& op) { issue_all_gather(op, input, output); });
}

void ProcessGroupShoal::issue_all_gather(Op& op, const at::Tensor& input,
                                         const at::Tensor& output) {
  const Spec s = move_spec(input);
  auto src = stage_in(op, input, s.work);
  auto dst = stage_out(op, output, s.work, false);
  if (!input.device().is_cpu())
    return run_staged_now(op, input, [&](DeviceCopyEngine& e) {
      staging::staged_all_gather(e, *comm_, src.data_ptr(), dst.data_ptr(), count_of(src, s), s.dt);
    });
  op.pending.push_back(comm_->all_gather_async(src.data_ptr(), dst.data_ptr(), count_of(src, s),
                                               s.dt, all_gather_call_));
}

void ProcessGroupShoal::issue_reduce_scatter(Op& op, const at::Tensor& input,
                                             const at::Tensor& output, const Spec& s) {
  auto src = stage_reduce_in(op, input, s);
  auto dst = stage_out(op, output, s.work, false);
  if (!input.device().is_cpu())
    return run_staged_now(op, input, [&](DeviceCopyEngine& e) {
      staging::staged_reduce_scatter(e, *comm_, src.data_ptr(), dst.data_ptr(), count_of(dst, s),
                                     s.dt, s.op);
    });
  op.pending.push_back(comm_->reduce_scatter_async(src.data_ptr(), dst.data_ptr(), count_of(dst, s),
                                                   s.dt, s.op, reduce_scatter_call_));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  if (inputs.empty()) fail("allgather_coalesced: no input tensors");
  if (outputs.size() != static_cast<size_t>(getSize()))
    fail("allgather_coalesced: expects " + std::to_string(getSize()) + " output lists");
  for (const auto& t : inputs) check_tensor(t, "allgather_coalesced");
  for (const auto& t : inputs)
    if (t.scalar_type() != inputs[0].scalar_type())
      fail("allgather_coalesced: every input must have one dtype");
  for (const auto& list : outputs) {
    if (list.size() != inputs.size())
      fail("allgather_coalesced: every output list must match the input list");
    for (size_t i = 0; i < list.size(); ++i)
      check_same(list[i], inputs[i], "allgather_coalesced", "an output");
  }
  const Spec s = move_spec(inputs[0]);
  std::vector<at::Tensor> all_outputs;
  for (const auto& list : outputs) all_outputs.insert(all_outputs.end(), list.begin(), list.end());
  return run(OpType::ALLGATHER_COALESCED, "shoal:all_gather_coalesced", inputs, all_outputs,
             [&](Op& op) {
               // rank r's block: its inputs, in order
               std::vector<shoal::ConstSegment> send;
               std::vector<shoal::Segment> recv;
               for (const auto& t : inputs) send.push_back(segment(stage_in(op, t, s.work), s));
               for (const auto& t : all_outputs)
                 recv.push_back(segment(stage_out(op, t, s.work, false), s));
               op.pending.push_back(comm_->all_gather_async(send, recv, s.dt, all_gather_call_));
             });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const auto& in = single(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank);
  const bool is_root = getRank() == root;
  if (is_root) {
    if (outputs.size() != 1 || outputs[0].size() != static_cast<size_t>(getSize()))
      fail("gather: the root expects one output list of " + std::to_string(getSize()) + " tensors");
    for (const auto& o : outputs[0]) check_same(o, in, "gather", "an output tensor");
  } else if (!outputs.empty() && !outputs[0].empty()) {
    fail("gather: only the root (rank " + std::to_string(root) + ") passes output tensors");
  }
  const Spec s = move_spec(in);
  std::vector<at::Tensor> outs = is_root ? outputs[0] : std::vector<at::Tensor>{};
  return run(OpType::GATHER, "shoal:gather", inputs, outs, [&](Op& op) {
    auto src = stage_in(op, in, s.work);
    at::Tensor flat;
    if (is_root) {
      flat = at::empty({in.numel() * getSize()}, in.options());
      op.keep.push_back(flat);
    }
    op.pending.push_back(comm_->gather_async(src.data_ptr(), is_root ? flat.data_ptr() : nullptr,
                                             count_of(src, s), s.dt, root));
    if (is_root) unflatten_later(op, flat, outs);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const auto& out = single(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  const bool is_root = getRank() == root;
  if (is_root) {
    if (inputs.size() != 1 || inputs[0].size() != static_cast<size_t>(getSize()))
      fail("scatter: the root expects one input list of " + std::to_string(getSize()) + " tensors");
    for (const auto& i : inputs[0]) check_same(i, out, "scatter", "an input tensor");
  } else if (!inputs.empty() && !inputs[0].empty()) {
    fail("scatter: only the root (rank " + std::to_string(root) + ") passes input tensors");
  }
  const Spec s = move_spec(out);
  std::vector<at::Tensor> ins = is_root ? inputs[0] : std::vector<at::Tensor>{};
  return run(OpType::SCATTER, "shoal:scatter", ins, outputs, [&](Op& op) {
    at::Tensor flat;
    if (is_root) flat = flatten(op, ins, s.work);
    auto dst = stage_out(op, out, s.work, false);
    op.pending.push_back(comm_->scatter_async(is_root ? flat.data_ptr() : nullptr, dst.data_ptr(),
                                              count_of(dst, s), s.dt, root));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const auto& out = single(outputs, "reduce_scatter");
  if (inputs.size() != 1 || inputs[0].size() != static_cast<size_t>(getSize()))
    fail("reduce_scatter: expects one input list of " + std::to_string(getSize()) + " tensors");
  for (const auto& i : inputs[0]) check_same(i, out, "reduce_scatter", "an input tensor");
  const Spec s = reduce_spec(out, opts.reduceOp, "reduce_scatter");
  return run(OpType::REDUCE_SCATTER, "shoal:reduce_scatter", inputs[0], outputs, [&](Op& op) {
    std::vector<shoal::ConstSegment> send;
    for (const auto& t : inputs[0]) send.push_back(segment(stage_reduce_in(op, t, s), s));
    const std::vector<shoal::Segment> recv = {segment(stage_out(op, out, s.work, false), s)};
    op.pending.push_back(comm_->reduce_scatter_async(send, recv, s.dt, s.op, reduce_scatter_call_));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  check_world_multiple(input, output, getSize(), "_reduce_scatter_base: the input", true);
  const Spec s = reduce_spec(output, opts.reduceOp, "_reduce_scatter_base");
  return run(OpType::_REDUCE_SCATTER_BASE, "shoal:reduce_scatter_base", {input}, {output},
             [&](Op& op) { issue_reduce_scatter(op, input, output, s); });
}

namespace {
/// The coalesced forms take lists of equal length, at least one pair.
void check_pairs(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                 const char* name) {
  if (inputs.empty() || inputs.size() != outputs.size())
    fail(std::string(name) + ": expects as many outputs as inputs (at least one), got " +
         std::to_string(outputs.size()) + " and " + std::to_string(inputs.size()));
}
}  // namespace

// The coalesced tensor forms (DTensor and FSDP2 call them, even for one tensor): one torch Work
// over one vectored shoal operation (rank r's block: block r of every tensor, in order), or one
// operation per pair where the tensors' dtypes differ.
c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  const char* name = "allgather_into_tensor_coalesced";
  check_pairs(outputs, inputs, name);
  for (size_t i = 0; i < inputs.size(); ++i)
    check_world_multiple(outputs[i], inputs[i], getSize(),
                         std::string(name) + ": output " + std::to_string(i), true);
  const Spec s = move_spec(inputs[0]);
  // Device tensors: each pair staged in turn (one vectored call would need one host layout).
  bool one_call = inputs.size() > 1 && inputs[0].device().is_cpu();
  for (const auto& t : inputs) one_call = one_call && t.scalar_type() == inputs[0].scalar_type();
  return run(OpType::COALESCED, "shoal:all_gather_into_tensor_coalesced", inputs, outputs,
             [&](Op& op) {
               if (!one_call) {
                 for (size_t i = 0; i < inputs.size(); ++i)
                   issue_all_gather(op, inputs[i], outputs[i]);
                 return;
               }
               std::vector<shoal::ConstSegment> send;
               std::vector<at::Tensor> dst;
               for (size_t i = 0; i < inputs.size(); ++i) {
                 send.push_back(segment(stage_in(op, inputs[i], s.work), s));
                 dst.push_back(stage_out(op, outputs[i], s.work, false));
               }
               std::vector<shoal::Segment> recv;
               for (int r = 0; r < getSize(); ++r)
                 for (size_t i = 0; i < inputs.size(); ++i)
                   recv.push_back(segment(dst[i], s, r * inputs[i].numel(), inputs[i].numel()));
               op.pending.push_back(comm_->all_gather_async(send, recv, s.dt, all_gather_call_));
             });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* name = "reduce_scatter_tensor_coalesced";
  check_pairs(outputs, inputs, name);
  std::vector<Spec> specs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_world_multiple(inputs[i], outputs[i], getSize(),
                         std::string(name) + ": input " + std::to_string(i), true);
    specs.push_back(reduce_spec(outputs[i], opts.reduceOp, name));
  }
  bool one_call = inputs.size() > 1 && inputs[0].device().is_cpu();
  for (const auto& t : inputs) one_call = one_call && t.scalar_type() == inputs[0].scalar_type();
  return run(OpType::COALESCED, "shoal:reduce_scatter_tensor_coalesced", inputs, outputs,
             [&](Op& op) {
               if (!one_call) {
                 for (size_t i = 0; i < inputs.size(); ++i)
                   issue_reduce_scatter(op, inputs[i], outputs[i], specs[i]);
                 return;
               }
               const Spec& s = specs[0];
               std::vector<at::Tensor> src;
               std::vector<shoal::Segment> recv;
               for (size_t i = 0; i < inputs.size(); ++i) {
                 src.push_back(stage_reduce_in(op, inputs[i], s));
                 recv.push_back(segment(stage_out(op, outputs[i], s.work, false), s));
               }
               std::vector<shoal::ConstSegment> send;
               for (int r = 0; r < getSize(); ++r)
                 for (size_t i = 0; i < inputs.size(); ++i)
                   send.push_back(segment(src[i], s, r * outputs[i].numel(), outputs[i].numel()));
               op.pending.push_back(
                   comm_->reduce_scatter_async(send, recv, s.dt, s.op, reduce_scatter_call_));
             });
}

// ---------------------------------------------------------------------------------------------
// all_to_all

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::alltoall_base(at::Tensor& output,
                                                                at::Tensor& input,
                                                                std::vector<int64_t>& output_splits,
                                                                std::vector<int64_t>& input_splits,
                                                                const c10d::AllToAllOptions&) {
  check_tensor(input, "alltoall_base");
  check_tensor(output, "alltoall_base");
  if (input.scalar_type() != output.scalar_type())
    fail("alltoall_base: input and output dtypes differ (" + dtype_name(input.scalar_type()) +
         " vs " + dtype_name(output.scalar_type()) + ")");
  const int p = getSize();
  const Spec s = move_spec(input);
  if (output_splits.empty() && input_splits.empty()) {
    if (input.numel() != output.numel() || input.numel() % p != 0)
      fail(
          "alltoall_base: without split sizes input and output need the same number of elements, "
          "divisible by " +
          std::to_string(p));
    return run(OpType::ALLTOALL_BASE, "shoal:all_to_all", {input}, {output}, [&](Op& op) {
      auto src = stage_in(op, input, s.work);
      auto dst = stage_out(op, output, s.work, false);
      op.pending.push_back(
          comm_->all_to_all_async(src.data_ptr(), dst.data_ptr(), count_of(src, s) / p, s.dt));
    });
  }
  // Uneven: rows along dim 0, through shoal's all_to_all_v.
  auto splits = [&](std::vector<int64_t> sp, const at::Tensor& t, const char* which) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    if (sp.empty()) {
      if (rows % p != 0)
        fail(std::string("alltoall_base: ") + which + " rows not divisible by world size");
      sp.assign(static_cast<size_t>(p), rows / p);
    }
    if (sp.size() != static_cast<size_t>(p))
      fail(std::string("alltoall_base: ") + which + " split sizes need one entry per rank");
    int64_t sum = 0;
    for (auto v : sp) {
      if (v < 0) fail("alltoall_base: negative split size");
      sum += v;
    }
    if (sum != rows)
      fail(std::string("alltoall_base: ") + which + " split sizes add up to " +
           std::to_string(sum) + ", not the " + std::to_string(rows) + " rows of the tensor");
    return sp;
  };
  const auto in_sp = splits(input_splits, input, "input");
  const auto out_sp = splits(output_splits, output, "output");
  const int64_t in_row = input.dim() == 0 || input.size(0) == 0 ? 0 : input.numel() / input.size(0);
  const int64_t out_row =
      output.dim() == 0 || output.size(0) == 0 ? 0 : output.numel() / output.size(0);
  return run(OpType::ALLTOALL_BASE, "shoal:all_to_all_v", {input}, {output}, [&](Op& op) {
    auto src = stage_in(op, input, s.work);
    auto dst = stage_out(op, output, s.work, false);
    std::vector<int64_t> in_off(p + 1, 0), out_off(p + 1, 0);
    for (int r = 0; r < p; ++r) {
      in_off[r + 1] = in_off[r] + in_sp[r] * in_row;
      out_off[r + 1] = out_off[r] + out_sp[r] * out_row;
    }
    std::vector<size_t> sc(p), sd(p), rc(p), rd(p);
    for (int r = 0; r < p; ++r) {
      sc[r] = static_cast<size_t>(in_sp[r] * in_row * s.factor);
      sd[r] = static_cast<size_t>(in_off[r] * s.factor);
      rc[r] = static_cast<size_t>(out_sp[r] * out_row * s.factor);
      rd[r] = static_cast<size_t>(out_off[r] * s.factor);
    }
    op.pending.push_back(
        comm_->all_to_all_v_async(src.data_ptr(), sc, sd, dst.data_ptr(), rc, rd, s.dt));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::alltoall(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllToAllOptions&) {
  const int p = getSize();
  if (inputs.size() != static_cast<size_t>(p) || outputs.size() != static_cast<size_t>(p))
    fail("alltoall: expects " + std::to_string(p) + " input and " + std::to_string(p) +
         " output tensors");
  bool even = true;
  for (int r = 0; r < p; ++r) {
    check_tensor(inputs[r], "alltoall");
    check_tensor(outputs[r], "alltoall");
    if (inputs[r].scalar_type() != inputs[0].scalar_type() ||
        outputs[r].scalar_type() != inputs[0].scalar_type())
      fail("alltoall: every tensor must have the same dtype");
    if (inputs[r].numel() != inputs[0].numel() || outputs[r].numel() != inputs[0].numel())
      even = false;
  }
  const Spec s = move_spec(inputs[0]);
  if (even) {
    return run(OpType::ALLTOALL, "shoal:all_to_all", inputs, outputs, [&](Op& op) {
      auto flat_in = flatten(op, inputs, s.work);
      auto flat_out = at::empty({flat_in.numel()}, flat_in.options());
      op.keep.push_back(flat_out);
      op.pending.push_back(comm_->all_to_all_async(flat_in.data_ptr(), flat_out.data_ptr(),
                                                   count_of(inputs[0], s), s.dt));
      unflatten_later(op, flat_out, outputs);
    });
  }
  return run(OpType::ALLTOALL, "shoal:all_to_all_v", inputs, outputs, [&](Op& op) {
    // Packed into one buffer each way, then one all_to_all_v.
    auto flat_in = flatten(op, inputs, s.work);
    int64_t total_out = 0;
    for (const auto& o : outputs) total_out += o.numel();
    auto flat_out = at::empty({total_out}, flat_in.options());
    op.keep.push_back(flat_out);
    std::vector<size_t> sc(p), sd(p), rc(p), rd(p);
    size_t in_at = 0, out_at = 0;
    for (int r = 0; r < p; ++r) {
      sc[r] = static_cast<size_t>(inputs[r].numel() * s.factor), sd[r] = in_at, in_at += sc[r];
      rc[r] = static_cast<size_t>(outputs[r].numel() * s.factor), rd[r] = out_at, out_at += rc[r];
    }
    op.pending.push_back(
        comm_->all_to_all_v_async(flat_in.data_ptr(), sc, sd, flat_out.data_ptr(), rc, rd, s.dt));
    unflatten_later(op, flat_out, outputs);
  });
}

// ---------------------------------------------------------------------------------------------
// point to point

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::send(std::vector<at::Tensor>& tensors, int dst,
                                                       int tag) {
  const auto& t = single(tensors, "send");
  if (dst < 0 || dst >= getSize() || dst == getRank())
    fail("send: destination rank " + std::to_string(dst) +
         " is not another rank of this group of " + std::to_string(getSize()));
  const Spec s = move_spec(t);
  return run(OpType::SEND, "shoal:send", tensors, tensors, [&](Op& op) {
    auto buf = stage_in(op, t, s.work);
    op.pending.push_back(comm_->send_async(buf.data_ptr(), count_of(buf, s), s.dt, dst, tag));
  });
}

// Tags select a queue per sender, as in gloo; shoal matches them itself.
c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::recv(std::vector<at::Tensor>& tensors, int src,
                                                       int tag) {
  const auto& t = single(tensors, "recv");
  if (src < 0 || src >= getSize() || src == getRank())
    fail("recv: source rank " + std::to_string(src) + " is not another rank of this group of " +
         std::to_string(getSize()));
  const Spec s = move_spec(t);
  return run(OpType::RECV, "shoal:recv", tensors, tensors, [&](Op& op) {
    auto buf = stage_out(op, t, s.work, false);
    op.pending.push_back(comm_->recv_async(buf.data_ptr(), count_of(buf, s), s.dt, src, tag));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                int tag) {
  const auto& t = single(tensors, "recvAnysource");
  const Spec s = move_spec(t);
  return run(OpType::RECVANYSOURCE, "shoal:recv_any_source", tensors, tensors, [&](Op& op) {
    auto buf = stage_out(op, t, s.work, false);
    op.pending.push_back(comm_->recv_async(buf.data_ptr(), count_of(buf, s), s.dt,
                                           shoal::Communicator::kAnySource, tag));
    op.finish.push_back([work = op.work.get(), received = op.pending.back()] {
      work->set_source_rank(received.source());
    });
  });
}

void ProcessGroupShoal::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  // The messages say what gloo's say (torch's tests and users' scripts match on them).
  const auto timeout = opts.timeout == c10d::kUnsetTimeout ? timeout_ : opts.timeout;
  const std::string base = "shoal_monitored_barrier/" + std::to_string(monitored_barriers_++) + "/";
  const int me = getRank(), p = getSize();
  const std::string ms = std::to_string(timeout.count()) + " ms";
  if (me != 0) {
    store_->set(base + std::to_string(me), std::vector<uint8_t>{1});
    try {
      store_->wait({base + "done"}, timeout);
    } catch (const std::exception& e) {
      throw shoal::TimeoutError("shoal (torch backend): Rank " + std::to_string(me) +
                                " successfully reached monitoredBarrier, but received errors while "
                                "waiting for send/recv from rank 0: it did not release the barrier "
                                "within " +
                                ms +
                                " (rank 0 is stuck or dead, or it found ranks "
                                "that did not arrive and raised: see its error)");
    }
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<int> missing, arrived_ranks;
  for (int r = 1; r < p; ++r) {
    // As gloo: without wait_all_ranks the ranks share the timeout, with it each has all of it.
    const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    const auto left = wait_all_ranks ? timeout : timeout - elapsed;
    if (!wait_all_ranks && left.count() <= 0) {
      std::string done;
      for (int q : arrived_ranks) done += (done.empty() ? "" : ", ") + std::to_string(q);
      throw shoal::TimeoutError(
          "shoal (torch backend): Rank 0 timed out in monitoredBarrier after " + ms +
          " (ranks that arrived: " + (done.empty() ? "none" : done) + ")");
    }
    const std::string key = base + std::to_string(r);
    bool arrived;
    try {
      if (left.count() > 0) store_->wait({key}, left);  // 0 would mean "no timeout"
      arrived = store_->check({key});
    } catch (const std::exception&) {
      arrived = false;
    }
    if (arrived) {
      arrived_ranks.push_back(r);
    } else {
      missing.push_back(r);
      if (!wait_all_ranks) break;
    }
  }
  if (!missing.empty()) {
    std::string names;
    for (int r : missing) names += (names.empty() ? "" : ", ") + std::to_string(r);
    throw shoal::TimeoutError("shoal (torch backend): [Rank 0]: Rank" +
                              std::string(missing.size() > 1 ? "s " : " ") + names +
                              " failed to pass monitoredBarrier in " + ms);
  }
  store_->set(base + "done", std::vector<uint8_t>{1});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::barrier(const c10d::BarrierOptions&) {
  return run(OpType::BARRIER, "shoal:barrier", {}, {},
             [&](Op& op) { op.pending.push_back(comm_->barrier_async()); });
}

}  // namespace shoal::torch_glue
