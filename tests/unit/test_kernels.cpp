// Reduction kernels and element types, against an independent scalar reference: exact integers
// (wrapping) and doubles rounded to the element type with the test's own rounding code.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/reduce.hpp"
#include "shoal/error.hpp"
#include "shoal/types.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace shoal {

// Readable parameter names in gtest's messages (found by argument-dependent lookup).
void PrintTo(DataType t, std::ostream* os) { *os << to_string(t); }
void PrintTo(ReduceOp op, std::ostream* os) { *os << to_string(op); }

namespace {

using kernels::detail::force_baseline_kernels;
using kernels::detail::kernel_isa;
using Bytes = std::vector<unsigned char>;

constexpr DataType kAllTypes[] = {DataType::int8,    DataType::uint8,   DataType::int32,
                                  DataType::int64,   DataType::float16, DataType::bfloat16,
                                  DataType::float32, DataType::float64};
constexpr ReduceOp kAllOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max,
                                ReduceOp::avg};
constexpr DataType kIntegerTypes[] = {DataType::int8, DataType::uint8, DataType::int32,
                                      DataType::int64};
constexpr ReduceOp kBitwiseOps[] = {ReduceOp::band, ReduceOp::bor, ReduceOp::bxor};

// ---------------- independent reference ----------------

// Rounds x to a binary format with `mantissa_bits` stored bits, smallest normal exponent
// `min_exponent` and largest finite value `max_finite`, ties to even (nearbyint in the default
// rounding mode); overflow gives inf.
double round_to_format(double x, int mantissa_bits, int min_exponent, double max_finite) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  int e = 0;
  std::frexp(x, &e);  // |x| = m * 2^e with m in [0.5, 1): the leading bit is 2^(e-1)
  const int lead = std::max(e - 1, min_exponent);
  const double quantum = std::ldexp(1.0, lead - mantissa_bits);
  const double r = std::nearbyint(x / quantum) * quantum;
  if (std::fabs(r) > max_finite) return std::copysign(INFINITY, x);
  return r == 0 ? std::copysign(0.0, x) : r;
}
const double kHalfMax = 65504.0;
const double kBf16Max = std::ldexp(255.0, 120);  // 0x7f7f = (2 - 2^-7) * 2^127
double round_f32(double x) { return round_to_format(x, 23, -126, FLT_MAX); }
double round_f16(double x) { return round_to_format(x, 10, -14, kHalfMax); }
double round_bf16(double x) { return round_to_format(x, 7, -126, kBf16Max); }

double decode_f16(uint16_t h) {
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 31) return m ? NAN : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(m, -24);
  return sign * std::ldexp(1024 + m, e - 25);
}
double decode_bf16(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// The exact result of op, with the documented rules: NaN propagates, -0 < +0 for min/max.
double ref_op(double a, double b, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return a + b;
    case ReduceOp::prod:
      return a * b;
    case ReduceOp::min:
    case ReduceOp::max: {
      if (std::isnan(a) || std::isnan(b)) return NAN;
      const bool a_first = a < b || (a == b && std::signbit(a));  // a is the minimum
      return (op == ReduceOp::min) == a_first ? a : b;
    }
    case ReduceOp::band:
    case ReduceOp::bor:
    case ReduceOp::bxor:
      break;  // integers only (ref_int)
  }
  return NAN;
}

// Element of a float type as double.
double read_float(DataType t, const unsigned char* p) {
  switch (t) {
    case DataType::float16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return decode_f16(h);
    }
    case DataType::bfloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return decode_bf16(h);
    }
    case DataType::float32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DataType::float64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    default:
      ADD_FAILURE();
      return 0;
  }
}

// float16/bfloat16 compute in float32 and round back (documented in reduce.cpp); float32
// rounds the exact result once, float64 is double arithmetic.
double round_to(DataType t, double exact) {
  switch (t) {
    case DataType::float16:
      return round_f16(round_f32(exact));
    case DataType::bfloat16:
      return round_bf16(round_f32(exact));
    case DataType::float32:
      return round_f32(exact);
    default:
      return exact;
  }
}

// Element of an integer type, sign-extended (or zero-extended for uint8).
int64_t read_int(DataType t, const unsigned char* p) {
  switch (t) {
    case DataType::int8: {
      int8_t v;
      std::memcpy(&v, p, 1);
      return v;
    }
    case DataType::uint8: {
      uint8_t v;
      std::memcpy(&v, p, 1);
      return v;
    }
    case DataType::int32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DataType::int64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
    default:
      ADD_FAILURE();
      return 0;
  }
}

// Wraps an exact result (mod 2^64) to the width of t, as the kernel's two's complement does.
int64_t wrap_to(DataType t, uint64_t x) {
  switch (t) {
    case DataType::int8:
      return static_cast<int8_t>(static_cast<uint8_t>(x));
    case DataType::uint8:
      return static_cast<uint8_t>(x);
    case DataType::int32:
      return static_cast<int32_t>(static_cast<uint32_t>(x));
    default:
      return static_cast<int64_t>(x);
  }
}

