// shoal-bench: nccl-tests' measurement of shoal's collectives.
//
//   shoal-run -n 2 shoal-bench all_reduce -b 8 -e 64M -f 2 -n 20 -w 5 -c 1 [-d float] [-o sum]
//
// The measurement itself -- flags, sizes, per-rank counts, buffer shifts, warmup, timing (max
// over ranks), busbw and the 13-column table -- is tools/bench/nccl_tests_driver.c, the same
// code the peer harnesses in bench/peers/ run, so their lines compare one to one. What is
// shoal's own: every data type and operator (-d, -o), a check of every element of every timed
// iteration's call against a reference computed on the host (-c 1), and --json.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "algorithms/registry.hpp"
#include "bench/nccl_tests_driver.h"
#include "shoal/communicator.hpp"

namespace {

using shoal::bfloat16_t;
using shoal::DataType;
using shoal::float16_t;
using shoal::ReduceOp;

constexpr int kExitUsage = 2;

// A usage error is the same on every rank and only rank 0 says what it is. The other ranks
// leave a few seconds later, so that a launcher which stops the job at the first failed rank
// (shoal-run, torchrun, mpirun) hears rank 0's message instead of killing it before it prints.
int usage_exit(int env_rank) {
  if (env_rank != 0) std::this_thread::sleep_for(std::chrono::seconds(5));
  return kExitUsage;
}
constexpr int kJsonOption = 256;
constexpr int kAlgoOption = 257;
constexpr unsigned kResidues = 17;  // the fill takes 17 values per rank, as nccl-tests' peers

// nccl-tests' names for the type column.
const char* nccl_type_name(DataType d) {
  switch (d) {
    case DataType::int8:
      return "int8";
    case DataType::uint8:
      return "uint8";
    case DataType::int32:
      return "int32";
    case DataType::int64:
      return "int64";
    case DataType::float16:
      return "half";
    case DataType::bfloat16:
      return "bfloat16";
    case DataType::float32:
      return "float";
    case DataType::float64:
      return "double";
  }
  return "?";
}

const char* op_name(ReduceOp op) { return shoal::to_string(op).data(); }

struct Bench {
  shoal::Communicator* comm = nullptr;
  DataType dtype = DataType::float32;
  ReduceOp op = ReduceOp::sum;
  std::string json_path;
  std::string algo;         // --algo: forced for the benchmarked collective (through SHOAL_ALGO)
  std::vector<PbRow> rows;  // rank 0's, for --json
};

// ---- the fill and its reference ----
//
// Element j of rank r's send buffer holds value(r, (slot(j) + 5r + 7 rep) mod 17): slot() is a
// multiplicative hash of j, so that the pattern has no short period (a block moved by any
// offset shows), and rep changes between checked calls (a stale result shows). The values keep
// every result exact in every data type and every reduction order:
//  - integers take large values, so that sums and products wrap (as C unsigned arithmetic);
//    avg is the wrapped sum divided by the number of ranks, truncating;
//  - floats sum small multiples of 1/4 whose partial sums stay within the integers the type
//    holds exactly (bfloat16: 256, float16: 2048), multiply signed powers of two within the
//    type's range, and avg rounds sum/p once (float32 holds the half/bfloat16 roundings).
// The expected value of an element therefore depends on its slot and the ranks only, and is
// computed on the host from these values -- never by calling shoal.

inline unsigned slot(size_t j) {
  uint32_t h = static_cast<uint32_t>(j) * 0x9E3779B1u;
  h ^= h >> 15;
  return static_cast<unsigned>((static_cast<uint64_t>(h) * kResidues) >> 32);
}

template <class T>
constexpr bool kIsInt = std::is_integral_v<T>;

template <class T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>)
    return static_cast<double>(static_cast<float>(v));
  else
    return static_cast<double>(v);
}

// Rounds once to T (the double holds an exact value, or sum/p for avg).
template <class T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, double>)
    return v;
  else if constexpr (std::is_same_v<T, float>)
    return static_cast<float>(v);
  else
    return T(static_cast<float>(v));
}

