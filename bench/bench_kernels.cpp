// Reduction kernels against memcpy of the same buffer size.
//
// Bytes counted (SetBytesProcessed) are the bytes the operation must move through memory:
//   memcpy(dst, src, n)          reads n, writes n            -> 2n per call
//   reduce(dst = a, a, b, n)     reads a and b, writes a       -> 3n per call
// so bytes_per_second of both is memory traffic and a kernel that runs at memory bandwidth
// shows the same bytes_per_second as memcpy. The reduce runs in place (dst == a), the way the
// collectives use it (reduce_into), so no write-allocate read of a separate dst is hidden.
//
// BM_Float32SumVsMemcpy alternates the two operations inside one benchmark and reports both
// rates and their ratio (sum_over_memcpy), which is robust to the drift of a shared machine.
// Its time column is that of calls_per_iteration sums (enough calls to move about 4 MiB).
//
//   bench_kernels --benchmark_filter=VsMemcpy     # the ratios only
#include <benchmark/benchmark.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "core/reduce.hpp"

namespace {

using shoal::DataType;
using shoal::ReduceOp;
using shoal::kernels::detail::force_baseline_kernels;
using shoal::kernels::detail::kernel_isa;

constexpr int64_t kKiB = 1024, kMiB = 1024 * 1024;

// A page-aligned buffer, touched once so that page faults stay out of the measurement.
struct Buffer {
  explicit Buffer(size_t bytes)
      : data(static_cast<unsigned char*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096))) {
    std::memset(data.get(), 0, bytes);
  }
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char, Free> data;
  unsigned char* get() const { return data.get(); }
};

// Fills with small, normal values of the type (no denormals, which are slow on some CPUs;
// repeated in-place sums grow but stay finite or saturate harmlessly).
void fill(DataType dtype, unsigned char* p, size_t count, double value) {
  for (size_t i = 0; i < count; ++i) {
    switch (dtype) {
      case DataType::float32: {
        float v = static_cast<float>(value);
        std::memcpy(p + 4 * i, &v, 4);
        break;
      }
      case DataType::float64:
        std::memcpy(p + 8 * i, &value, 8);
        break;
      case DataType::int32: {
        int32_t v = static_cast<int32_t>(value);
        std::memcpy(p + 4 * i, &v, 4);
        break;
      }
      case DataType::float16: {
        shoal::float16_t v(static_cast<float>(value));
        std::memcpy(p + 2 * i, &v.bits, 2);
        break;
      }
      case DataType::bfloat16: {
        shoal::bfloat16_t v(static_cast<float>(value));
        std::memcpy(p + 2 * i, &v.bits, 2);
        break;
      }
      default:
        std::memset(p + i * shoal::size_of(dtype), 1, shoal::size_of(dtype));
        break;
    }
  }
}

void BM_Memcpy(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  Buffer src(bytes), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.get(), src.get(), bytes);
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(bytes));
}

#if defined(__x86_64__)
// The same copy with non-temporal (streaming) stores, 64 bytes at a time: what a copy can reach
// when it does not read the destination into the cache first. glibc's memcpy streams only
// beyond 3/4 of the last-level cache it is told of (480 MiB on this project's VMs), so on
// these machines a 64 MiB memcpy does not, and this is the higher of the two copy rates.
void BM_StreamingCopy(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  Buffer src(bytes), dst(bytes);
  for (auto _ : state) {
    for (size_t i = 0; i + 64 <= bytes; i += 64) {
      const auto* s = reinterpret_cast<const __m128i*>(src.get() + i);
      auto* d = reinterpret_cast<__m128i*>(dst.get() + i);
      const __m128i a = _mm_load_si128(s), b = _mm_load_si128(s + 1), c = _mm_load_si128(s + 2),
                    e = _mm_load_si128(s + 3);
      _mm_stream_si128(d, a);
      _mm_stream_si128(d + 1, b);
      _mm_stream_si128(d + 2, c);
      _mm_stream_si128(d + 3, e);
    }
    _mm_sfence();
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(bytes));
}
#endif

