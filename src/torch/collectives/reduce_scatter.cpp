// reduce_scatter of ProcessGroupShoal: the list form, from one tensor, and coalesced.
#include <string>
#include <vector>

#include "../device_copy_engine.hpp"
#include "../flight.hpp"
#include "../process_group.hpp"
#include "../tensors.hpp"
#include "staging/pipeline.hpp"

namespace shoal::torch_glue {

using c10d::OpType;
using Op = ProcessGroupShoal::Op;

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

}  // namespace shoal::torch_glue
