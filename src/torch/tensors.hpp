// How torch tensors travel through shoal (internal to the backend): dtype and op mapping, the
// checks every call makes, staging into contiguous buffers of a dtype shoal handles and the
// copy-backs after success.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <vector>

#include "device_copy_engine.hpp"
#include "process_group.hpp"
#include "shoal/types.hpp"

namespace shoal::torch_glue {

using Op = ProcessGroupShoal::Op;

[[noreturn]] void fail(const std::string& what);

inline std::string dtype_name(at::ScalarType t) { return c10::toString(t); }

/// How a tensor travels through shoal: element type, op, elements per torch element, and the
/// dtype of the staging buffer (the tensor's own unless shoal needs a wider one).
struct Spec {
  shoal::DataType dt = shoal::DataType::uint8;
  shoal::ReduceOp op = shoal::ReduceOp::sum;
  int64_t factor = 1;
  at::ScalarType work = at::kByte;
  std::optional<double> premul;  // PREMUL_SUM: inputs are scaled by this before the sum
};

std::optional<shoal::DataType> native_type(at::ScalarType t);

/// `staged`: the call takes device (CUDA) tensors too, through pinned host buffers.
void check_tensor(const at::Tensor& t, const char* op, bool staged = false);

/// Data movement: any dtype travels, as bytes when shoal has no type for it.
Spec move_spec(const at::Tensor& t);

const char* op_name(c10d::ReduceOp::RedOpType op);

/// Reductions: shoal's ops on its eight types; bool as uint8 (SUM = MAX, PRODUCT = MIN, and
/// the bitwise ops on 0/1), int16 widened to int32, complex SUM/AVG as pairs of reals.
Spec reduce_spec(const at::Tensor& t, const c10d::ReduceOp& reduce_op, const char* opname);

size_t count_of(const at::Tensor& buf, const Spec& s);

/// A contiguous tensor of dtype `work` holding t's values: t itself when it already is one.
at::Tensor stage_in(Op& op, const at::Tensor& t, at::ScalarType work);

/// Like stage_in, for a tensor the operation writes: a staging copy is copied back into t
/// (converting the dtype) once the operation succeeded.
at::Tensor stage_out(Op& op, const at::Tensor& t, at::ScalarType work, bool copy_in,
                     bool copy_back = true);

/// The buffer a reduction reads (and, for in-place calls, writes): stage_out's, or under
/// PREMUL_SUM a scaled copy, so that the caller's tensor keeps its values if the call fails.
at::Tensor stage_reduce(Op& op, const at::Tensor& t, const Spec& s, bool copy_back = true);

/// The buffer a reduction only reads: the tensor itself where it can be, a scaled copy under
/// PREMUL_SUM.
at::Tensor stage_reduce_in(Op& op, const at::Tensor& t, const Spec& s);

/// `big` (an all_gather's output, a reduce_scatter's input) must have `small`'s dtype and
/// `world` times its elements; `what` names the pair in the error.
void check_world_multiple(const at::Tensor& big, const at::Tensor& small, int world,
                          const std::string& what, bool staged = false);

int64_t total_numel(const std::vector<at::Tensor>& ts);

/// One flat buffer of dtype `work` holding the tensors one after another.
at::Tensor flatten(Op& op, const std::vector<at::Tensor>& ts, at::ScalarType work);

/// After success, copies consecutive pieces of `flat` (from element `offset`) into the tensors.
void unflatten_later(Op& op, const at::Tensor& flat, std::vector<at::Tensor> ts,
                     int64_t offset = 0);

/// A call on device tensors, after its staging buffers (device memory, on the caller's stream)
/// are made: `staged` runs the collective through pinned host buffers (src/staging) on this
/// thread, then the copy-backs run here too, on the caller's stream. Its Work is complete when
/// run() returns it.
template <class Staged>
inline void run_staged_now(Op& op, const at::Tensor& any, Staged&& staged) {
  DeviceCopyEngine engine(any.device());  // the caller's stream, after the staging copies
  staged(engine);
  for (auto& f : op.finish) f();
  op.finish.clear();
}

const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* opname,
                         bool staged = false);

void check_same(const at::Tensor& t, const at::Tensor& ref, const char* opname, const char* what);

char* byte_ptr(const at::Tensor& buf, int64_t element_offset);

shoal::Segment segment(const at::Tensor& buf, const Spec& s, int64_t element_offset = 0,
                       int64_t numel = -1);

/// The coalesced forms take lists of equal length, at least one pair.
void check_pairs(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                 const char* name);

}  // namespace shoal::torch_glue
