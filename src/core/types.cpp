// Names of data types and reduction operators; float16/bfloat16 conversions (round to nearest
// even).
#include "shoal/types.hpp"

#include <array>
#include <bit>

namespace shoal {

std::string_view to_string(DataType dtype) {
  switch (dtype) {
    case DataType::int8:
      return "int8";
    case DataType::uint8:
      return "uint8";
    case DataType::int32:
      return "int32";
    case DataType::int64:
      return "int64";
    case DataType::float16:
      return "float16";
    case DataType::bfloat16:
      return "bfloat16";
    case DataType::float32:
      return "float32";
    case DataType::float64:
      return "float64";
  }
  return "unknown";
}

std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::prod:
      return "prod";
    case ReduceOp::min:
      return "min";
    case ReduceOp::max:
      return "max";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::band:
      return "band";
    case ReduceOp::bor:
      return "bor";
    case ReduceOp::bxor:
      return "bxor";
  }
  return "unknown";
}

namespace {

// Names are matched without regard to ASCII case ("Float32", "BF16").
bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

struct DataTypeName {
  std::string_view name;
  DataType dtype;
};

// shoal names first, then the nccl-tests (-d) and torch spellings.
constexpr std::array kDataTypeNames = {
    DataTypeName{"int8", DataType::int8},       DataTypeName{"char", DataType::int8},
    DataTypeName{"uint8", DataType::uint8},     DataTypeName{"int32", DataType::int32},
    DataTypeName{"int", DataType::int32},       DataTypeName{"int64", DataType::int64},
    DataTypeName{"float16", DataType::float16}, DataTypeName{"half", DataType::float16},
    DataTypeName{"fp16", DataType::float16},    DataTypeName{"bfloat16", DataType::bfloat16},
    DataTypeName{"bf16", DataType::bfloat16},   DataTypeName{"float32", DataType::float32},
    DataTypeName{"float", DataType::float32},   DataTypeName{"fp32", DataType::float32},
    DataTypeName{"float64", DataType::float64}, DataTypeName{"double", DataType::float64},
};

}  // namespace

std::optional<DataType> parse_data_type(std::string_view name) {
  for (const auto& entry : kDataTypeNames)
    if (iequals(entry.name, name)) return entry.dtype;
  return std::nullopt;
}

std::optional<ReduceOp> parse_reduce_op(std::string_view name) {
  for (int i = 0; i < kNumReduceOps; ++i) {
    auto op = static_cast<ReduceOp>(i);
    if (iequals(to_string(op), name)) return op;
  }
  return std::nullopt;
}

// ---- float16 (IEEE 754 binary16: 1 sign, 5 exponent bits with bias 15, 10 mantissa bits) ----

float16_t::float16_t(float value) {
  const uint32_t f = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (f >> 16) & 0x8000u;
  const uint32_t mag = f & 0x7fffffffu;
  if (mag >= 0x7f800000u) {
    // inf stays inf; NaN keeps its sign and the top of its payload and is made quiet, as F16C's
    // vcvtps2ph does, so that the hardware and software kernels agree bit for bit.
    bits = static_cast<uint16_t>(mag == 0x7f800000u ? sign | 0x7c00u
                                                    : sign | 0x7e00u | ((mag >> 13) & 0x3ffu));
  } else if (mag >= 0x477ff000u) {
    // 65520 (half-way between 65504, the largest float16, and 65536) and above round to inf.
    bits = static_cast<uint16_t>(sign | 0x7c00u);
  } else if (mag >= 0x38800000u) {
    // Normal range: rebias the exponent (127 -> 15) and drop 13 mantissa bits, ties to even.
    // A carry out of the mantissa correctly bumps the exponent.
    const uint32_t rebased = mag - (112u << 23);
    bits = static_cast<uint16_t>(sign | ((rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13));
  } else {
    // Subnormal float16 (or zero): the result is round(value / 2^-24) in units of 2^-24.
    const uint32_t exponent = mag >> 23;     // < 113 here
    const uint32_t shift = 126u - exponent;  // value = mantissa * 2^-shift in units of 2^-24
    if (shift > 24) {
      bits = static_cast<uint16_t>(sign);  // below 2^-25: rounds to zero
    } else {
      const uint32_t mantissa = (mag & 0x7fffffu) | 0x800000u;
      uint32_t q = mantissa >> shift;
      const uint32_t rest = mantissa & ((1u << shift) - 1u);
      const uint32_t half = 1u << (shift - 1);
      if (rest > half || (rest == half && (q & 1u))) ++q;  // may carry into the smallest normal
      bits = static_cast<uint16_t>(sign | q);
    }
  }
}

float16_t::operator float() const {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) {
    // inf, or NaN made quiet with its payload kept (like F16C's vcvtph2ps).
    const uint32_t payload = mantissa ? (mantissa << 13) | 0x400000u : 0u;
    return std::bit_cast<float>(sign | 0x7f800000u | payload);
  }
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// ---- bfloat16: the upper 16 bits of a float32 ----
// kernels/reduce.cpp carries a vectorizable copy of these two rules; test_kernels checks they
// agree.

bfloat16_t::bfloat16_t(float value) {
  const uint32_t f = std::bit_cast<uint32_t>(value);
  if ((f & 0x7fffffffu) > 0x7f800000u) {
    bits = static_cast<uint16_t>((f >> 16) | 0x40u);  // NaN: keep sign and payload top, make quiet
  } else {
    // Round to nearest even; overflow past the largest bfloat16 carries into inf.
    bits = static_cast<uint16_t>((f + 0x7fffu + ((f >> 16) & 1u)) >> 16);
  }
}

bfloat16_t::operator float() const {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

}  // namespace shoal