// Integers that a float type holds exactly: 2^(significand bits).
template <class T>
double exact_integers() {
  if constexpr (std::is_same_v<T, bfloat16_t>)
    return 256.0;
  else if constexpr (std::is_same_v<T, float16_t>)
    return 2048.0;
  else if constexpr (std::is_same_v<T, float>)
    return 16777216.0;
  else
    return 9007199254740992.0;
}

// Largest e with 2^e finite in T.
template <class T>
int max_exponent() {
  if constexpr (std::is_same_v<T, float16_t>)
    return 15;
  else if constexpr (std::is_same_v<T, double>)
    return 1023;
  else
    return 127;
}

template <class T>
T int_value(ReduceOp op, unsigned q) {
  if (op == ReduceOp::prod) {
    int64_t v = 2 * static_cast<int64_t>(q % 8) + 1;  // odd: a product never collapses to 0
    if (std::is_signed_v<T> && q % 5 == 1) v = -v;
    return static_cast<T>(v);
  }
  // spread over the whole type: q - 8 times about 1/16 of its range (uint8: q times 15)
  const int64_t m = std::is_signed_v<T> ? static_cast<int64_t>(q) - 8 : static_cast<int64_t>(q);
  uint64_t scale = 15;
  if constexpr (sizeof(T) == 4) scale = 0x10000001u;
  if constexpr (sizeof(T) == 8) scale = 0x1000000000000001ull;
  return static_cast<T>(static_cast<uint64_t>(m) * scale);  // wraps, as intended
}

template <class T>
double float_value(ReduceOp op, int r, int nranks, unsigned q) {
  switch (op) {
    case ReduceOp::prod: {
      // ranks beyond max_exponent contribute +-1, so that no partial product overflows
      double v = (r < max_exponent<T>() && (q & 1u)) ? 2.0 : 1.0;
      return q % 5 == 1 ? -v : v;
    }
    case ReduceOp::min:
    case ReduceOp::max:
      return (static_cast<double>(q) - 8.0) * 0.25;
    case ReduceOp::sum:
    case ReduceOp::avg:
    default: {
      // |value| <= k/4 with k * ranks <= the exact integers: every partial sum is exact; ranks
      // beyond that many contribute 0
      const double limit = exact_integers<T>();
      double k = limit / nranks;
      k = k > 8 ? 8 : k < 1 ? 1 : static_cast<double>(static_cast<int64_t>(k));
      if (r >= limit) return 0.0;
      const auto width = static_cast<unsigned>(2 * k + 1);
      return (static_cast<double>(q % width) - k) * 0.25;
    }
  }
}

// The values of one checked call: per rank and slot, and their reduction per slot.
template <class T>
struct Tables {
  int nranks = 0;
  std::vector<T> vals;  // [rank * 17 + slot]
  T red[kResidues];

  Tables(ReduceOp op, int n, int rep) : nranks(n), vals(static_cast<size_t>(n) * kResidues) {
    const unsigned rep_off = 7u * static_cast<unsigned>(rep % static_cast<int>(kResidues));
    for (int r = 0; r < n; ++r)
      for (unsigned s = 0; s < kResidues; ++s) {
        const unsigned q =
            (s + 5u * static_cast<unsigned>(r % static_cast<int>(kResidues)) + rep_off) % kResidues;
        T v;
        if constexpr (kIsInt<T>)
          v = int_value<T>(op, q);
        else
          v = from_double<T>(float_value<T>(op, r, n, q));
        vals[static_cast<size_t>(r) * kResidues + s] = v;
      }
    for (unsigned s = 0; s < kResidues; ++s) red[s] = reduce(op, s);
  }

  T val(int r, unsigned s) const { return vals[static_cast<size_t>(r) * kResidues + s]; }

