// See tensors.hpp.
#include "tensors.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shoal/error.hpp"

namespace shoal::torch_glue {

[[noreturn]] void fail(const std::string& what) {
  throw shoal::InvalidArgumentError("shoal (torch backend): " + what);
}

std::optional<shoal::DataType> native_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return shoal::DataType::float32;
    case at::kDouble:
      return shoal::DataType::float64;
    case at::kHalf:
      return shoal::DataType::float16;
    case at::kBFloat16:
      return shoal::DataType::bfloat16;
    case at::kChar:
      return shoal::DataType::int8;
    case at::kByte:
      return shoal::DataType::uint8;
    case at::kInt:
      return shoal::DataType::int32;
    case at::kLong:
      return shoal::DataType::int64;
    default:
      return std::nullopt;
  }
}

void check_tensor(const at::Tensor& t, const char* op, bool staged) {
  if (!t.defined()) fail(std::string(op) + ": undefined tensor");
  if (!t.device().is_cpu() && !(staged && t.device().is_cuda()))
    fail(std::string(op) + ": tensors must be on the CPU, got one on " + t.device().str() +
         " (CUDA tensors: all_reduce, broadcast, all_gather_into_tensor and "
         "reduce_scatter_tensor; docs/torch.md)");
  if (t.is_sparse()) fail(std::string(op) + ": sparse tensors are not supported");
}

Spec move_spec(const at::Tensor& t) {
  Spec s;
  s.work = t.scalar_type();
  if (auto dt = native_type(t.scalar_type())) {
    s.dt = *dt;
  } else {
    s.dt = shoal::DataType::uint8;
    s.factor = static_cast<int64_t>(t.element_size());
  }
  return s;
}

const char* op_name(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "UNKNOWN";
  }
}

Spec reduce_spec(const at::Tensor& t, const c10d::ReduceOp& reduce_op, const char* opname) {
  const auto rop = reduce_op.op_;
  const auto type = t.scalar_type();
  Spec s;
  s.work = type;
  auto unsupported = [&](const std::string& why) {
    fail(std::string(opname) + ": ReduceOp." + op_name(rop) + " on " + dtype_name(type) +
         " is not supported: " + why);
  };
  if (type == at::kBool) {
    s.dt = shoal::DataType::uint8;
    switch (rop) {
      case c10d::ReduceOp::SUM:
      case c10d::ReduceOp::MAX:
        s.op = shoal::ReduceOp::max;
        break;
      case c10d::ReduceOp::PRODUCT:
      case c10d::ReduceOp::MIN:
        s.op = shoal::ReduceOp::min;
        break;
      case c10d::ReduceOp::BAND:
        s.op = shoal::ReduceOp::band;
        break;
      case c10d::ReduceOp::BOR:
        s.op = shoal::ReduceOp::bor;
        break;
      case c10d::ReduceOp::BXOR:
        s.op = shoal::ReduceOp::bxor;
        break;
      default:
        unsupported("bool tensors reduce with SUM, PRODUCT, MIN, MAX, BAND, BOR or BXOR");
    }
    return s;
  }
  switch (rop) {
    case c10d::ReduceOp::SUM:
      s.op = shoal::ReduceOp::sum;
      break;
    case c10d::ReduceOp::AVG:
      s.op = shoal::ReduceOp::avg;
      break;
    case c10d::ReduceOp::PRODUCT:
      s.op = shoal::ReduceOp::prod;
      break;
    case c10d::ReduceOp::MIN:
      s.op = shoal::ReduceOp::min;
      break;
    case c10d::ReduceOp::MAX:
      s.op = shoal::ReduceOp::max;
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      if (!at::isFloatingType(type)) unsupported("PREMUL_SUM scales floating-point tensors only");
      auto* sup = dynamic_cast<c10d::PreMulSumSupplement*>(reduce_op.supplement_.get());
      if (!sup)
        unsupported(
            "the op carries no factor (make it with torch.distributed._make_nccl_premul_sum)");
      s.op = shoal::ReduceOp::sum;
      s.premul =
          sup->tensor_factor.defined() ? sup->tensor_factor.item<double>() : sup->double_factor;
      break;
    }
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      if (at::isFloatingType(type) || at::isComplexType(type))
        unsupported("bitwise reductions are defined for integer and bool tensors only");
      s.op = rop == c10d::ReduceOp::BAND  ? shoal::ReduceOp::band
             : rop == c10d::ReduceOp::BOR ? shoal::ReduceOp::bor
                                          : shoal::ReduceOp::bxor;
      break;
    default:
      unsupported("shoal supports SUM, PRODUCT, MIN, MAX, AVG, PREMUL_SUM, BAND, BOR, BXOR");
  }
  if (auto dt = native_type(type)) {
    s.dt = *dt;
  } else if (type == at::kShort) {
    s.dt = shoal::DataType::int32;  // int16 reduces in int32 and narrows back (wraps like int16)
    s.work = at::kInt;
  } else if (type == at::kComplexFloat || type == at::kComplexDouble) {
    if (s.op != shoal::ReduceOp::sum && s.op != shoal::ReduceOp::avg)
      unsupported("complex tensors reduce with SUM or AVG only");
    s.dt = type == at::kComplexFloat ? shoal::DataType::float32 : shoal::DataType::float64;
    s.factor = 2;
  } else {
    unsupported(
        "shoal reduces float32/64, float16, bfloat16, int8/16/32/64, uint8, bool and complex");
  }
  return s;
}