int64_t ref_int(DataType t, int64_t a, int64_t b, ReduceOp op) {
  const auto ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return wrap_to(t, ua + ub);
    case ReduceOp::prod:
      return wrap_to(t, ua * ub);
    case ReduceOp::min:
      return std::min(a, b);
    case ReduceOp::max:
      return std::max(a, b);
    case ReduceOp::band:
      return wrap_to(t, ua & ub);
    case ReduceOp::bor:
      return wrap_to(t, ua | ub);
    case ReduceOp::bxor:
      return wrap_to(t, ua ^ ub);
  }
  return 0;
}

bool same_value(double expected, double got) {
  if (std::isnan(expected)) return std::isnan(got);
  return expected == got && std::signbit(expected) == std::signbit(got);
}

// ---------------- inputs ----------------

// Random elements: integers over their full range (so sums and products wrap); floats with
// exponents around 1 (so products sometimes overflow float16) and, one time in eight, a special
// value: ±0, ±inf, NaN, subnormals, the largest finite, the smallest normal.
struct FloatFormat {
  int bytes, mantissa_bits, exponent_bits;
};
FloatFormat format_of(DataType t) {
  switch (t) {
    case DataType::float16:
      return {2, 10, 5};
    case DataType::bfloat16:
      return {2, 7, 8};
    case DataType::float32:
      return {4, 23, 8};
    default:
      return {8, 52, 11};
  }
}

void fill_random(DataType t, unsigned char* p, size_t count, std::mt19937_64& rng) {
  const size_t size = size_of(t);
  for (size_t i = 0; i < count; ++i) {
    uint64_t bits = rng();
    if (!is_integer(t)) {
      const uint64_t control = rng();
      const FloatFormat f = format_of(t);
      const uint64_t bias = (uint64_t{1} << (f.exponent_bits - 1)) - 1;
      const uint64_t exp_all = (uint64_t{1} << f.exponent_bits) - 1;
      const uint64_t sign = (control >> 63) << (8 * f.bytes - 1);
      const uint64_t mantissa = bits & ((uint64_t{1} << f.mantissa_bits) - 1);
      uint64_t exponent = bias - 8 + (control % 17);
      uint64_t m = mantissa;
      switch ((control >> 8) % 64) {
        case 0:
          exponent = 0;
          m = 0;
          break;  // ±0
        case 1:
          exponent = exp_all;
          m = 0;
          break;  // ±inf
        case 2:
          exponent = exp_all;
          m |= uint64_t{1} << (f.mantissa_bits - 1);
          break;  // NaN
        case 3:
          exponent = 0;
          m |= 1;
          break;  // subnormal
        case 4:
          exponent = exp_all - 1;
          m = (uint64_t{1} << f.mantissa_bits) - 1;
          break;  // max
        case 5:
          exponent = 1;
          m = 0;
          break;  // min normal
        case 6:
          exponent = 0;
          m = 1;
          break;  // min subnormal
        case 7:
          exponent = bias;
          m = 0;
          break;  // ±1
        default:
          break;
      }
      bits = sign | (exponent << f.mantissa_bits) | m;
    }
    std::memcpy(p + i * size, &bits, size);  // little-endian: the low bytes
  }
}

// ---------------- the kernel sweep ----------------

enum class Alias { none, dst_is_a, dst_is_b };
const char* alias_name(Alias a) {
  return a == Alias::none ? "separate" : a == Alias::dst_is_a ? "dst==a" : "dst==b";
}

constexpr size_t kCounts[] = {0, 1, 7, 8, 9, 31, 1000, 4099};
constexpr size_t kGuard = 64;  // bytes around dst that must stay untouched
constexpr unsigned char kGuardByte = 0xA5;