// range(0): bytes per buffer; range(1): 1 forces the baseline (non-AVX2) kernels.
template <DataType kType, ReduceOp kOp>
void BM_Reduce(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / shoal::size_of(kType);
  force_baseline_kernels(state.range(1) != 0);
  Buffer a(bytes), b(bytes);
  fill(kType, a.get(), count, 1.0);
  fill(kType, b.get(), count, 1.0);
  for (auto _ : state) {
    shoal::kernels::reduce(a.get(), a.get(), b.get(), count, kType, kOp);
    benchmark::DoNotOptimize(a.get());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 3 * static_cast<int64_t>(bytes));
  state.SetLabel(std::string(shoal::to_string(kType)) + " " + std::string(shoal::to_string(kOp)) +
                 " " + kernel_isa());
  force_baseline_kernels(false);
}

// Alternates memcpy and in-place float32 sum on buffers of the same size; reports the traffic
// rate of each and their ratio. The benchmark's own time is that of the sums.
void BM_Float32SumVsMemcpy(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / sizeof(float);
  Buffer a(bytes), b(bytes), src(bytes), dst(bytes);
  fill(DataType::float32, a.get(), count, 0.0);
  fill(DataType::float32, b.get(), count, 1e-3);
  // Enough calls per sample (about 4 MiB moved) that clock reads do not matter.
  const int reps = static_cast<int>(std::max<size_t>(1, (4 * kMiB) / bytes));
  using Clock = std::chrono::steady_clock;
  double sum_s = 0, copy_s = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    for (int r = 0; r < reps; ++r) {
      std::memcpy(dst.get(), src.get(), bytes);
      benchmark::ClobberMemory();
    }
    const auto t1 = Clock::now();
    for (int r = 0; r < reps; ++r) {
      shoal::kernels::reduce(a.get(), a.get(), b.get(), count, DataType::float32, ReduceOp::sum);
      benchmark::ClobberMemory();
    }
    const auto t2 = Clock::now();
    const double copy = std::chrono::duration<double>(t1 - t0).count();
    const double sum = std::chrono::duration<double>(t2 - t1).count();
    copy_s += copy;
    sum_s += sum;
    state.SetIterationTime(sum);  // the benchmark's time: `reps` in-place sums
  }
  const double calls = static_cast<double>(state.iterations()) * reps;
  const double sum_rate = 3.0 * static_cast<double>(bytes) * calls / sum_s;
  const double copy_rate = 2.0 * static_cast<double>(bytes) * calls / copy_s;
  state.counters["sum_GBps"] = sum_rate / 1e9;
  state.counters["memcpy_GBps"] = copy_rate / 1e9;
  state.counters["sum_over_memcpy"] = sum_rate / copy_rate;
  state.counters["calls_per_iteration"] = reps;
  state.SetBytesProcessed(state.iterations() * reps * 3 * static_cast<int64_t>(bytes));
  state.SetLabel(kernel_isa());
}

void sizes(benchmark::internal::Benchmark* b) {
  for (int64_t bytes : {32 * kKiB, 1 * kMiB, 64 * kMiB}) b->Args({bytes, 0});
}
void sizes_both_isas(benchmark::internal::Benchmark* b) {
  for (int64_t bytes : {32 * kKiB, 1 * kMiB, 64 * kMiB})
    for (int64_t baseline : {0, 1}) b->Args({bytes, baseline});
  b->ArgNames({"bytes", "baseline"});
}

BENCHMARK(BM_Memcpy)->Arg(32 * kKiB)->Arg(1 * kMiB)->Arg(64 * kMiB);
#if defined(__x86_64__)
BENCHMARK(BM_StreamingCopy)->Arg(1 * kMiB)->Arg(64 * kMiB);
#endif
BENCHMARK(BM_Reduce<DataType::float32, ReduceOp::sum>)->Apply(sizes_both_isas);
BENCHMARK(BM_Reduce<DataType::float32, ReduceOp::max>)->Apply(sizes);
BENCHMARK(BM_Reduce<DataType::bfloat16, ReduceOp::sum>)->Apply(sizes);
BENCHMARK(BM_Reduce<DataType::float16, ReduceOp::sum>)->Apply(sizes_both_isas);
BENCHMARK(BM_Reduce<DataType::float64, ReduceOp::sum>)->Apply(sizes);
BENCHMARK(BM_Reduce<DataType::int32, ReduceOp::sum>)->Apply(sizes);
BENCHMARK(BM_Float32SumVsMemcpy)->Arg(32 * kKiB)->Arg(1 * kMiB)->Arg(64 * kMiB)->UseManualTime();

}  // namespace

BENCHMARK_MAIN();