  T reduce(ReduceOp op, unsigned s) const {
    if constexpr (kIsInt<T>) {
      uint64_t acc = op == ReduceOp::prod ? 1 : 0;  // sum and prod wrap mod 2^64, then mod 2^bits
      int64_t lo = static_cast<int64_t>(val(0, s)), hi = lo;
      uint64_t all = ~uint64_t{0}, any = 0, odd = 0;  // bitwise and, or, xor
      for (int r = 0; r < nranks; ++r) {
        const auto v = static_cast<int64_t>(val(r, s));
        if (op == ReduceOp::prod)
          acc *= static_cast<uint64_t>(v);
        else
          acc += static_cast<uint64_t>(v);
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
        all &= static_cast<uint64_t>(v);
        any |= static_cast<uint64_t>(v);
        odd ^= static_cast<uint64_t>(v);
      }
      switch (op) {
        case ReduceOp::min:
          return static_cast<T>(lo);
        case ReduceOp::max:
          return static_cast<T>(hi);
        case ReduceOp::band:
          return static_cast<T>(all);
        case ReduceOp::bor:
          return static_cast<T>(any);
        case ReduceOp::bxor:
          return static_cast<T>(odd);
        case ReduceOp::avg:
          return static_cast<T>(static_cast<int64_t>(static_cast<T>(acc)) / nranks);
        default:
          return static_cast<T>(acc);
      }
    } else {
      double acc = op == ReduceOp::prod ? 1.0 : 0.0;  // exact: see float_value
      double lo = to_double(val(0, s)), hi = lo;
      for (int r = 0; r < nranks; ++r) {
        const double v = to_double(val(r, s));
        if (op == ReduceOp::prod)
          acc *= v;
        else
          acc += v;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
      }
      switch (op) {
        case ReduceOp::min:
          return from_double<T>(lo);
        case ReduceOp::max:
          return from_double<T>(hi);
        case ReduceOp::avg:
          return from_double<T>(acc / nranks);
        default:
          return from_double<T>(acc);
      }
    }
  }
};

template <class T>
bool same(T a, T b) {
  if constexpr (kIsInt<T>)
    return a == b;
  else
    return to_double(a) == to_double(b);  // NaN never matches
}

// A value that is not `v`: its bits inverted (marks where a result must land).
template <class T>
T not_value(T v) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  for (auto& c : b) c = static_cast<unsigned char>(~c);
  std::memcpy(&v, b, sizeof(T));
  return v;
}

bool has_result(const PbData& d) { return d.coll != COLL_REDUCE || d.rank == d.root; }

// Calls f(i, expected) for each element of this rank's result.
template <class T, class F>
void for_each_expected(const PbData& d, const Tables<T>& t, F&& f) {
  const size_t pc = d.k.param_count;
  switch (d.coll) {
    case COLL_ALL_REDUCE:
    case COLL_REDUCE:
      for (size_t i = 0; i < pc; ++i) f(i, t.red[slot(i)]);
      break;
    case COLL_BROADCAST:
      for (size_t i = 0; i < pc; ++i) f(i, t.val(d.root, slot(i)));
      break;
    case COLL_REDUCE_SCATTER: {
      const size_t base = static_cast<size_t>(d.rank) * pc;
      for (size_t i = 0; i < pc; ++i) f(i, t.red[slot(base + i)]);
      break;
    }
    case COLL_ALL_GATHER:
      for (int r = 0; r < d.nranks; ++r)
        for (size_t i = 0; i < pc; ++i) f(static_cast<size_t>(r) * pc + i, t.val(r, slot(i)));
      break;
    case COLL_ALL_TO_ALL: {
      const size_t base = static_cast<size_t>(d.rank) * pc;
      for (int r = 0; r < d.nranks; ++r)
        for (size_t i = 0; i < pc; ++i)
          f(static_cast<size_t>(r) * pc + i, t.val(r, slot(base + i)));
      break;
    }
    default:
      break;
  }
}

template <class T>
void init_data(void* ctx, const PbData* d) {
  const auto& b = *static_cast<Bench*>(ctx);
  const Tables<T> t(b.op, d->nranks, d->rep);
  // where the result lands: a value that differs from the expected one (as nccl-tests' -1s);
  // in place, the inputs then overwrite part of it
  if (has_result(*d)) {
    T* out = static_cast<T*>(d->recv);
    for_each_expected<T>(*d, t, [&](size_t i, T e) { out[i] = not_value(e); });
  }
  T* in = static_cast<T*>(d->send);
  for (size_t j = 0; j < d->k.send_count; ++j) in[j] = t.val(d->rank, slot(j));
}