// One reduce call, checked element by element and for writes outside dst.
void check_reduce(DataType t, ReduceOp op, size_t count, size_t off_dst, size_t off_a, size_t off_b,
                  Alias alias, std::mt19937_64& rng) {
  const size_t size = size_of(t), bytes = count * size;
  Bytes a_buf(bytes + 2 * kGuard, kGuardByte), b_buf(bytes + 2 * kGuard, kGuardByte),
      d_buf(bytes + 2 * kGuard, kGuardByte);
  unsigned char* a = a_buf.data() + kGuard + off_a;
  unsigned char* b = b_buf.data() + kGuard + off_b;
  unsigned char* d = d_buf.data() + kGuard + off_dst;
  fill_random(t, a, count, rng);
  fill_random(t, b, count, rng);
  const Bytes a0(a, a + bytes), b0(b, b + bytes);
  if (alias == Alias::dst_is_a) d = a;
  if (alias == Alias::dst_is_b) d = b;
  unsigned char* const guarded = alias == Alias::none       ? d_buf.data()
                                 : alias == Alias::dst_is_a ? a_buf.data()
                                                            : b_buf.data();
  const size_t guarded_off = alias == Alias::none       ? off_dst
                             : alias == Alias::dst_is_a ? off_a
                                                        : off_b;

  kernels::reduce(d, a, b, count, t, op);

  const std::string where = std::string(to_string(t)) + " " + std::string(to_string(op)) +
                            " count=" + std::to_string(count) +
                            " offsets=" + std::to_string(off_dst) + "/" + std::to_string(off_a) +
                            "/" + std::to_string(off_b) + " " + alias_name(alias) +
                            " isa=" + kernel_isa();
  int wrong = 0;
  for (size_t i = 0; i < count && wrong < 5; ++i) {
    const unsigned char *pa = a0.data() + i * size, *pb = b0.data() + i * size;
    if (is_integer(t)) {
      const int64_t want = ref_int(t, read_int(t, pa), read_int(t, pb), op);
      const int64_t got = read_int(t, d + i * size);
      if (want != got) {
        ++wrong;
        ADD_FAILURE() << where << " i=" << i << ": " << read_int(t, pa) << " op " << read_int(t, pb)
                      << " = " << got << ", want " << want;
      }
    } else {
      const double x = read_float(t, pa), y = read_float(t, pb);
      const double want = round_to(t, ref_op(x, y, op));
      const double got = read_float(t, d + i * size);
      if (!same_value(want, got)) {
        ++wrong;
        ADD_FAILURE() << where << " i=" << i << ": " << x << " op " << y << " = " << got
                      << ", want " << want;
      }
    }
  }
  // Nothing outside dst changed (the tails must not write past the end), nor the other input.
  for (size_t k = 0; k < kGuard + guarded_off; ++k)
    ASSERT_EQ(guarded[k], kGuardByte) << where << ": write before dst";
  for (size_t k = kGuard + guarded_off + bytes; k < bytes + 2 * kGuard; ++k)
    ASSERT_EQ(guarded[k], kGuardByte) << where << ": write after dst";
  if (alias != Alias::dst_is_a) {
    ASSERT_EQ(Bytes(a, a + bytes), a0) << where << ": a changed";
  }
  if (alias != Alias::dst_is_b) {
    ASSERT_EQ(Bytes(b, b + bytes), b0) << where << ": b changed";
  }
}

// Runs the body once with the best kernels for this CPU and once with the baseline ones.
template <class F>
void for_each_isa(F&& body) {
  for (bool baseline : {false, true}) {
    force_baseline_kernels(baseline);
    body();
  }
  force_baseline_kernels(false);
}

class KernelSweep : public ::testing::TestWithParam<std::tuple<DataType, ReduceOp>> {};

TEST_P(KernelSweep, MatchesReferenceForAllCountsOffsetsAndAliasing) {
  const DataType t = std::get<0>(GetParam());  // not a structured binding: lambdas capture it
  const ReduceOp op = std::get<1>(GetParam());
  std::mt19937_64 rng(1234 + 16 * static_cast<int>(t) + static_cast<int>(op));
  // (dst, a, b) byte offsets: aligned, all misaligned alike, and misaligned differently.
  const size_t offsets[][3] = {{0, 0, 0}, {1, 1, 1}, {3, 1, 2}, {0, 5, 7}};
  for_each_isa([&] {
    for (size_t count : kCounts)
      for (const auto& off : offsets)
        for (Alias alias : {Alias::none, Alias::dst_is_a, Alias::dst_is_b})
          check_reduce(t, op, count, off[0], off[1], off[2], alias, rng);
  });
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, KernelSweep,
                         ::testing::Combine(::testing::ValuesIn(kAllTypes),
                                            ::testing::ValuesIn(kAllOps)),
                         [](const auto& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_" +
                                  std::string(to_string(std::get<1>(info.param)));
                         });

INSTANTIATE_TEST_SUITE_P(IntegerTypesBitwiseOps, KernelSweep,
                         ::testing::Combine(::testing::ValuesIn(kIntegerTypes),
                                            ::testing::ValuesIn(kBitwiseOps)),
                         [](const auto& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_" +
                                  std::string(to_string(std::get<1>(info.param)));
                         });

// ---------------- specific rules ----------------

