// broadcast of ProcessGroupShoal.
#include <vector>

#include "../device_copy_engine.hpp"
#include "../flight.hpp"
#include "../process_group.hpp"
#include "../tensors.hpp"
#include "staging/pipeline.hpp"

namespace shoal::torch_glue {

using c10d::OpType;
using Op = ProcessGroupShoal::Op;

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

}  // namespace shoal::torch_glue
