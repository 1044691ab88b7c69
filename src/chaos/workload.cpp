#include "chaos/workload.hpp"

#include <algorithm>
#include <random>
#include <sstream>

#include "core/mix.hpp"

namespace shoal::chaos {
namespace {

template <class T>
T combine(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::max:
      return std::max(a, b);
    case ReduceOp::min:
      return std::min(a, b);
    default:
      return a + b;
  }
}

// A value no input and no result can take (inputs are -9..9, results at most 64 times that).
template <class T>
constexpr T kSentinel = T(101);

template <class T>
std::string run_typed(Communicator& comm, const OpSpec& s, const std::vector<int>& members,
                      int64_t epoch, int64_t op) {
  Buffers<T> b = prepare<T>(s, members, comm.rank(), epoch, op);
  const size_t n = s.count;
  switch (s.kind) {
    case Kind::all_reduce:
      comm.all_reduce(b.send.data(), b.recv.data(), n, s.dtype, s.op);
      break;
    case Kind::all_gather:
      comm.all_gather(b.send.data(), b.recv.data(), n, s.dtype);
      break;
    case Kind::reduce_scatter:
      comm.reduce_scatter(b.send.data(), b.recv.data(), n, s.dtype, s.op);
      break;
    case Kind::broadcast:
      comm.broadcast(b.recv.data(), n, s.dtype, s.root(comm.size()));
      break;
    case Kind::barrier:
      comm.barrier();
      break;
  }
  return difference(s, b);
}

}  // namespace

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::all_reduce:
      return "all_reduce";
    case Kind::all_gather:
      return "all_gather";
    case Kind::reduce_scatter:
      return "reduce_scatter";
    case Kind::broadcast:
      return "broadcast";
    case Kind::barrier:
      return "barrier";
  }
  return "?";
}

OpSpec derive_op(uint64_t seed, int64_t epoch, int64_t op, int size) {
  std::mt19937_64 rng(splitmix64(
      seed ^ splitmix64(static_cast<uint64_t>(epoch) * 1000003ull + static_cast<uint64_t>(op))));
  OpSpec s{};
  const int k = static_cast<int>(rng() % 100);
  s.kind = k < 45   ? Kind::all_reduce
           : k < 62 ? Kind::all_gather
           : k < 77 ? Kind::reduce_scatter
           : k < 93 ? Kind::broadcast
                    : Kind::barrier;
  static const DataType dts[] = {DataType::float32, DataType::int32, DataType::float64};
  static const ReduceOp ops[] = {ReduceOp::sum, ReduceOp::max, ReduceOp::min};
  s.dtype = dts[rng() % 3];
  s.op = ops[rng() % 3];
  const int r = static_cast<int>(rng() % 1000);
  size_t n;
  if (r < 500)
    n = 1 + rng() % 1024;
  else if (r < 800)
    n = 1 + rng() % 65536;
  else if (r < 970)
    n = 1 + rng() % 262144;
  else
    n = 524288 + rng() % 786432;  // large: 2-5 MiB of float32, 4-10 MiB of float64
  if (rng() % 3 == 0) n |= 1;     // odd counts
  if (s.kind == Kind::all_gather || s.kind == Kind::reduce_scatter)
    n = std::max<size_t>(1, n / static_cast<size_t>(size));
  if (s.kind == Kind::reduce_scatter) s.op = ReduceOp::sum;
  s.count = n;
  s.root_pick = rng();
  return s;
}

int input_value(int id, int64_t epoch, int64_t op, size_t i) {
  const uint64_t h = static_cast<uint64_t>(id) * 131u + static_cast<uint64_t>(op) * 31u +
                     static_cast<uint64_t>(epoch) * 7u + static_cast<uint64_t>(i) * 17u +
                     (static_cast<uint64_t>(i) >> 7) * 5u;
  return static_cast<int>(h % 19u) - 9;
}