TEST(Kernels, BitwiseOperatorsAreRefusedOnFloatTypes) {
  for (DataType t : kAllTypes) {
    for (ReduceOp op : kBitwiseOps) {
      std::vector<unsigned char> a(16, 0x5a), b(16, 0x0f), d(16, 0xee);
      if (is_integer(t)) {
        EXPECT_NO_THROW(kernels::reduce(d.data(), a.data(), b.data(), 1, t, op));
        continue;
      }
      try {
        kernels::reduce(d.data(), a.data(), b.data(), 1, t, op);
        ADD_FAILURE() << to_string(op) << " on " << to_string(t) << " did not throw";
      } catch (const InvalidArgumentError& e) {
        EXPECT_NE(std::string(e.what()).find("integer types only"), std::string::npos) << e.what();
      }
      EXPECT_EQ(d, std::vector<unsigned char>(16, 0xee)) << "the destination was written";
    }
  }
}

#if defined(__x86_64__)
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}
#endif

TEST(Kernels, IsaIsReported) {
  const std::string isa = kernel_isa();
  EXPECT_TRUE(isa == "avx2+f16c" || isa == "baseline") << isa;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && cpu_has_f16c()) {
    EXPECT_EQ(isa, "avx2+f16c");
  }
#endif
}

TEST(Kernels, IntegersWrapLikeTwosComplement) {
  for_each_isa([] {
    int32_t a[2] = {INT32_MAX, INT32_MIN}, b[2] = {1, -1}, d[2];
    kernels::reduce(d, a, b, 2, DataType::int32, ReduceOp::sum);
    EXPECT_EQ(d[0], INT32_MIN);
    EXPECT_EQ(d[1], INT32_MAX);
    int64_t x[1] = {INT64_MAX}, y[1] = {2}, z[1];
    kernels::reduce(z, x, y, 1, DataType::int64, ReduceOp::prod);
    EXPECT_EQ(z[0], -2);
    int8_t p[1] = {-128}, q[1] = {-1}, r[1];
    kernels::reduce(r, p, q, 1, DataType::int8, ReduceOp::prod);
    EXPECT_EQ(r[0], -128);
    uint8_t u[1] = {200}, v[1] = {100}, w[1];
    kernels::reduce(w, u, v, 1, DataType::uint8, ReduceOp::sum);
    EXPECT_EQ(w[0], 44);
  });
}

// min/max: a NaN operand gives NaN (like torch.minimum/maximum); -0 orders below +0.
TEST(Kernels, FloatMinMaxPropagateNaNAndOrderSignedZeros) {
  for_each_isa([] {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    // Nine lanes so that both the vector body and the tail see every case.
    float a[9] = {nan, 1.0f, -0.0f, 0.0f, -INFINITY, 2.0f, nan, 3.0f, -0.0f};
    float b[9] = {1.0f, nan, 0.0f, -0.0f, nan, INFINITY, nan, 3.0f, -0.0f};
    float mn[9], mx[9];
    kernels::reduce(mn, a, b, 9, DataType::float32, ReduceOp::min);
    kernels::reduce(mx, a, b, 9, DataType::float32, ReduceOp::max);
    for (int i : {0, 1, 4, 6}) {
      EXPECT_TRUE(std::isnan(mn[i])) << i;
      EXPECT_TRUE(std::isnan(mx[i])) << i;
    }
    for (int i : {2, 3}) {
      EXPECT_EQ(std::bit_cast<uint32_t>(mn[i]), 0x80000000u) << "min(±0) is -0, lane " << i;
      EXPECT_EQ(std::bit_cast<uint32_t>(mx[i]), 0u) << "max(±0) is +0, lane " << i;
    }
    EXPECT_EQ(mn[5], 2.0f);
    EXPECT_EQ(mx[5], INFINITY);
    EXPECT_EQ(mn[7], 3.0f);
    EXPECT_TRUE(std::signbit(mn[8]) && std::signbit(mx[8]));
    // The same through float16 and bfloat16 (F16C and shift paths) and float64.
    const uint16_t h_nan = 0x7e00, h_one = 0x3c00, h_pz = 0x0000, h_nz = 0x8000;
    uint16_t ha[4] = {h_nan, h_one, h_nz, h_pz}, hb[4] = {h_one, h_nan, h_pz, h_nz}, hd[4];
    kernels::reduce(hd, ha, hb, 4, DataType::float16, ReduceOp::min);
    EXPECT_TRUE((hd[0] & 0x7c00) == 0x7c00 && (hd[0] & 0x3ff));
    EXPECT_TRUE((hd[1] & 0x7c00) == 0x7c00 && (hd[1] & 0x3ff));
    EXPECT_EQ(hd[2], h_nz);
    EXPECT_EQ(hd[3], h_nz);
    const uint16_t b_nan = 0x7fc0, b_one = 0x3f80;
    uint16_t ba[3] = {b_nan, b_one, h_pz}, bb[3] = {b_one, b_nan, h_nz}, bd[3];
    kernels::reduce(bd, ba, bb, 3, DataType::bfloat16, ReduceOp::max);
    EXPECT_TRUE(std::isnan(decode_bf16(bd[0])) && std::isnan(decode_bf16(bd[1])));
    EXPECT_EQ(bd[2], h_pz);
    double da[2] = {std::nan(""), 0.0}, db[2] = {-1.0, -0.0}, dd[2];
    kernels::reduce(dd, da, db, 2, DataType::float64, ReduceOp::min);
    EXPECT_TRUE(std::isnan(dd[0]));
    EXPECT_TRUE(dd[1] == 0 && std::signbit(dd[1]));
  });
}

