// all_to_all of ProcessGroupShoal: one tensor with splits, and lists of tensors.
#include <cstdint>
#include <string>
#include <vector>

#include "../flight.hpp"
#include "../process_group.hpp"
#include "../tensors.hpp"

namespace shoal::torch_glue {

using c10d::OpType;
using Op = ProcessGroupShoal::Op;

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::alltoall_base(at::Tensor& output,
                                                                at::Tensor& input,
                                                                std::vector<int64_t>& output_splits,
                                                                std::vector<int64_t>& input_splits,
                                                                const c10d::AllToAllOptions&) {
  check_tensor(input, "alltoall_base");
  check_tensor(output, "alltoall_base");
  if (input.scalar_type() != output.scalar_type())
    fail("alltoall_base: input and output dtypes differ (" + dtype_name(input.scalar_type()) +
         " vs " + dtype_name(output.scalar_type()) + ")");
  const int p = getSize();
  const Spec s = move_spec(input);
  if (output_splits.empty() && input_splits.empty()) {
    if (input.numel() != output.numel() || input.numel() % p != 0)
      fail(
          "alltoall_base: without split sizes input and output need the same number of elements, "
          "divisible by " +
          std::to_string(p));
    return run(OpType::ALLTOALL_BASE, "shoal:all_to_all", {input}, {output}, [&](Op& op) {
      auto src = stage_in(op, input, s.work);
      auto dst = stage_out(op, output, s.work, false);
      op.pending.push_back(
          comm_->all_to_all_async(src.data_ptr(), dst.data_ptr(), count_of(src, s) / p, s.dt));
    });
  }
  // Uneven: rows along dim 0, through shoal's all_to_all_v.
  auto splits = [&](std::vector<int64_t> sp, const at::Tensor& t, const char* which) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    if (sp.empty()) {
      if (rows % p != 0)
        fail(std::string("alltoall_base: ") + which + " rows not divisible by world size");
      sp.assign(static_cast<size_t>(p), rows / p);
    }
    if (sp.size() != static_cast<size_t>(p))
      fail(std::string("alltoall_base: ") + which + " split sizes need one entry per rank");
    int64_t sum = 0;
    for (auto v : sp) {
      if (v < 0) fail("alltoall_base: negative split size");
      sum += v;
    }
    if (sum != rows)
      fail(std::string("alltoall_base: ") + which + " split sizes add up to " +
           std::to_string(sum) + ", not the " + std::to_string(rows) + " rows of the tensor");
    return sp;
  };
  const auto in_sp = splits(input_splits, input, "input");
  const auto out_sp = splits(output_splits, output, "output");
  const int64_t in_row = input.dim() == 0 || input.size(0) == 0 ? 0 : input.numel() / input.size(0);
  const int64_t out_row =
      output.dim() == 0 || output.size(0) == 0 ? 0 : output.numel() / output.size(0);
  return run(OpType::ALLTOALL_BASE, "shoal:all_to_all_v", {input}, {output}, [&](Op& op) {
    auto src = stage_in(op, input, s.work);
    auto dst = stage_out(op, output, s.work, false);
    std::vector<int64_t> in_off(p + 1, 0), out_off(p + 1, 0);
    for (int r = 0; r < p; ++r) {
      in_off[r + 1] = in_off[r] + in_sp[r] * in_row;
      out_off[r + 1] = out_off[r] + out_sp[r] * out_row;
    }
    std::vector<size_t> sc(p), sd(p), rc(p), rd(p);
    for (int r = 0; r < p; ++r) {
      sc[r] = static_cast<size_t>(in_sp[r] * in_row * s.factor);
      sd[r] = static_cast<size_t>(in_off[r] * s.factor);
      rc[r] = static_cast<size_t>(out_sp[r] * out_row * s.factor);
      rd[r] = static_cast<size_t>(out_off[r] * s.factor);
    }
    op.pending.push_back(
        comm_->all_to_all_v_async(src.data_ptr(), sc, sd, dst.data_ptr(), rc, rd, s.dt));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShoal::alltoall(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllToAllOptions&) {
  const int p = getSize();
  if (inputs.size() != static_cast<size_t>(p) || outputs.size() != static_cast<size_t>(p))
    fail("alltoall: expects " + std::to_string(p) + " input and " + std::to_string(p) +
         " output tensors");
  bool even = true;
  for (int r = 0; r < p; ++r) {
    check_tensor(inputs[r], "alltoall");
    check_tensor(outputs[r], "alltoall");
    if (inputs[r].scalar_type() != inputs[0].scalar_type() ||
        outputs[r].scalar_type() != inputs[0].scalar_type())
      fail("alltoall: every tensor must have the same dtype");
    if (inputs[r].numel() != inputs[0].numel() || outputs[r].numel() != inputs[0].numel())
      even = false;
  }
  const Spec s = move_spec(inputs[0]);
  if (even) {
    return run(OpType::ALLTOALL, "shoal:all_to_all", inputs, outputs, [&](Op& op) {
      auto flat_in = flatten(op, inputs, s.work);
      auto flat_out = at::empty({flat_in.numel()}, flat_in.options());
      op.keep.push_back(flat_out);
      op.pending.push_back(comm_->all_to_all_async(flat_in.data_ptr(), flat_out.data_ptr(),
                                                   count_of(inputs[0], s), s.dt));
      unflatten_later(op, flat_out, outputs);
    });
  }
  return run(OpType::ALLTOALL, "shoal:all_to_all_v", inputs, outputs, [&](Op& op) {
    // Packed into one buffer each way, then one all_to_all_v.
    auto flat_in = flatten(op, inputs, s.work);
    int64_t total_out = 0;
    for (const auto& o : outputs) total_out += o.numel();
    auto flat_out = at::empty({total_out}, flat_in.options());
    op.keep.push_back(flat_out);
    std::vector<size_t> sc(p), sd(p), rc(p), rd(p);
    size_t in_at = 0, out_at = 0;
    for (int r = 0; r < p; ++r) {
      sc[r] = static_cast<size_t>(inputs[r].numel() * s.factor), sd[r] = in_at, in_at += sc[r];
      rc[r] = static_cast<size_t>(outputs[r].numel() * s.factor), rd[r] = out_at, out_at += rc[r];
    }
    op.pending.push_back(
        comm_->all_to_all_v_async(flat_in.data_ptr(), sc, sd, flat_out.data_ptr(), rc, rd, s.dt));
    unflatten_later(op, flat_out, outputs);
  });
}

}  // namespace shoal::torch_glue