template <class T>
Buffers<T> prepare(const OpSpec& s, const std::vector<int>& members, int rank, int64_t epoch,
                   int64_t op) {
  const size_t n = s.count, size = members.size();
  const int me = members[static_cast<size_t>(rank)];
  auto v = [&](int id, size_t i) { return static_cast<T>(input_value(id, epoch, op, i)); };
  Buffers<T> b;
  switch (s.kind) {
    case Kind::all_reduce:
      b.send.resize(n);
      for (size_t i = 0; i < n; ++i) b.send[i] = v(me, i);
      b.recv.assign(n, kSentinel<T>);
      b.expect.resize(n);
      for (size_t i = 0; i < n; ++i) {
        T acc = v(members[0], i);
        for (size_t r = 1; r < size; ++r) acc = combine(s.op, acc, v(members[r], i));
        b.expect[i] = acc;
      }
      break;
    case Kind::all_gather:
      b.send.resize(n);
      for (size_t i = 0; i < n; ++i) b.send[i] = v(me, i);
      b.recv.assign(n * size, kSentinel<T>);
      b.expect.resize(n * size);
      for (size_t r = 0; r < size; ++r)
        for (size_t i = 0; i < n; ++i) b.expect[r * n + i] = v(members[r], i);
      break;
    case Kind::reduce_scatter:
      b.send.resize(n * size);
      for (size_t i = 0; i < n * size; ++i) b.send[i] = v(me, i);
      b.recv.assign(n, kSentinel<T>);
      b.expect.resize(n);
      for (size_t i = 0; i < n; ++i) {
        T acc = 0;
        for (size_t r = 0; r < size; ++r) acc += v(members[r], static_cast<size_t>(rank) * n + i);
        b.expect[i] = acc;
      }
      break;
    case Kind::broadcast: {
      const int root = s.root(static_cast<int>(size));
      b.recv.resize(n);
      for (size_t i = 0; i < n; ++i) b.recv[i] = rank == root ? v(me, i) : kSentinel<T>;
      b.expect.resize(n);
      for (size_t i = 0; i < n; ++i) b.expect[i] = v(members[static_cast<size_t>(root)], i);
      break;
    }
    case Kind::barrier:
      break;
  }
  return b;
}

template <class T>
std::string difference(const OpSpec& s, const Buffers<T>& b) {
  if (b.recv.size() != b.expect.size())
    return std::string(kind_name(s.kind)) + ": " + std::to_string(b.recv.size()) +
           " elements received, " + std::to_string(b.expect.size()) + " expected";
  for (size_t i = 0; i < b.expect.size(); ++i)
    if (b.recv[i] != b.expect[i]) {
      std::ostringstream os;
      os << kind_name(s.kind) << " count " << s.count << ": element " << i << " is "
         << static_cast<double>(b.recv[i]) << ", expected " << static_cast<double>(b.expect[i]);
      size_t bad = 0;
      for (size_t j = i; j < b.expect.size(); ++j) bad += b.recv[j] != b.expect[j];
      os << " (" << bad << " of " << b.expect.size() << " differ)";
      return os.str();
    }
  return "";
}

#define SHOAL_CHAOS_TYPE(T)                                                                      \
  template Buffers<T> prepare<T>(const OpSpec&, const std::vector<int>&, int, int64_t, int64_t); \
  template std::string difference<T>(const OpSpec&, const Buffers<T>&);
SHOAL_CHAOS_TYPE(int32_t)
SHOAL_CHAOS_TYPE(float)
SHOAL_CHAOS_TYPE(double)
#undef SHOAL_CHAOS_TYPE

std::string run_op(Communicator& comm, const OpSpec& s, const std::vector<int>& members,
                   int64_t epoch, int64_t op) {
  switch (s.dtype) {
    case DataType::int32:
      return run_typed<int32_t>(comm, s, members, epoch, op);
    case DataType::float64:
      return run_typed<double>(comm, s, members, epoch, op);
    default:
      return run_typed<float>(comm, s, members, epoch, op);
  }
}

}  // namespace shoal::chaos
