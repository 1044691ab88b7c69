// Test data and an independent reference: element values are small integers (or powers of
// two for prod), so every dtype represents every partial result exactly and the reference —
// plain double or int64 arithmetic, then one conversion — does not depend on reduction order.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "shoal/types.hpp"

namespace shoal::testing {

inline constexpr DataType kAllTypes[] = {DataType::int8,    DataType::uint8,   DataType::int32,
                                         DataType::int64,   DataType::float16, DataType::bfloat16,
                                         DataType::float32, DataType::float64};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max,
                                       ReduceOp::avg};
inline constexpr ReduceOp kBitwiseOps[] = {ReduceOp::band, ReduceOp::bor, ReduceOp::bxor};

inline bool is_float(DataType t) {
  return t == DataType::float16 || t == DataType::bfloat16 || t == DataType::float32 ||
         t == DataType::float64;
}
inline bool is_unsigned(DataType t) { return t == DataType::uint8; }

/// The operators a test runs on `t`: every arithmetic one, and the bitwise ones on integers.
inline std::vector<ReduceOp> ops_for(DataType t) {
  std::vector<ReduceOp> ops(std::begin(kAllOps), std::end(kAllOps));
  if (!is_float(t)) ops.insert(ops.end(), std::begin(kBitwiseOps), std::end(kBitwiseOps));
  return ops;
}

/// The value rank `r` contributes at element `i` for a reduction with `op`.
inline double value(int r, uint64_t i, DataType t, ReduceOp op) {
  if (op == ReduceOp::prod) {
    if (is_unsigned(t)) return static_cast<double>((r + i) % 3 + 1);
    static const double pick[] = {1, 2, -1, -2};
    return pick[(r + i) % 4];
  }
  int64_t v = static_cast<int64_t>(((r + 1) * 3 + i * 7) % 9);
  return static_cast<double>(is_unsigned(t) ? v : v - 4);
}

inline void store(void* buf, uint64_t i, DataType t, double v) {
  auto* b = static_cast<uint8_t*>(buf);
  switch (t) {
    case DataType::int8: {
      int8_t x = static_cast<int8_t>(static_cast<int64_t>(v));
      std::memcpy(b + i, &x, 1);
      break;
    }
    case DataType::uint8: {
      uint8_t x = static_cast<uint8_t>(static_cast<int64_t>(v));
      std::memcpy(b + i, &x, 1);
      break;
    }
    case DataType::int32: {
      int32_t x = static_cast<int32_t>(static_cast<int64_t>(v));
      std::memcpy(b + 4 * i, &x, 4);
      break;
    }
    case DataType::int64: {
      int64_t x = static_cast<int64_t>(v);
      std::memcpy(b + 8 * i, &x, 8);
      break;
    }
    case DataType::float16: {
      float16_t x(static_cast<float>(v));
      std::memcpy(b + 2 * i, &x.bits, 2);
      break;
    }
    case DataType::bfloat16: {
      bfloat16_t x(static_cast<float>(v));
      std::memcpy(b + 2 * i, &x.bits, 2);
      break;
    }
    case DataType::float32: {
      float x = static_cast<float>(v);
      std::memcpy(b + 4 * i, &x, 4);
      break;
    }
    case DataType::float64:
      std::memcpy(b + 8 * i, &v, 8);
      break;
  }
}

inline double load(const void* buf, uint64_t i, DataType t) {
  const auto* b = static_cast<const uint8_t*>(buf);
  switch (t) {
    case DataType::int8: {
      int8_t x;
      std::memcpy(&x, b + i, 1);
      return x;
    }
    case DataType::uint8: {
      uint8_t x;
      std::memcpy(&x, b + i, 1);
      return x;
    }
    case DataType::int32: {
      int32_t x;
      std::memcpy(&x, b + 4 * i, 4);
      return x;
    }
    case DataType::int64: {
      int64_t x;
      std::memcpy(&x, b + 8 * i, 8);
      return static_cast<double>(x);
    }
    case DataType::float16: {
      float16_t x;
      std::memcpy(&x.bits, b + 2 * i, 2);
      return static_cast<float>(x);
    }
    case DataType::bfloat16: {
      bfloat16_t x;
      std::memcpy(&x.bits, b + 2 * i, 2);
      return static_cast<float>(x);
    }
    case DataType::float32: {
      float x;
      std::memcpy(&x, b + 4 * i, 4);
      return x;
    }
    case DataType::float64: {
      double x;
      std::memcpy(&x, b + 8 * i, 8);
      return x;
    }
  }
  return 0;
}

/// Rounds `v` to what dtype `t` stores (wrapping for integers, like the kernels).
inline double as_stored(double v, DataType t) {
  uint8_t tmp[8] = {};
  store(tmp, 0, t, v);
  return load(tmp, 0, t);
}

/// Number of elements of `buf` (from element `first`) that differ from want(i).
template <class Want>
uint64_t wrong(const void* buf, uint64_t first, uint64_t n, DataType t, Want want) {
  uint64_t bad = 0;
  for (uint64_t i = 0; i < n; ++i) bad += !(load(buf, first + i, t) == want(i));
  return bad;
}

/// Expected result at element i of reducing value(r, i, ...) over ranks 0..p-1 with `op`.
inline double expected(int p, uint64_t i, DataType t, ReduceOp op) {
  if (!is_float(t)) {
    int64_t acc = static_cast<int64_t>(value(0, i, t, op));
    for (int r = 1; r < p; ++r) {
      int64_t v = static_cast<int64_t>(value(r, i, t, op));
      switch (op) {
        case ReduceOp::sum:
        case ReduceOp::avg:
          acc += v;
          break;
        case ReduceOp::prod:
          acc *= v;
          break;
        case ReduceOp::min:
          acc = std::min(acc, v);
          break;
        case ReduceOp::max:
          acc = std::max(acc, v);
          break;
        case ReduceOp::band:
          acc &= v;
          break;
        case ReduceOp::bor:
          acc |= v;
          break;
        case ReduceOp::bxor:
          acc ^= v;
          break;
      }
    }
    double stored = as_stored(static_cast<double>(acc), t);  // wrap into the type first
    if (op == ReduceOp::avg) return as_stored(std::trunc(stored / p), t);
    return stored;
  }
  double acc = value(0, i, t, op);
  for (int r = 1; r < p; ++r) {
    double v = value(r, i, t, op);
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg:
        acc += v;
        break;
      case ReduceOp::prod:
        acc *= v;
        break;
      case ReduceOp::min:
        acc = std::min(acc, v);
        break;
      case ReduceOp::max:
        acc = std::max(acc, v);
        break;
      default:
        return NAN;  // bitwise: integers only
    }
  }
  if (op == ReduceOp::avg) {
    if (t == DataType::float64) return acc / p;
    return as_stored(static_cast<double>(static_cast<float>(acc) / static_cast<float>(p)), t);
  }
  return as_stored(acc, t);
}

inline std::vector<uint8_t> bytes_for(uint64_t count, DataType t) {
  return std::vector<uint8_t>(count * size_of(t) + 1);  // +1: never a zero-sized allocation
}

}  // namespace shoal::testing
