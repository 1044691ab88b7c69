// Reduction kernels. Each (element codec, operator) pair is one element-wise loop template that
// GCC auto-vectorizes; it is compiled twice, for baseline x86-64 (SSE2) and for AVX2+F16C, and
// the variant is chosen once at run time from the CPU's features, so the default -O3 build
// (no -march=native) still runs 256-bit code. float16 uses F16C's vcvtph2ps/vcvtps2ph where the
// CPU has them and branch-free software conversions otherwise; bfloat16 is widened and rounded
// with integer shifts, which vectorize on every ISA.
//
// Rules (tested in tests/unit/test_kernels.cpp):
//  - Integers wrap (two's complement): sum and prod are computed in the unsigned type.
//  - float min/max propagate NaN (a NaN operand gives NaN, as torch.minimum/maximum) and order
//    -0 below +0 (IEEE 754-2019 minimum/maximum), so they are commutative bit for bit and every
//    reduction order of a collective gives the same bits.
//  - float16/bfloat16 compute in float32 and round back to nearest even. For sum, prod, min,
//    max and the division of avg this equals rounding the exact result once (float32 has more
//    than 2p+2 bits for p = 11 and 8), except for bfloat16 products and quotients that fall
//    below float32's normal range (rounded twice there).
#include "core/reduce.hpp"

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/check.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define SHOAL_KERNELS_X86 1
#define SHOAL_TARGET_AVX2 __attribute__((target("avx2,f16c")))
#else
#define SHOAL_KERNELS_X86 0
#endif

#define SHOAL_ALWAYS_INLINE __attribute__((always_inline)) inline

// "No dependence between iterations of the next loop" (see reduce_span), for GCC and clang.
#if defined(__clang__)
#define SHOAL_IVDEP _Pragma("clang loop vectorize(assume_safety)")
// Some loops (int64 prod, divisions) do not vectorize: not worth a warning.
#pragma clang diagnostic ignored "-Wpass-failed"
#else
#define SHOAL_IVDEP _Pragma("GCC ivdep")
#endif

namespace shoal::kernels {
namespace {

using Byte = unsigned char;

// Element access through memcpy: buffers may be unaligned, and a misaligned typed dereference
// is undefined behaviour. GCC turns these into plain (unaligned) vector loads and stores.
template <class T>
SHOAL_ALWAYS_INLINE T load(const Byte* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}
template <class T>
SHOAL_ALWAYS_INLINE void store(Byte* p, T value) {
  std::memcpy(p, &value, sizeof value);
}

// ---- operators on one element (the F16C loop has its 8-lane versions in apply8) ----

struct Sum {
  template <class T>
  SHOAL_ALWAYS_INLINE static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }
};

struct Prod {
  template <class T>
  SHOAL_ALWAYS_INLINE static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;  // uint8 promotes to int: 255 * 255 still fits
      return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    } else {
      return a * b;
    }
  }
};

// float min without branches. If a < b or b < a, both selections give the smaller. Otherwise
// (equal, or a NaN) they give b and a, and OR-ing their bits gives the value itself when equal,
// -0 for ±0, and a NaN when either is NaN (all exponent bits set, and the NaN's nonzero
// mantissa bits). `x < y ? x : y` is exactly x86's minps(x, y), which apply8 uses.
struct Min {
  template <class T>
  SHOAL_ALWAYS_INLINE static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return a < b ? a : b;
    } else {
      using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
      return std::bit_cast<T>(std::bit_cast<Bits>(a < b ? a : b) |
                              std::bit_cast<Bits>(b < a ? b : a));
    }
  }
};

// max(a, b) = -min(-a, -b): the same NaN and signed-zero rules, mirrored (max(±0) = +0).
struct Max {
  template <class T>
  SHOAL_ALWAYS_INLINE static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return a > b ? a : b;
    } else {
      return -Min::apply<T>(-a, -b);
    }
  }
};

// Bitwise operators, on integer types only (their table entries stay null for floats).
struct BitAnd {
  template <class T>
  SHOAL_ALWAYS_INLINE static T apply(T a, T b) {
    return static_cast<T>(a & b);
  }
};
struct BitOr {
  template <class T>
  SHOAL_ALWAYS_INLINE static T apply(T a, T b) {
    return static_cast<T>(a | b);
  }
};
struct BitXor {
  template <class T>
  SHOAL_ALWAYS_INLINE static T apply(T a, T b) {
    return static_cast<T>(a ^ b);
  }
};