TEST(Kernels, ReferenceApplyFollowsTheSameRules) {
  const double inf = INFINITY;
  const double values[] = {std::nan(""), -inf, -2.5, -0.0, 0.0, 1.0, 3.0, inf};
  for (ReduceOp op : kAllOps) {
    for (double x : values)
      for (double y : values)
        EXPECT_TRUE(same_value(ref_op(x, y, op), kernels::reference_apply(x, y, op)))
            << to_string(op) << "(" << x << ", " << y << ")";
  }
}

TEST(Kernels, HalfTypesComputeInFloatAndRoundToNearestEven) {
  for_each_isa([] {
    // float16: 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even gives 1.
    uint16_t a[3] = {0x3c00, 0x3c01, 0x7bff}, b[3] = {0x1000 /* 2^-11 */, 0x1000, 0x5000 /* 32 */};
    uint16_t d[3];
    kernels::reduce(d, a, b, 3, DataType::float16, ReduceOp::sum);
    EXPECT_EQ(d[0], 0x3c00);
    EXPECT_EQ(d[1], 0x3c02);  // (1 + 2^-10) + 2^-11: tie, the even neighbour is 1 + 2^-9
    EXPECT_EQ(d[2], 0x7c00);  // 65504 + 32 = 65536 rounds (tie, to even) to inf
    // bfloat16: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
    uint16_t ba[2] = {0x3f80, 0x3f81}, bb[2] = {0x3b80 /* 2^-8 */, 0x3b80}, bd[2];
    kernels::reduce(bd, ba, bb, 2, DataType::bfloat16, ReduceOp::sum);
    EXPECT_EQ(bd[0], 0x3f80);
    EXPECT_EQ(bd[1], 0x3f82);
  });
}

TEST(Kernels, ArgumentChecks) {
  float x[8] = {}, y[8] = {};
  EXPECT_NO_THROW(kernels::reduce(nullptr, nullptr, nullptr, 0, DataType::float32, ReduceOp::sum));
  EXPECT_THROW(kernels::reduce(nullptr, x, y, 1, DataType::float32, ReduceOp::sum),
               InvalidArgumentError);
  // dst overlapping an input partially is refused; exact aliasing is allowed.
  EXPECT_THROW(kernels::reduce(x + 1, x, y, 4, DataType::float32, ReduceOp::sum),
               InvalidArgumentError);
  EXPECT_THROW(kernels::reduce(x, x + 1, y, 4, DataType::float32, ReduceOp::sum),
               InvalidArgumentError);
  EXPECT_NO_THROW(kernels::reduce(x, x, x, 4, DataType::float32, ReduceOp::sum));
  EXPECT_THROW(kernels::reduce(x, x, y, 1, static_cast<DataType>(42), ReduceOp::sum),
               InvalidArgumentError);
  EXPECT_THROW(kernels::reduce(x, x, y, 1, DataType::float32, static_cast<ReduceOp>(9)),
               InvalidArgumentError);
  EXPECT_THROW(kernels::finalize_avg(x, 1, DataType::float32, 0), InvalidArgumentError);
  EXPECT_THROW(kernels::finalize_avg(x, 1, DataType::float32, -3), InvalidArgumentError);
}

TEST(Kernels, ReduceIntoIsInPlace) {
  for_each_isa([] {
    std::vector<float> d(100, 1.5f), s(100, 2.0f);
    kernels::reduce_into(d.data(), s.data(), d.size(), DataType::float32, ReduceOp::prod);
    for (float v : d) EXPECT_EQ(v, 3.0f);
  });
}

// ---------------- finalize_avg ----------------

TEST(Kernels, FinalizeAvgIntegersTruncateTowardZero) {
  for_each_isa([] {
    int32_t v[7] = {7, -7, 9, -9, INT32_MIN, INT32_MAX, 0};
    kernels::finalize_avg(v, 7, DataType::int32, 2);
    const int32_t want[7] = {3, -3, 4, -4, INT32_MIN / 2, INT32_MAX / 2, 0};
    for (int i = 0; i < 7; ++i) EXPECT_EQ(v[i], want[i]) << i;
    int8_t s8[3] = {-128, 127, -1};
    kernels::finalize_avg(s8, 3, DataType::int8, 3);
    EXPECT_EQ(s8[0], -42);
    EXPECT_EQ(s8[1], 42);
    EXPECT_EQ(s8[2], 0);
    uint8_t u8[2] = {255, 5};
    kernels::finalize_avg(u8, 2, DataType::uint8, 2);
    EXPECT_EQ(u8[0], 127);
    EXPECT_EQ(u8[1], 2);
    int64_t s64[2] = {INT64_MIN, INT64_MAX};
    kernels::finalize_avg(s64, 2, DataType::int64, 3);
    EXPECT_EQ(s64[0], INT64_MIN / 3);
    EXPECT_EQ(s64[1], INT64_MAX / 3);
  });
}

