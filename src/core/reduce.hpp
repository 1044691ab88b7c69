// Reduction kernels. Vectorized (the compiler's auto-vectorization over 32/64-byte blocks);
// pointers may be unaligned; float16/bfloat16 are widened to float32 for the arithmetic.
#pragma once

#include <cstddef>
#include <cstdint>

#include "shoal/types.hpp"

namespace shoal::kernels {

/// dst[i] = a[i] op b[i] for i < count. dst may alias a or b (exactly, not partially).
/// avg reduces like sum; divide afterwards with finalize_avg.
void reduce(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op);

/// dst[i] = dst[i] op src[i].
inline void reduce_into(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op) {
  reduce(dst, dst, src, count, dtype, op);
}

/// dst[i] /= divisor (integer division for integer types): the last step of ReduceOp::avg.
void finalize_avg(void* dst, size_t count, DataType dtype, int64_t divisor);

/// Scalar reference implementation of one element for the arithmetic operators (the bitwise
/// ones throw InvalidArgument: they are not defined on doubles).
double reference_apply(double a, double b, ReduceOp op);

namespace detail {
/// Tests and benchmarks: run the portable kernels even where AVX2/F16C exist (false restores).
void force_baseline_kernels(bool baseline);
/// "avx2+f16c" or "baseline": the kernels reduce() runs.
const char* kernel_isa();
}  // namespace detail

}  // namespace shoal::kernels