// ---- element codecs: storage type in memory, compute type for the arithmetic ----

template <class T>
struct Plain {
  using Storage = T;
  using Compute = T;
  SHOAL_ALWAYS_INLINE static T widen(T x) { return x; }
  SHOAL_ALWAYS_INLINE static T narrow(T x) { return x; }
};

// bfloat16: same rules as bfloat16_t in types.cpp, repeated here inline so the loops vectorize.
struct BF16 {
  using Storage = uint16_t;
  using Compute = float;
  SHOAL_ALWAYS_INLINE static float widen(uint16_t x) {
    return std::bit_cast<float>(static_cast<uint32_t>(x) << 16);
  }
  SHOAL_ALWAYS_INLINE static uint16_t narrow(float x) {
    const uint32_t u = std::bit_cast<uint32_t>(x);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (u >> 16) | 0x40u;
    return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
};

// float16 without F16C (CPUs before 2013, and other architectures): branch-free conversions
// that vectorize, after Maratyszcza's FP16 library (fp16_ieee_to/from_fp32_value). They use
// float arithmetic in the default rounding mode to do the rounding and the subnormal cases.
// Results equal F16C's bit for bit, NaN payloads included (checked for all 2^32 floats once;
// test_kernels compares them with types.cpp for every float16 value).
struct F16Soft {
  using Storage = uint16_t;
  using Compute = float;
  // Comparisons are on values below 2^31 as int32 (SSE2 has no unsigned vector compare), and
  // selections are bit masks: with ?: GCC moves the float arithmetic into branches, which
  // -ftrapping-math then forbids it to turn back into vector code.
  SHOAL_ALWAYS_INLINE static float widen(uint16_t h) {
    const uint32_t w = static_cast<uint32_t>(h) << 16, sign = w & 0x80000000u, two_w = w + w;
    // Normal, inf and NaN: move exponent and mantissa into place, rebias by multiplying.
    const float normal = std::bit_cast<float>((two_w >> 4) + (0xe0u << 23)) * 0x1p-112f;
    // Subnormal: the mantissa as the low bits of 0.5f (whose ulp is 2^-24), minus 0.5f.
    const float subnormal = std::bit_cast<float>((two_w >> 17) | (126u << 23)) - 0.5f;
    const uint32_t is_subnormal = 0u - static_cast<uint32_t>((two_w >> 27) == 0);  // all ones
    const uint32_t bits = (std::bit_cast<uint32_t>(subnormal) & is_subnormal) |
                          (std::bit_cast<uint32_t>(normal) & ~is_subnormal);
    return std::bit_cast<float>(sign | bits);
  }
  SHOAL_ALWAYS_INLINE static uint16_t narrow(float f) {
    // Scaling up then down rounds away the bits below float16's precision and saturates to inf.
    float base = (std::fabs(f) * 0x1p+112f) * 0x1p-110f;
    const uint32_t w = std::bit_cast<uint32_t>(f), sign = w & 0x80000000u;
    const auto magnitude = static_cast<int32_t>(w & 0x7fffffffu);
    int32_t exponent = magnitude >> 23;
    if (exponent < 0x71) exponent = 0x71;  // float16's subnormals share one alignment
    // Adding a power of two aligns the mantissa so that float addition rounds it to nearest even.
    base = std::bit_cast<float>((static_cast<uint32_t>(exponent) << 23) + 0x07800000u) + base;
    const uint32_t bits = std::bit_cast<uint32_t>(base);
    const uint32_t finite = ((bits >> 13) & 0x7c00u) + (bits & 0x0fffu);
    const uint32_t nan = 0x7e00u | ((w >> 13) & 0x3ffu);  // quiet, top of the payload kept
    const uint32_t is_nan = 0u - static_cast<uint32_t>(magnitude > 0x7f800000);  // all ones
    return static_cast<uint16_t>((sign >> 16) | (nan & is_nan) | (finite & ~is_nan));
  }
};

// Marks float16 in the AVX2 table, where it gets the F16C loops below instead of a codec.
struct F16Hw {};

// ---- loops ----

// bfloat16, two elements per 32-bit word: the low half becomes a float by a shift, the high half
// by a mask, and the results go back the same way. There are no lane shuffles (widening 16-bit
// lanes to 32 and packing them back costs more than the arithmetic), and since both halves get
// the same treatment the byte order does not matter.
SHOAL_ALWAYS_INLINE uint32_t bf16_rounded_word(float x) {  // the result in the upper 16 bits
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t nearest_even = u + 0x7fffu + ((u >> 16) & 1u);
  return x != x ? u | 0x400000u : nearest_even;  // NaN: make quiet (and never round into inf)
}

template <class Op>
SHOAL_ALWAYS_INLINE void reduce_bf16_pairs(Byte* dst, const Byte* a, const Byte* b, size_t count) {
  const size_t words = count / 2;
  SHOAL_IVDEP
#pragma GCC unroll 2
  for (size_t i = 0; i < words; ++i) {
    const uint32_t wa = load<uint32_t>(a + 4 * i), wb = load<uint32_t>(b + 4 * i);
    const float lo = Op::apply(std::bit_cast<float>(wa << 16), std::bit_cast<float>(wb << 16));
    const float hi =
        Op::apply(std::bit_cast<float>(wa & 0xffff0000u), std::bit_cast<float>(wb & 0xffff0000u));
    store<uint32_t>(dst + 4 * i,
                    (bf16_rounded_word(lo) >> 16) | (bf16_rounded_word(hi) & 0xffff0000u));
  }
  if (count % 2 != 0) {
    const size_t last = 2 * (count - 1);
    const float x = BF16::widen(load<uint16_t>(a + last)),
                y = BF16::widen(load<uint16_t>(b + last));
    store<uint16_t>(dst + last, BF16::narrow(Op::apply(x, y)));
  }
}

template <class Codec, class Op>
SHOAL_ALWAYS_INLINE void reduce_span(Byte* dst, const Byte* a, const Byte* b, size_t count) {
  if constexpr (std::is_same_v<Codec, BF16>) {
    reduce_bf16_pairs<Op>(dst, a, b, count);
  } else {
    using S = typename Codec::Storage;
    constexpr size_t kSize = sizeof(S);
    // dst may equal a or b, but iteration i reads only a[i] and b[i] before writing dst[i]:
    // there is no dependence between iterations. ivdep says so; without it GCC adds run-time
    // overlap checks and falls back to scalar code in exactly the in-place case (dst == a).
    SHOAL_IVDEP
#pragma GCC unroll 4
    for (size_t i = 0; i < count; ++i) {
      const auto x = Codec::widen(load<S>(a + i * kSize));
      const auto y = Codec::widen(load<S>(b + i * kSize));
      store<S>(dst + i * kSize, Codec::narrow(Op::apply(x, y)));
    }
  }
}

// Large buffers go in chunks of kChunkBytes, each starting with a software prefetch of the
// inputs kPrefetchAhead bytes further on. Without it, loops with more arithmetic per byte
// (bfloat16, min/max) waited on memory (the hardware prefetchers restart at every 4 KiB page):
// on 64 MiB buffers it took bfloat16 sum from 21 to 12 ms of CPU time, float32 sum from 10 to 9.
constexpr size_t kChunkBytes = 1024, kPrefetchAhead = 2048;

// Computed as an integer: the address may lie past the buffer (a prefetch never faults), and
// forming such a pointer by pointer arithmetic would be undefined behaviour.
SHOAL_ALWAYS_INLINE void prefetch_chunk(const Byte* p, size_t offset) {
  const uintptr_t base = reinterpret_cast<uintptr_t>(p) + offset + kPrefetchAhead;
  for (size_t line = 0; line < kChunkBytes; line += 64)
    __builtin_prefetch(reinterpret_cast<const void*>(base + line));
}

template <class Codec, class Op>
SHOAL_ALWAYS_INLINE void reduce_loop(Byte* dst, const Byte* a, const Byte* b, size_t count) {
  constexpr size_t kChunk = kChunkBytes / sizeof(typename Codec::Storage);
  size_t offset = 0;
  for (; count >= kChunk; count -= kChunk, offset += kChunkBytes) {
    prefetch_chunk(a, offset);
    prefetch_chunk(b, offset);
    reduce_span<Codec, Op>(dst + offset, a + offset, b + offset, kChunk);
  }
  reduce_span<Codec, Op>(dst + offset, a + offset, b + offset, count);
}

template <class Codec>
SHOAL_ALWAYS_INLINE void divide_loop(Byte* dst, size_t count, int64_t divisor) {
  using S = typename Codec::Storage;
  using C = typename Codec::Compute;
  constexpr size_t kSize = sizeof(S);
  if constexpr (std::is_integral_v<C>) {
    // Truncating division like NCCL's integer avg; divisor >= 1, so no overflow (the operand
    // is widened to int64, and |x / d| <= |x|).
    for (size_t i = 0; i < count; ++i) {
      const int64_t x = load<S>(dst + i * kSize);
      store<S>(dst + i * kSize, static_cast<S>(x / divisor));
    }
  } else {
    const C d = static_cast<C>(divisor);
    for (size_t i = 0; i < count; ++i)
      store<S>(dst + i * kSize, Codec::narrow(Codec::widen(load<S>(dst + i * kSize)) / d));
  }
}

using ReduceFn = void (*)(Byte*, const Byte*, const Byte*, size_t);
using DivideFn = void (*)(Byte*, size_t, int64_t);

template <class Codec, class Op>
void reduce_baseline(Byte* dst, const Byte* a, const Byte* b, size_t count) {
  reduce_loop<Codec, Op>(dst, a, b, count);
}
template <class Codec>
void divide_baseline(Byte* dst, size_t count, int64_t divisor) {
  divide_loop<Codec>(dst, count, divisor);
}

#if SHOAL_KERNELS_X86
template <class Codec, class Op>
SHOAL_TARGET_AVX2 void reduce_avx2(Byte* dst, const Byte* a, const Byte* b, size_t count) {
  reduce_loop<Codec, Op>(dst, a, b, count);
}
template <class Codec>
SHOAL_TARGET_AVX2 void divide_avx2(Byte* dst, size_t count, int64_t divisor) {
  divide_loop<Codec>(dst, count, divisor);
}

// float16 with F16C, 8 elements at a time. The intrinsics must sit in functions that carry the
// target attribute themselves (a baseline-ISA function may neither inline them nor, for clang,
// pass __m256 values), so these loops and operators are written out instead of reusing
// reduce_loop and Op::apply. The operators follow the scalar ones exactly.
SHOAL_TARGET_AVX2 SHOAL_ALWAYS_INLINE __m256 load8_f16(const Byte* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i_u*>(p)));
}
SHOAL_TARGET_AVX2 SHOAL_ALWAYS_INLINE void store8_f16(Byte* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i_u*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
SHOAL_TARGET_AVX2 SHOAL_ALWAYS_INLINE __m256 min8(__m256 a, __m256 b) {
  return _mm256_or_ps(_mm256_min_ps(a, b), _mm256_min_ps(b, a));  // see Min
}

template <class Op>
SHOAL_TARGET_AVX2 SHOAL_ALWAYS_INLINE __m256 apply8(__m256 a, __m256 b) {
  if constexpr (std::is_same_v<Op, Sum>) {
    return _mm256_add_ps(a, b);
  } else if constexpr (std::is_same_v<Op, Prod>) {
    return _mm256_mul_ps(a, b);
  } else if constexpr (std::is_same_v<Op, Min>) {
    return min8(a, b);
  } else {
    static_assert(std::is_same_v<Op, Max>);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    return _mm256_xor_ps(min8(_mm256_xor_ps(a, sign), _mm256_xor_ps(b, sign)), sign);
  }
}

template <class Op>
SHOAL_TARGET_AVX2 SHOAL_ALWAYS_INLINE void reduce_f16c_span(Byte* dst, const Byte* a, const Byte* b,
                                                            size_t count) {
  size_t i = 0;
#pragma GCC unroll 4
  for (; i + 8 <= count; i += 8)
    store8_f16(dst + 2 * i, apply8<Op>(load8_f16(a + 2 * i), load8_f16(b + 2 * i)));
  if (i < count) {
    // Tail of 1-7 elements: through zero-padded copies, with the same arithmetic as the body.
    const size_t bytes = 2 * (count - i);
    Byte ta[16] = {}, tb[16] = {}, td[16];
    std::memcpy(ta, a + 2 * i, bytes);
    std::memcpy(tb, b + 2 * i, bytes);
    store8_f16(td, apply8<Op>(load8_f16(ta), load8_f16(tb)));
    std::memcpy(dst + 2 * i, td, bytes);
  }
}

// The chunking of reduce_loop, repeated: a baseline-ISA template cannot inline an AVX2 function.
template <class Op>
SHOAL_TARGET_AVX2 void reduce_f16c(Byte* dst, const Byte* a, const Byte* b, size_t count) {
  constexpr size_t kChunk = kChunkBytes / 2;
  size_t offset = 0;
  for (; count >= kChunk; count -= kChunk, offset += kChunkBytes) {
    prefetch_chunk(a, offset);
    prefetch_chunk(b, offset);
    reduce_f16c_span<Op>(dst + offset, a + offset, b + offset, kChunk);
  }
  reduce_f16c_span<Op>(dst + offset, a + offset, b + offset, count);
}

SHOAL_TARGET_AVX2 void divide_f16c(Byte* dst, size_t count, int64_t divisor) {
  const __m256 d = _mm256_set1_ps(static_cast<float>(divisor));
  size_t i = 0;
  for (; i + 8 <= count; i += 8) store8_f16(dst + 2 * i, _mm256_div_ps(load8_f16(dst + 2 * i), d));
  if (i < count) {
    const size_t bytes = 2 * (count - i);
    Byte t[16] = {};
    std::memcpy(t, dst + 2 * i, bytes);
    store8_f16(t, _mm256_div_ps(load8_f16(t), d));
    std::memcpy(dst + 2 * i, t, bytes);
  }
}
#endif

// ---- dispatch tables, one per ISA, indexed by DataType and ReduceOp ----

struct KernelTable {
  const char* isa;
  ReduceFn reduce[kNumDataTypes][kNumReduceOps];
  DivideFn divide[kNumDataTypes];
};

template <bool kAvx2, class Codec, class Op>
constexpr ReduceFn reduce_fn() {
#if SHOAL_KERNELS_X86
  if constexpr (std::is_same_v<Codec, F16Hw>)
    return &reduce_f16c<Op>;
  else if constexpr (kAvx2)
    return &reduce_avx2<Codec, Op>;
  else
    return &reduce_baseline<Codec, Op>;
#else
  return &reduce_baseline<Codec, Op>;
#endif
}

template <bool kAvx2, class Codec>
constexpr DivideFn divide_fn() {
#if SHOAL_KERNELS_X86
  if constexpr (std::is_same_v<Codec, F16Hw>)
    return &divide_f16c;
  else if constexpr (kAvx2)
    return &divide_avx2<Codec>;
  else
    return &divide_baseline<Codec>;
#else
  return &divide_baseline<Codec>;
#endif
}

template <bool kAvx2, class Codec>
constexpr void fill(KernelTable& t, DataType dtype) {
  const auto d = static_cast<int>(dtype);
  t.reduce[d][static_cast<int>(ReduceOp::sum)] = reduce_fn<kAvx2, Codec, Sum>();
  t.reduce[d][static_cast<int>(ReduceOp::prod)] = reduce_fn<kAvx2, Codec, Prod>();
  t.reduce[d][static_cast<int>(ReduceOp::min)] = reduce_fn<kAvx2, Codec, Min>();
  t.reduce[d][static_cast<int>(ReduceOp::max)] = reduce_fn<kAvx2, Codec, Max>();
  t.reduce[d][static_cast<int>(ReduceOp::avg)] = reduce_fn<kAvx2, Codec, Sum>();  // then divide
  t.divide[d] = divide_fn<kAvx2, Codec>();
  if constexpr (!std::is_same_v<Codec, F16Hw>) {
    if constexpr (std::is_integral_v<typename Codec::Compute>) {
      t.reduce[d][static_cast<int>(ReduceOp::band)] = reduce_fn<kAvx2, Codec, BitAnd>();
      t.reduce[d][static_cast<int>(ReduceOp::bor)] = reduce_fn<kAvx2, Codec, BitOr>();
      t.reduce[d][static_cast<int>(ReduceOp::bxor)] = reduce_fn<kAvx2, Codec, BitXor>();
    }
  }
}

template <bool kAvx2>
constexpr KernelTable make_table() {
  KernelTable t{};
  t.isa = kAvx2 ? "avx2+f16c" : "baseline";
  fill<kAvx2, Plain<int8_t>>(t, DataType::int8);
  fill<kAvx2, Plain<uint8_t>>(t, DataType::uint8);
  fill<kAvx2, Plain<int32_t>>(t, DataType::int32);
  fill<kAvx2, Plain<int64_t>>(t, DataType::int64);
  fill<kAvx2, std::conditional_t<kAvx2, F16Hw, F16Soft>>(t, DataType::float16);
  fill<kAvx2, BF16>(t, DataType::bfloat16);
  fill<kAvx2, Plain<float>>(t, DataType::float32);
  fill<kAvx2, Plain<double>>(t, DataType::float64);
  return t;
}

constexpr KernelTable kBaselineTable = make_table<false>();
#if SHOAL_KERNELS_X86
constexpr KernelTable kAvx2Table = make_table<true>();
#endif

const KernelTable* best_table() {
#if SHOAL_KERNELS_X86
  __builtin_cpu_init();
  // avx2 also checks that the OS saves YMM registers; F16C is CPUID.1:ECX bit 29 (clang's
  // __builtin_cpu_supports does not know "f16c").
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  if (__builtin_cpu_supports("avx2") && f16c) return &kAvx2Table;
#endif
  return &kBaselineTable;
}

std::atomic<const KernelTable*> g_table{nullptr};

const KernelTable& table() {
  const KernelTable* t = g_table.load(std::memory_order_acquire);
  if (t == nullptr) [[unlikely]] {
    t = best_table();  // idempotent: a race stores the same pointer twice
    g_table.store(t, std::memory_order_release);
  }
  return *t;
}

bool overlaps_partially(const void* x, const void* y, size_t bytes) {
  const auto px = reinterpret_cast<uintptr_t>(x), py = reinterpret_cast<uintptr_t>(y);
  return px != py && px < py + bytes && py < px + bytes;
}

}  // namespace

