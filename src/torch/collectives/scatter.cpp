// scatter (from a root) of ProcessGroupShoal.
#include <string>
#include <vector>

#include "../flight.hpp"
#include "../process_group.hpp"
#include "../tensors.hpp"

namespace shoal::torch_glue {

using c10d::OpType;
using Op = ProcessGroupShoal::Op;

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
  // The root sends from each input tensor (vectored): no flattened copy of them.
  return run(OpType::SCATTER, "shoal:scatter", ins, outputs, [&](Op& op) {
    std::vector<shoal::ConstSegment> send;
    for (const auto& i : ins) send.push_back(segment(stage_in(op, i, s.work), s));
    const std::vector<shoal::Segment> recv = {segment(stage_out(op, out, s.work, false), s)};
    op.pending.push_back(comm_->scatter_async(send, recv, s.dt, root));
  });
}

}  // namespace shoal::torch_glue