template <class T>
long long check_data(void* ctx, const PbData* d) {
  const auto& b = *static_cast<Bench*>(ctx);
  const Tables<T> t(b.op, d->nranks, d->rep);
  long long wrong = 0;
  if (has_result(*d)) {
    const T* out = static_cast<const T*>(d->recv);
    for_each_expected<T>(*d, t, [&](size_t i, T e) { wrong += !same(out[i], e); });
  }
  if (!d->in_place) {  // out of place, the input is read only
    const T* in = static_cast<const T*>(d->send);
    for (size_t j = 0; j < d->k.send_count; ++j) wrong += !same(in[j], t.val(d->rank, slot(j)));
  }
  return wrong;
}

template <class T>
void set_data_ops(PeerOps& ops) {
  ops.init_data = &init_data<T>;
  ops.check_data = &check_data<T>;
  ops.elem_size = sizeof(T);
}

// ---- PeerOps over a shoal::Communicator ----

Bench& bench(void* ctx) { return *static_cast<Bench*>(ctx); }

void s_barrier(void* ctx) { bench(ctx).comm->barrier(); }

double s_reduce_double(void* ctx, double v, int op) {
  bench(ctx).comm->all_reduce(&v, 1, DataType::float64,
                              op == 1   ? ReduceOp::sum
                              : op == 2 ? ReduceOp::min
                                        : ReduceOp::max);
  return v;
}

long long s_sum_ll(void* ctx, long long v) {
  int64_t x = v;
  bench(ctx).comm->all_reduce(&x, 1, DataType::int64, ReduceOp::sum);
  return x;
}

int s_has_inplace(void*, Coll) { return 1; }

// In place, send and recv are nccl-tests' pointers into the receive buffer, which are where
// shoal's in-place overloads read and write: all_gather's block at rank*count, reduce_scatter's
// result at rank*count.
void s_run(void* ctx, Coll c, const void* send, void* recv, size_t count, int root, int in_place,
           int) {
  Bench& b = bench(ctx);
  shoal::Communicator& comm = *b.comm;
  switch (c) {
    case COLL_ALL_REDUCE:
      if (in_place)
        comm.all_reduce(recv, count, b.dtype, b.op);
      else
        comm.all_reduce(send, recv, count, b.dtype, b.op);
      break;
    case COLL_ALL_GATHER:
      if (in_place)
        comm.all_gather(recv, count, b.dtype);
      else
        comm.all_gather(send, recv, count, b.dtype);
      break;
    case COLL_REDUCE_SCATTER:
      if (in_place)
        comm.reduce_scatter(const_cast<void*>(send), count, b.dtype, b.op);
      else
        comm.reduce_scatter(send, recv, count, b.dtype, b.op);
      break;
    case COLL_BROADCAST:
      if (in_place)
        comm.broadcast(recv, count, b.dtype, root);
      else
        comm.broadcast(send, recv, count, b.dtype, root);
      break;
    case COLL_REDUCE:
      if (in_place)
        comm.reduce(recv, count, b.dtype, b.op, root);
      else
        comm.reduce(send, recv, count, b.dtype, b.op, root);
      break;
    case COLL_ALL_TO_ALL:
      if (in_place)
        comm.all_to_all(recv, count, b.dtype);
      else
        comm.all_to_all(send, recv, count, b.dtype);
      break;
    default:
      break;
  }
}

void s_report(void* ctx, const PbRow* row) {
  Bench& b = bench(ctx);
  if (b.comm->rank() == 0 && !b.json_path.empty()) b.rows.push_back(*row);
}

// ---- flags beyond the peers' ----

int accept_datatype(const char* name) { return shoal::parse_data_type(name).has_value(); }
int accept_op(const char* name) { return shoal::parse_reduce_op(name).has_value(); }

int handle_option(void* ctx, int val, const char* arg, int rank) {
  if (val == kJsonOption) {
    if (!arg || !*arg) {
      if (rank == 0) std::fprintf(stderr, "--json needs a file name\n");
      return -1;
    }
    static_cast<Bench*>(ctx)->json_path = arg;
    return 0;
  }
  if (val == kAlgoOption) {
    if (!arg || !*arg) {
      if (rank == 0)
        std::fprintf(stderr, "--algo needs an algorithm name (shoal-info --algorithms)\n");
      return -1;
    }
    static_cast<Bench*>(ctx)->algo = arg;
    return 0;
  }
  return -1;
}

