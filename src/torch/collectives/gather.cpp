// gather (to a root) of ProcessGroupShoal.
#include <string>
#include <vector>

#include "../flight.hpp"
#include "../process_group.hpp"
#include "../tensors.hpp"

namespace shoal::torch_glue {

using c10d::OpType;
using Op = ProcessGroupShoal::Op;

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
  // The root receives into each output tensor (vectored): no flattened buffer, whose fresh
  // pages and copy cost the root more than the transfer from 16 MiB.
  return run(OpType::GATHER, "shoal:gather", inputs, outs, [&](Op& op) {
    const std::vector<shoal::ConstSegment> send = {segment(stage_in(op, in, s.work), s)};
    std::vector<shoal::Segment> recv;
    for (const auto& o : outs) recv.push_back(segment(stage_out(op, o, s.work, false), s));
    op.pending.push_back(comm_->gather_async(send, recv, s.dt, root));
  });
}

}  // namespace shoal::torch_glue
