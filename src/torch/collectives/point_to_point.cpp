// send, recv and recv from any source of ProcessGroupShoal.
#include <string>
#include <vector>

#include "../flight.hpp"
#include "../process_group.hpp"
#include "../tensors.hpp"

namespace shoal::torch_glue {

using c10d::OpType;
using Op = ProcessGroupShoal::Op;

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::send(std::vector<at::Tensor>& tensors, int dst,
                                                       int tag) {
  const auto& t = single(tensors, "send");
  if (dst < 0 || dst >= getSize() || dst == getRank())
    fail("send: destination rank " + std::to_string(dst) +
         " is not another rank of this group of " + std::to_string(getSize()));
  const Spec s = move_spec(t);
  return run(OpType::SEND, "shoal:send", tensors, tensors, [&](Op& op) {
    auto buf = stage_in(op, t, s.work);
    op.pending.push_back(comm_->send_async(buf.data_ptr(), count_of(buf, s), s.dt, dst, tag));
  });
}

// Tags select a queue per sender, as in gloo; shoal matches them itself.
c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::recv(std::vector<at::Tensor>& tensors, int src,
                                                       int tag) {
  const auto& t = single(tensors, "recv");
  if (src < 0 || src >= getSize() || src == getRank())
    fail("recv: source rank " + std::to_string(src) + " is not another rank of this group of " +
         std::to_string(getSize()));
  const Spec s = move_spec(t);
  return run(OpType::RECV, "shoal:recv", tensors, tensors, [&](Op& op) {
    auto buf = stage_out(op, t, s.work, false);
    op.pending.push_back(comm_->recv_async(buf.data_ptr(), count_of(buf, s), s.dt, src, tag));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                int tag) {
  const auto& t = single(tensors, "recvAnysource");
  const Spec s = move_spec(t);
  return run(OpType::RECVANYSOURCE, "shoal:recv_any_source", tensors, tensors, [&](Op& op) {
    auto buf = stage_out(op, t, s.work, false);
    op.pending.push_back(comm_->recv_async(buf.data_ptr(), count_of(buf, s), s.dt,
                                           shoal::Communicator::kAnySource, tag));
    op.finish.push_back([work = op.work.get(), received = op.pending.back()] {
      work->set_source_rank(received.source());
    });
  });
}

}  // namespace shoal::torch_glue