nlohmann::json timing_json(const PbRow& r) {
  if (!r.available) return nullptr;
  nlohmann::json j = {{"time_us", r.sec * 1e6}, {"algbw", r.algbw}, {"busbw", r.busbw}};
  j["wrong"] = r.wrong < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.wrong);
  if (r.p50_sec > 0) {  // -p 1
    j["p50_us"] = r.p50_sec * 1e6;
    j["p99_us"] = r.p99_sec * 1e6;
  }
  return j;
}

bool write_json(const Bench& b, const BenchOptions& o, const std::string& header) {
  nlohmann::json rows = nlohmann::json::array();
  double bw_sum = 0;
  int bw_count = 0, errors = 0;
  for (size_t i = 0; i + 1 < b.rows.size(); i += 2) {  // out of place, then in place
    const PbRow& out = b.rows[i];
    const PbRow& in = b.rows[i + 1];
    rows.push_back({{"collective", kCollNames[o.coll]},
                    {"size", out.bytes},
                    {"count", out.count},
                    {"type", out.type},
                    {"redop", out.redop},
                    {"root", out.root},
                    {"out_of_place", timing_json(out)},
                    {"in_place", timing_json(in)}});
    for (const PbRow* r : {&out, &in}) {
      if (!r->available) continue;
      bw_sum += r->busbw;
      ++bw_count;
      errors += r->wrong > 0;
    }
  }
  const char* avg_names[] = {"rank 0", "mean", "min", "max"};
  nlohmann::json doc = {
      {"tool", "shoal-bench"},
      {"header", header},
      {"communicator", b.comm->describe()},
      {"collective", kCollNames[o.coll]},
      {"nranks", b.comm->size()},
      {"hosts", b.comm->num_hosts()},
      {"dtype", std::string(shoal::to_string(b.dtype))},
      {"type", nccl_type_name(b.dtype)},
      {"op", op_name(b.op)},
      {"iters", o.iters},
      {"warmup", o.warmup},
      {"check", o.check},
      {"time_over_ranks", avg_names[o.average]},
      {"root", o.root},
      {"min_bytes", o.min_bytes},
      {"max_bytes", o.max_bytes},
      {"step_factor", o.step_factor},
      {"step_bytes", o.step_bytes},
      {"rows", rows},
      {"out_of_bounds", errors},
      {"avg_busbw", bw_count ? bw_sum / bw_count : 0.0},
  };
  std::ofstream f(b.json_path);
  f << doc.dump(2) << "\n";
  f.close();
  if (!f) {
    std::fprintf(stderr, "shoal-bench: cannot write %s\n", b.json_path.c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  // Flags come first, so that a bad one fails fast, before any rendezvous; rank 0 of the
  // launcher's environment prints the usage.
  const char* rank_env = std::getenv("RANK");
  const int env_rank = rank_env ? std::atoi(rank_env) : 0;
  Bench b;
  static const struct option extra_longopts[] = {{"json", required_argument, nullptr, kJsonOption},
                                                 {"algo", required_argument, nullptr, kAlgoOption},
                                                 {nullptr, 0, nullptr, 0}};
  PbParseExt ext;
  std::memset(&ext, 0, sizeof ext);
  ext.accept_datatype = accept_datatype;
  ext.accept_op = accept_op;
  ext.usage_datatype_op =
      "  -d,--datatype T     int8 uint8 int32 int64 float16|half bfloat16 float32|float\n"
      "                      float64|double, default float\n"
      "  -o,--op OP          sum prod min max avg (reductions), default sum\n";
  ext.usage_extra =
      "  --json FILE         rank 0 also writes the header and every line to FILE as JSON\n"
      "  --algo NAME         run the collective with this algorithm (shoal-info --algorithms);\n"
      "                      sets SHOAL_ALGO for the process, so pass it to every rank\n"
      "  With -c 1, after timing, every timed iteration's call is run again at its offset on\n"
      "  fresh data and every element is compared with a reference computed on the host;\n"
      "  the exit status is 1 when any is wrong.\n";
  ext.longopts = extra_longopts;
  ext.handle = handle_option;
  ext.ctx = &b;
  BenchOptions o;
  const int parsed = pb_parse_args_ex(argc, argv, env_rank, &o, &ext);
  if (parsed != 0) return parsed < 0 ? usage_exit(env_rank) : 0;
  b.dtype = *shoal::parse_data_type(o.datatype);
  b.op = *shoal::parse_reduce_op(o.op);
  if (!shoal::defined_for(b.op, b.dtype)) {
    if (env_rank == 0)
      std::fprintf(stderr, "shoal-bench: -o %s is defined for integer types only, not -d %s\n",
                   op_name(b.op), o.datatype);
    return usage_exit(env_rank);
  }
  if (!b.algo.empty()) {
    // Validated before any rendezvous; every rank gets the same flags, so all choose alike.
    const std::string spec = std::string(kCollNames[o.coll]) + ":" + b.algo;
    try {
      shoal::algorithms::parse_override(spec);
    } catch (const shoal::Error& e) {
      if (env_rank == 0)
        std::fprintf(stderr, "shoal-bench: --algo %s: %s\n", b.algo.c_str(), e.what());
      return usage_exit(env_rank);
    }
    setenv("SHOAL_ALGO", spec.c_str(), 1);
    // Small collectives among ranks of one host would run through shared slots, not a schedule.
    setenv("SHOAL_FLAT_MAX_BYTES", "0", 1);
  }

  int rank = env_rank;
  try {
    shoal::Communicator comm = shoal::Communicator::from_environment();
    rank = comm.rank();
    b.comm = &comm;

    char header[256];
    std::snprintf(header, sizeof header,
                  "shoal-bench %s: %d ranks (%d hosts), dtype %s, op %s, iters %d, warmup %d",
                  kCollNames[o.coll], comm.size(), comm.num_hosts(),
                  std::string(shoal::to_string(b.dtype)).c_str(), op_name(b.op), o.iters, o.warmup);
    // One line that scripts can read the topology from (tests/tools/test_netcluster.sh), then
    // the communicator's own description.
    const std::string details = "topology: num_hosts " + std::to_string(comm.num_hosts()) +
                                ", local_size " + std::to_string(comm.local_size()) +
                                " (rank 0's host)\n# " + comm.describe();

    PeerOps ops;
    std::memset(&ops, 0, sizeof ops);
    ops.name = "shoal-bench";
    ops.library = "shoal";
    ops.details = details.c_str();
    ops.header = header;
    ops.rank = comm.rank();
    ops.size = comm.size();
    ops.rs_inplace = RS_INPLACE_AT_RANK_OFFSET;
    ops.ctx = &b;
    ops.barrier = s_barrier;
    ops.reduce_double = s_reduce_double;
    ops.sum_ll = s_sum_ll;
    ops.has_inplace = s_has_inplace;
    ops.run = s_run;
    ops.type_name = nccl_type_name(b.dtype);
    ops.op_name = op_name(b.op);
    ops.check_every_iter = 1;
    ops.report = s_report;
    switch (b.dtype) {
      case DataType::int8:
        set_data_ops<int8_t>(ops);
        break;
      case DataType::uint8:
        set_data_ops<uint8_t>(ops);
        break;
      case DataType::int32:
        set_data_ops<int32_t>(ops);
        break;
      case DataType::int64:
        set_data_ops<int64_t>(ops);
        break;
      case DataType::float16:
        set_data_ops<float16_t>(ops);
        break;
      case DataType::bfloat16:
        set_data_ops<bfloat16_t>(ops);
        break;
      case DataType::float32:
        set_data_ops<float>(ops);
        break;
      case DataType::float64:
        set_data_ops<double>(ops);
        break;
    }

    int rc = peer_bench_main(&o, &ops);
    if (rank == 0 && !b.json_path.empty() && rc != kExitUsage && !write_json(b, o, header)) rc = 1;
    return rc;
  } catch (const shoal::Error& e) {
    // A failed collective: say so and leave at once. The peers see this rank go and fail in
    // turn (or time out); nothing here waits for them. The message names the rank.
    std::fflush(stdout);
    std::fprintf(stderr, "shoal-bench: %s\n", e.what());
    std::fflush(stderr);
    std::_Exit(1);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "shoal-bench: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    std::_Exit(1);
  }
}
