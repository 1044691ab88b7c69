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
  return run(OpType::SCATTER, "shoal:scatter", ins, outputs, [&](Op& op) {
    at::Tensor flat;
    if (is_root) flat = flatten(op, ins, s.work);
    auto dst = stage_out(op, out, s.work, false);
    op.pending.push_back(comm_->scatter_async(is_root ? flat.data_ptr() : nullptr, dst.data_ptr(),
                                              count_of(dst, s), s.dt, root));
  });
}

}  // namespace shoal::torch_glue
