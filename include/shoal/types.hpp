// Element types and reduction operators of shoal's collectives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

namespace shoal {

/// Element type of a buffer. float16 and bfloat16 reduce with float32 accumulation.
enum class DataType : uint8_t { int8, uint8, int32, int64, float16, bfloat16, float32, float64 };

/// Reduction operator. avg is sum divided by the number of ranks (integer division for integers).
/// band, bor and bxor (bitwise and, or, xor) are defined for the integer types only.
enum class ReduceOp : uint8_t { sum, prod, min, max, avg, band, bor, bxor };

inline constexpr int kNumDataTypes = 8;
inline constexpr int kNumReduceOps = 8;

constexpr bool is_integer(DataType dtype) {
  return dtype == DataType::int8 || dtype == DataType::uint8 || dtype == DataType::int32 ||
         dtype == DataType::int64;
}
constexpr bool is_bitwise(ReduceOp op) {
  return op == ReduceOp::band || op == ReduceOp::bor || op == ReduceOp::bxor;
}
/// Whether a reduction with `op` is defined on elements of `dtype` (every collective that takes
/// both refuses the pair otherwise, with InvalidArgument).
constexpr bool defined_for(ReduceOp op, DataType dtype) {
  return !is_bitwise(op) || is_integer(dtype);
}

/// Size in bytes of one element of `dtype`.
constexpr size_t size_of(DataType dtype) {
  switch (dtype) {
    case DataType::int8:
    case DataType::uint8:
      return 1;
    case DataType::float16:
    case DataType::bfloat16:
      return 2;
    case DataType::int32:
    case DataType::float32:
      return 4;
    case DataType::int64:
    case DataType::float64:
      return 8;
  }
  return 0;
}

/// Name as used by tools and errors: "float32", "sum", ...
std::string_view to_string(DataType dtype);
std::string_view to_string(ReduceOp op);
/// Parses a name (also accepts the nccl-tests spellings: float, half, bf16, double, int, ...).
std::optional<DataType> parse_data_type(std::string_view name);
std::optional<ReduceOp> parse_reduce_op(std::string_view name);

/// IEEE 754 binary16, stored as bits. Converts to and from float.
struct float16_t {
  uint16_t bits = 0;
  float16_t() = default;
  explicit float16_t(float value);
  explicit operator float() const;
};

/// bfloat16 (the upper half of a float32), stored as bits. Converts with round-to-nearest-even.
struct bfloat16_t {
  uint16_t bits = 0;
  bfloat16_t() = default;
  explicit bfloat16_t(float value);
  explicit operator float() const;
};

/// DataType of a C++ element type, for the typed std::span overloads.
template <class T>
struct data_type_of;
template <>
struct data_type_of<int8_t> {
  static constexpr DataType value = DataType::int8;
};
template <>
struct data_type_of<uint8_t> {
  static constexpr DataType value = DataType::uint8;
};
template <>
struct data_type_of<int32_t> {
  static constexpr DataType value = DataType::int32;
};
template <>
struct data_type_of<int64_t> {
  static constexpr DataType value = DataType::int64;
};
template <>
struct data_type_of<float16_t> {
  static constexpr DataType value = DataType::float16;
};
template <>
struct data_type_of<bfloat16_t> {
  static constexpr DataType value = DataType::bfloat16;
};
template <>
struct data_type_of<float> {
  static constexpr DataType value = DataType::float32;
};
template <>
struct data_type_of<double> {
  static constexpr DataType value = DataType::float64;
};
template <class T>
inline constexpr DataType data_type_of_v = data_type_of<std::remove_cv_t<T>>::value;

}  // namespace shoal