TEST(Kernels, FinalizeAvgMatchesReferenceForEveryType) {
  std::mt19937_64 rng(99);
  for_each_isa([&] {
    for (DataType t : kAllTypes)
      for (size_t count : kCounts)
        for (int64_t divisor : {1, 2, 3, 7, 64}) {
          const size_t size = size_of(t), bytes = count * size, off = 3;
          Bytes buf(bytes + off + kGuard, kGuardByte);
          unsigned char* p = buf.data() + off;
          fill_random(t, p, count, rng);
          const Bytes before(p, p + bytes);
          kernels::finalize_avg(p, count, t, divisor);
          for (size_t i = 0; i < count; ++i) {
            const unsigned char* x = before.data() + i * size;
            if (is_integer(t)) {
              ASSERT_EQ(read_int(t, p + i * size), read_int(t, x) / divisor)
                  << to_string(t) << " i=" << i << " isa=" << kernel_isa();
            } else {
              const double want = round_to(t, read_float(t, x) / static_cast<double>(divisor));
              ASSERT_TRUE(same_value(want, read_float(t, p + i * size)))
                  << to_string(t) << " " << read_float(t, x) << "/" << divisor << " = "
                  << read_float(t, p + i * size) << ", want " << want << " isa=" << kernel_isa();
            }
          }
          for (size_t k = off + bytes; k < buf.size(); ++k) ASSERT_EQ(buf[k], kGuardByte);
        }
  });
}

// ---------------- names ----------------

TEST(Types, NamesRoundTripAndNcclTestsSpellingsParse) {
  for (DataType t : kAllTypes) EXPECT_EQ(parse_data_type(to_string(t)), t);
  for (ReduceOp op : kAllOps) EXPECT_EQ(parse_reduce_op(to_string(op)), op);
  for (ReduceOp op : kBitwiseOps) EXPECT_EQ(parse_reduce_op(to_string(op)), op);
  EXPECT_EQ(to_string(ReduceOp::bxor), "bxor");
  const std::pair<const char*, DataType> aliases[] = {
      {"char", DataType::int8},       {"int", DataType::int32},
      {"half", DataType::float16},    {"fp16", DataType::float16},
      {"bf16", DataType::bfloat16},   {"float", DataType::float32},
      {"fp32", DataType::float32},    {"double", DataType::float64},
      {"FLOAT32", DataType::float32}, {"BFloat16", DataType::bfloat16}};
  for (const auto& [name, t] : aliases) EXPECT_EQ(parse_data_type(name), t) << name;
  EXPECT_EQ(parse_data_type("float128"), std::nullopt);
  EXPECT_EQ(parse_data_type(""), std::nullopt);
  EXPECT_EQ(parse_reduce_op("SUM"), ReduceOp::sum);
  EXPECT_EQ(parse_reduce_op("mean"), std::nullopt);
  EXPECT_EQ(size_of(DataType::bfloat16), 2u);
  EXPECT_EQ(size_of(DataType::int64), 8u);
  EXPECT_EQ(to_string(DataType::bfloat16), "bfloat16");
  EXPECT_EQ(to_string(ReduceOp::avg), "avg");
}

// ---------------- float16 / bfloat16 conversions ----------------

uint16_t f16_bits(float f) { return float16_t(f).bits; }
uint16_t bf16_bits(float f) { return bfloat16_t(f).bits; }
float from_f16(uint16_t h) {
  float16_t x;
  x.bits = h;
  return static_cast<float>(x);
}
float from_bf16(uint16_t h) {
  bfloat16_t x;
  x.bits = h;
  return static_cast<float>(x);
}

