// all_reduce (dense, sparse COO, coalesced) of ProcessGroupShoal.
#include <cstdint>
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

}  // namespace shoal::torch_glue