void reduce(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op) {
  const auto d = static_cast<unsigned>(dtype), o = static_cast<unsigned>(op);
  SHOAL_CHECK(d < kNumDataTypes && o < kNumReduceOps, InvalidArgument,
              "reduce: invalid data type " << d << " or operator " << o);
  SHOAL_CHECK(defined_for(op, dtype), InvalidArgument,
              "reduce: " << to_string(op) << " is defined for integer types only, not "
                         << to_string(dtype));
  if (count == 0) return;
  SHOAL_CHECK(dst != nullptr && a != nullptr && b != nullptr, InvalidArgument,
              "reduce: null buffer for " << count << " elements of " << to_string(dtype));
  const size_t bytes = count * size_of(dtype);
  SHOAL_CHECK(!overlaps_partially(dst, a, bytes) && !overlaps_partially(dst, b, bytes),
              InvalidArgument,
              "reduce: the destination overlaps an input partially (it may only equal it)");
  table().reduce[d][o](static_cast<Byte*>(dst), static_cast<const Byte*>(a),
                       static_cast<const Byte*>(b), count);
}

void finalize_avg(void* dst, size_t count, DataType dtype, int64_t divisor) {
  const auto d = static_cast<unsigned>(dtype);
  SHOAL_CHECK(d < kNumDataTypes, InvalidArgument, "finalize_avg: invalid data type " << d);
  SHOAL_CHECK(divisor >= 1, InvalidArgument,
              "finalize_avg: divisor " << divisor << " must be the number of ranks (>= 1)");
  if (count == 0 || divisor == 1) return;
  SHOAL_CHECK(dst != nullptr, InvalidArgument,
              "finalize_avg: null buffer for " << count << " elements");
  table().divide[d](static_cast<Byte*>(dst), count, divisor);
}

double reference_apply(double a, double b, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return a + b;
    case ReduceOp::prod:
      return a * b;
    case ReduceOp::min:
      if (std::isnan(a)) return a;
      if (std::isnan(b)) return b;
      if (a == b) return std::signbit(a) ? a : b;
      return a < b ? a : b;
    case ReduceOp::max:
      if (std::isnan(a)) return a;
      if (std::isnan(b)) return b;
      if (a == b) return std::signbit(a) ? b : a;
      return a > b ? a : b;
    case ReduceOp::band:
    case ReduceOp::bor:
    case ReduceOp::bxor:
      break;  // integer-only: not a rule on doubles
  }
  SHOAL_THROW(InvalidArgument, "reference_apply: invalid operator " << static_cast<int>(op));
}

namespace detail {

// Test and benchmark hooks (declared where used; not part of the library's interface).
/// Selects the baseline kernels (true) or the best ones for this CPU (false).
void force_baseline_kernels(bool baseline) {
  g_table.store(baseline ? &kBaselineTable : best_table(), std::memory_order_release);
}
/// "avx2+f16c" or "baseline": the kernels reduce() runs.
const char* kernel_isa() { return table().isa; }

}  // namespace detail
}  // namespace shoal::kernels