TEST(Float16, KnownBitPatterns) {
  EXPECT_EQ(f16_bits(1.0f), 0x3c00);
  EXPECT_EQ(f16_bits(-2.0f), 0xc000);
  EXPECT_EQ(f16_bits(0.0f), 0x0000);
  EXPECT_EQ(f16_bits(-0.0f), 0x8000);
  EXPECT_EQ(f16_bits(65504.0f), 0x7bff);
  EXPECT_EQ(f16_bits(0.1f), 0x2e66);
  EXPECT_EQ(f16_bits(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(f16_bits(std::ldexp(1.0f, -14)), 0x0400);     // smallest normal
  EXPECT_EQ(f16_bits(std::ldexp(1.0f, -24)), 0x0001);     // smallest subnormal
  EXPECT_EQ(f16_bits(std::ldexp(1023.0f, -24)), 0x03ff);  // largest subnormal
  EXPECT_EQ(f16_bits(INFINITY), 0x7c00);
  EXPECT_EQ(f16_bits(-INFINITY), 0xfc00);
  EXPECT_EQ(f16_bits(1e10f), 0x7c00);  // overflow
  EXPECT_EQ(f16_bits(-1e10f), 0xfc00);
  EXPECT_EQ(f16_bits(FLT_MAX), 0x7c00);
  EXPECT_EQ(f16_bits(1e-10f), 0x0000);  // underflow
  EXPECT_EQ(f16_bits(-1e-10f), 0x8000);
  EXPECT_EQ(f16_bits(std::numeric_limits<float>::denorm_min()), 0x0000);
  const uint16_t n = f16_bits(NAN);
  EXPECT_EQ(n & 0x7e00, 0x7e00) << "quiet NaN";
  // A signaling float NaN whose payload lies below float16's mantissa is still NaN, not inf.
  EXPECT_EQ(f16_bits(std::bit_cast<float>(0x7f800001u)) & 0x7e00, 0x7e00);
  EXPECT_EQ(f16_bits(std::bit_cast<float>(0xff800001u)), 0xfe00);
  EXPECT_EQ(from_f16(0x3c00), 1.0f);
  EXPECT_EQ(from_f16(0x7bff), 65504.0f);
  EXPECT_EQ(from_f16(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(from_f16(0xfc00), -INFINITY);
  EXPECT_TRUE(std::isnan(from_f16(0x7e00)));
  EXPECT_TRUE(std::isnan(from_f16(0x7c01)));  // signaling: comes back quiet, still NaN
}

TEST(Float16, RoundsToNearestEvenIncludingSubnormalsAndOverflow) {
  EXPECT_EQ(f16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie -> even (down)
  EXPECT_EQ(f16_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(f16_bits(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3c01);
  EXPECT_EQ(f16_bits(65519.0f), 0x7bff);                  // below the 65520 midpoint
  EXPECT_EQ(f16_bits(65520.0f), 0x7c00);                  // the midpoint ties to even: inf
  EXPECT_EQ(f16_bits(std::ldexp(1.0f, -25)), 0x0000);     // tie between 0 and 2^-24 -> 0
  EXPECT_EQ(f16_bits(std::ldexp(3.0f, -25)), 0x0002);     // tie between 1 and 2 ulps -> 2
  EXPECT_EQ(f16_bits(std::ldexp(1.5f, -25)), 0x0001);     // above the tie
  EXPECT_EQ(f16_bits(std::ldexp(2047.0f, -25)), 0x0400);  // rounds up into the normal range
  // Every midpoint between neighbouring float16 values, and one float either side of it,
  // against the test's own rounding.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const double lo = decode_f16(static_cast<uint16_t>(h));
    const double hi = h + 1 == 0x7c00 ? 65536.0 : decode_f16(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // exact: 12 significant bits
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      for (float s : {f, -f}) {
        const double want = round_f16(s);
        ASSERT_TRUE(same_value(want, decode_f16(f16_bits(s))))
            << "float " << s << " -> " << decode_f16(f16_bits(s)) << ", want " << want;
      }
    }
  }
}

TEST(Float16, RandomFloatsMatchReference) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    const uint16_t h = f16_bits(f);
    if (std::isnan(f)) {
      ASSERT_EQ(h & 0x7e00, 0x7e00);
      ASSERT_EQ(h & 0x8000, (std::bit_cast<uint32_t>(f) >> 16) & 0x8000);
    } else {
      ASSERT_TRUE(same_value(round_f16(f), decode_f16(h))) << f;
    }
  }
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t f16c_narrow(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float f16c_widen(uint16_t h) { return _cvtsh_ss(h); }

// The software conversions agree bit for bit with F16C, NaNs included, so the baseline and
// AVX2 kernels give identical results.
TEST(Float16, SoftwareConversionMatchesF16C) {
  if (!cpu_has_f16c()) GTEST_SKIP() << "no F16C";
  for (uint32_t h = 0; h < 0x10000; ++h)
    ASSERT_EQ(std::bit_cast<uint32_t>(from_f16(static_cast<uint16_t>(h))),
              std::bit_cast<uint32_t>(f16c_widen(static_cast<uint16_t>(h))))
        << std::hex << h;
  std::mt19937 rng(11);
  for (int i = 0; i < 2000000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    ASSERT_EQ(f16_bits(f), f16c_narrow(f)) << std::hex << std::bit_cast<uint32_t>(f);
  }
}
#endif

TEST(Float16, ExhaustiveRoundTripThroughFloat) {
  for (uint32_t i = 0; i < 0x10000; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = from_f16(h);
    const double want = decode_f16(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      const uint16_t back = f16_bits(f);
      ASSERT_EQ(back, h | 0x0200) << std::hex << h << ": NaN keeps sign and payload, made quiet";
    } else {
      ASSERT_TRUE(same_value(want, f)) << std::hex << h;
      ASSERT_EQ(f16_bits(f), h) << std::hex << h;
    }
  }
}

TEST(BFloat16, KnownBitPatternsAndRounding) {
  EXPECT_EQ(bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(bf16_bits(-2.0f), 0xc000);
  EXPECT_EQ(bf16_bits(-0.0f), 0x8000);
  EXPECT_EQ(bf16_bits(3.140625f), 0x4049);
  EXPECT_EQ(bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie -> even (down)
  EXPECT_EQ(bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(bf16_bits(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3f81);
  EXPECT_EQ(bf16_bits(FLT_MAX), 0x7f80);  // overflow to inf
  EXPECT_EQ(bf16_bits(-FLT_MAX), 0xff80);
  EXPECT_EQ(bf16_bits(INFINITY), 0x7f80);
  EXPECT_EQ(bf16_bits(std::numeric_limits<float>::denorm_min()), 0x0000);  // below half an ulp
  EXPECT_EQ(bf16_bits(std::bit_cast<float>(0x00018000u)), 0x0002);         // subnormal tie up
  EXPECT_EQ(bf16_bits(std::bit_cast<float>(0x7f800001u)), 0x7fc0);  // signaling NaN stays NaN
  EXPECT_EQ(bf16_bits(std::bit_cast<float>(0xffc00000u)), 0xffc0);
  EXPECT_EQ(from_bf16(0x3f80), 1.0f);
  EXPECT_EQ(from_bf16(0x0001), std::bit_cast<float>(0x00010000u));
  std::mt19937 rng(5);
  for (int i = 0; i < 2000000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    const uint16_t h = bf16_bits(f);
    if (std::isnan(f))
      ASSERT_TRUE(std::isnan(decode_bf16(h)));
    else
      ASSERT_TRUE(same_value(round_bf16(f), decode_bf16(h))) << f;
  }
}

TEST(BFloat16, ExhaustiveRoundTripThroughFloat) {
  for (uint32_t i = 0; i < 0x10000; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = from_bf16(h);
    ASSERT_EQ(std::bit_cast<uint32_t>(f), i << 16);
    const bool nan = (i & 0x7fff) > 0x7f80;
    ASSERT_EQ(bf16_bits(f), nan ? (h | 0x40) : h) << std::hex << h;
  }
}

// Every float16 and bfloat16 value through the kernels (F16C and software paths alike) gives the
// bits of types.cpp's conversions applied to the float32 result: the kernels' widening and
// rounding agree with float16_t/bfloat16_t everywhere, subnormals and overflow included.
TEST(Kernels, HalfTypeKernelsAgreeWithConversionsForEveryValue) {
  const float constants[] = {1.0f, -0.0f, 0.5f, 3.0f, -1.5f, 1e-3f, 65504.0f, 0.0f, INFINITY};
  std::vector<uint16_t> all(0x10000), other(0x10000), out(0x10000);
  for (uint32_t i = 0; i < 0x10000; ++i) all[i] = static_cast<uint16_t>(i);
  for_each_isa([&] {
    for (DataType t : {DataType::float16, DataType::bfloat16}) {
      const bool f16 = t == DataType::float16;
      const auto widen = [&](uint16_t h) { return f16 ? from_f16(h) : from_bf16(h); };
      const auto narrow = [&](float f) { return f16 ? f16_bits(f) : bf16_bits(f); };
      for (float c : constants) {
        std::fill(other.begin(), other.end(), narrow(c));
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max}) {
          kernels::reduce(out.data(), all.data(), other.data(), all.size(), t, op);
          for (uint32_t i = 0; i < 0x10000; ++i) {
            const float x = widen(all[i]), y = widen(other[i]);
            const float exact = op == ReduceOp::sum    ? x + y
                                : op == ReduceOp::prod ? x * y
                                                       : static_cast<float>(ref_op(x, y, op));
            const uint16_t want = narrow(exact);
            // min/max return some NaN for a NaN operand (its payload may mix with the other's).
            const bool nan_ok = (op == ReduceOp::min || op == ReduceOp::max) && std::isnan(exact) &&
                                std::isnan(widen(out[i]));
            ASSERT_TRUE(out[i] == want || nan_ok)
                << to_string(t) << " " << to_string(op) << " " << std::hex << all[i] << " with "
                << std::dec << c << ": " << std::hex << out[i] << ", want " << want
                << " isa=" << kernel_isa();
          }
        }
      }
    }
  });
}

}  // namespace
}  // namespace shoal