size_t count_of(const at::Tensor& buf, const Spec& s) {
  return static_cast<size_t>(buf.numel() * s.factor);
}

at::Tensor stage_in(Op& op, const at::Tensor& t, at::ScalarType work) {
  if (t.is_contiguous() && t.scalar_type() == work) {
    op.keep.push_back(t);
    return t;
  }
  auto b = at::empty(t.sizes(), t.options().dtype(work));
  b.copy_(t);
  op.keep.push_back(b);
  return b;
}

at::Tensor stage_out(Op& op, const at::Tensor& t, at::ScalarType work, bool copy_in,
                     bool copy_back) {
  if (t.is_contiguous() && t.scalar_type() == work) {
    op.keep.push_back(t);
    return t;
  }
  auto b = at::empty(t.sizes(), t.options().dtype(work));
  if (copy_in) b.copy_(t);
  op.keep.push_back(b);
  if (copy_back) op.finish.push_back([t, b]() { t.copy_(b); });
  return b;
}

at::Tensor stage_reduce(Op& op, const at::Tensor& t, const Spec& s, bool copy_back) {
  if (!s.premul) return stage_out(op, t, s.work, true, copy_back);
  auto b = at::empty(t.sizes(), t.options().dtype(s.work));
  b.copy_(t);
  b.mul_(*s.premul);
  op.keep.push_back(b);
  if (copy_back) op.finish.push_back([t, b]() { t.copy_(b); });
  return b;
}

at::Tensor stage_reduce_in(Op& op, const at::Tensor& t, const Spec& s) {
  return s.premul ? stage_reduce(op, t, s, false) : stage_in(op, t, s.work);
}

void check_world_multiple(const at::Tensor& big, const at::Tensor& small, int world,
                          const std::string& what, bool staged) {
  check_tensor(big, what.c_str(), staged);
  check_tensor(small, what.c_str(), staged);
  if (big.device() != small.device())
    fail(what + " and the other tensor must be on one device, got " + big.device().str() + " and " +
         small.device().str());
  if (big.scalar_type() != small.scalar_type() || big.numel() != small.numel() * world)
    fail(what + " must have dtype " + dtype_name(small.scalar_type()) + " and world size (" +
         std::to_string(world) + ") times " + std::to_string(small.numel()) + " elements, got " +
         std::to_string(big.numel()) + " " + dtype_name(big.scalar_type()));
}

int64_t total_numel(const std::vector<at::Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) n += t.numel();
  return n;
}

at::Tensor flatten(Op& op, const std::vector<at::Tensor>& ts, at::ScalarType work) {
  auto flat = at::empty({total_numel(ts)}, ts.front().options().dtype(work));
  int64_t off = 0;
  for (const auto& t : ts) {
    flat.narrow(0, off, t.numel()).view(t.sizes()).copy_(t);
    off += t.numel();
  }
  op.keep.push_back(flat);
  return flat;
}

void unflatten_later(Op& op, const at::Tensor& flat, std::vector<at::Tensor> ts, int64_t offset) {
  op.finish.push_back([flat, ts = std::move(ts), offset]() {
    int64_t off = offset;
    for (const auto& t : ts) {
      t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  });
}

const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* opname, bool staged) {
  if (ts.size() != 1)
    fail(std::string(opname) + ": expects exactly one tensor per rank, got " +
         std::to_string(ts.size()) +
         " (several tensors per call are for several devices; shoal is CPU-only)");
  check_tensor(ts[0], opname, staged);
  return ts[0];
}

void check_same(const at::Tensor& t, const at::Tensor& ref, const char* opname, const char* what) {
  check_tensor(t, opname);
  if (t.scalar_type() != ref.scalar_type())
    fail(std::string(opname) + ": " + what + " has dtype " + dtype_name(t.scalar_type()) +
         ", expected " + dtype_name(ref.scalar_type()));
  if (t.numel() != ref.numel())
    fail(std::string(opname) + ": " + what + " has " + std::to_string(t.numel()) +
         " elements, expected " + std::to_string(ref.numel()));
}

char* byte_ptr(const at::Tensor& buf, int64_t element_offset) {
  return static_cast<char*>(buf.data_ptr()) +
         element_offset * static_cast<int64_t>(buf.element_size());
}

shoal::Segment segment(const at::Tensor& buf, const Spec& s, int64_t element_offset,
                       int64_t numel) {
  return {byte_ptr(buf, element_offset),
          static_cast<size_t>((numel < 0 ? buf.numel() : numel) * s.factor)};
}

void check_pairs(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                 const char* name) {
  if (inputs.empty() || inputs.size() != outputs.size())
    fail(std::string(name) + ": expects as many outputs as inputs (at least one), got " +
         std::to_string(outputs.size()) + " and " + std::to_string(inputs.size()));
}

}  // namespace shoal::torch_glue
