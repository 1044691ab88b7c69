// all_gather of ProcessGroupShoal: the list form, into one tensor, and coalesced.
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

}  // namespace shoal::torch_glue
