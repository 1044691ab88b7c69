#include "swarm/train/tensors.hpp"

#include <cstring>

#include "shoal/error.hpp"
#include "swarm/net/codec.hpp"

namespace shoal::swarm {

namespace {
torch::ScalarType scalar_type(DataType dtype) {
  switch (dtype) {
    case DataType::int8:
      return torch::kInt8;
    case DataType::uint8:
      return torch::kUInt8;
    case DataType::int32:
      return torch::kInt32;
    case DataType::int64:
      return torch::kInt64;
    case DataType::float16:
      return torch::kFloat16;
    case DataType::bfloat16:
      return torch::kBFloat16;
    case DataType::float32:
      return torch::kFloat32;
    case DataType::float64:
      return torch::kFloat64;
  }
  throw InvalidArgumentError("swarm: unknown dtype on the wire");
}
DataType data_type(torch::ScalarType type) {
  switch (type) {
    case torch::kInt8:
      return DataType::int8;
    case torch::kUInt8:
      return DataType::uint8;
    case torch::kInt32:
      return DataType::int32;
    case torch::kInt64:
      return DataType::int64;
    case torch::kFloat16:
      return DataType::float16;
    case torch::kBFloat16:
      return DataType::bfloat16;
    case torch::kFloat32:
      return DataType::float32;
    case torch::kFloat64:
      return DataType::float64;
    default:
      throw InvalidArgumentError(std::string("swarm: cannot send tensors of type ") +
                                 c10::toString(type));
  }
}
}  // namespace

WireTensor to_wire(const torch::Tensor& tensor, Codec codec) {
  auto t = std::make_shared<torch::Tensor>(tensor.detach().contiguous());
  std::vector<int64_t> shape(t->sizes().begin(), t->sizes().end());
  if (t->scalar_type() == torch::kFloat32)
    return encode_float(t->data_ptr<float>(), std::move(shape), codec, t);
  return raw_tensor(data_type(t->scalar_type()), t->data_ptr(), std::move(shape), t);
}

torch::Tensor from_wire(const WireTensor& wire) {
  auto type = scalar_type(wire.dtype);
  if (wire.dtype == DataType::float32 && wire.codec != Codec::None) {
    auto out = torch::empty(wire.shape, torch::kFloat32);
    decode_float(wire, out.data_ptr<float>());
    return out;
  }
  size_t expect = static_cast<size_t>(wire.numel()) * size_of(wire.dtype);
  if (wire.bytes != expect)
    throw InvalidArgumentError("swarm: tensor of " + std::to_string(wire.numel()) +
                               " values carries " + std::to_string(wire.bytes) + " bytes");
  if (reinterpret_cast<uintptr_t>(wire.data) % size_of(wire.dtype) == 0 && wire.owner) {
    auto owner = wire.owner;
    return torch::from_blob(
        const_cast<uint8_t*>(wire.data), wire.shape, [owner](void*) {},
        torch::TensorOptions().dtype(type));
  }
  auto out = torch::empty(wire.shape, type);
  if (expect) std::memcpy(out.data_ptr(), wire.data, expect);
  return out;
}

WireTensor bytes_to_wire(std::shared_ptr<const std::string> bytes) {
  return raw_tensor(DataType::uint8, bytes->data(), {static_cast<int64_t>(bytes->size())}, bytes);
}

std::string wire_to_bytes(const WireTensor& wire) {
  if (wire.dtype != DataType::uint8 || wire.codec != Codec::None || wire.shape.size() != 1 ||
      static_cast<size_t>(wire.shape[0]) != wire.bytes)
    throw InvalidArgumentError("swarm: expected a byte string tensor");
  return std::string(reinterpret_cast<const char*>(wire.data), wire.bytes);
}

}  // namespace shoal::swarm
