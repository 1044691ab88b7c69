// reduce (to a root) of ProcessGroupShoal.
#include <vector>

#include "../flight.hpp"
#include "../process_group.hpp"
#include "../tensors.hpp"

namespace shoal::torch_glue {

using c10d::OpType;
using Op = ProcessGroupShoal::Op;

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

}  // namespace shoal::torch_glue
