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

}  // namespace shoal::torch_glue
