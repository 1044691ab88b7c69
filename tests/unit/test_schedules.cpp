// Every algorithm of the registry for all_reduce, all_gather and reduce_scatter, run by an
// in-memory executor that plays all p ranks of one call together: rank a's k-th send to b
// meets b's k-th receive from a (the ordering rule of schedule.hpp), a step runs once its
// dependencies are done, reduce/copy/finalize use the real kernels. Results are compared with
// the independent reference of tests/support/values.hpp over dtypes x ops x world sizes 1..17,
// 24, 31, 32, 33, 64 x counts {0, 1, 7, p-1, 1000, 20003}, in place and out of place. The
// executor also fails (instead of hanging) on a deadlock or mismatched frame lengths, on a
// write to the input, on out-of-bounds slices, and — statically — on two steps of a rank that
// touch the same bytes (one writing) without a dependency path between them: the real engine
// runs such steps concurrently.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "algorithms/butterfly.hpp"
#include "algorithms/registry.hpp"
#include "core/reduce.hpp"
#include "shoal/error.hpp"
#include "support/values.hpp"

namespace shoal::testing {
namespace {

using namespace shoal::algorithms;

// memcmp with an empty range allowed: a zero-count call's buffers may be null, which memcmp's
// arguments must never be (UBSan: nonnull-attribute).
bool same_bytes(const void* a, const void* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n) == 0;
}

// One rank's memory: input and output laid out as the public API does for in place calls.
struct RankMemory {
  std::vector<uint8_t> arena, out_arena;
  uint8_t* input = nullptr;
  uint8_t* output = nullptr;
  uint64_t in_bytes = 0, out_bytes = 0;
  std::vector<uint8_t> scratch;
};

uint8_t* resolve(RankMemory& m, const Slice& s) {
  switch (s.buffer) {
    case Buffer::input:
      return m.input + s.offset;
    case Buffer::output:
      return m.output + s.offset;
    case Buffer::scratch:
      return m.scratch.data() + s.offset;
  }
  return nullptr;
}

std::string describe(const Step& st) {
  static const char* kinds[] = {"send", "recv", "reduce", "copy", "finalize"};
  std::ostringstream os;
  os << kinds[static_cast<int>(st.kind)];
  if (st.peer >= 0) os << " peer " << st.peer;
  return os.str();
}

// Checks slices against the buffers' sizes and the rules of schedule.hpp; "" if fine.
std::string validate(const Schedule& s, const CollectiveArgs& a, const RankMemory& m) {
  auto limit = [&](Buffer b) {
    return b == Buffer::input ? m.in_bytes : b == Buffer::output ? m.out_bytes : s.scratch_bytes;
  };
  const uint64_t es = size_of(a.dtype);
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const Step& st = s.steps[i];
    auto os_str = [&] {
      std::ostringstream os;
      os << "rank " << a.rank << " step " << i << " (" << describe(st) << "): ";
      return os.str();
    };
    auto in_bounds = [&](const Slice& x) {
      return x.offset + x.bytes <= limit(x.buffer) && x.bytes % es == 0;
    };
    const bool has_dst = st.kind != StepKind::send, has_src = st.kind == StepKind::send ||
                                                              st.kind == StepKind::reduce ||
                                                              st.kind == StepKind::copy;
    if (has_dst && !in_bounds(st.dst))
      return os_str() + "destination out of bounds or not whole elements";
    if (has_src && !in_bounds(st.src))
      return os_str() + "source out of bounds or not whole elements";
    if (st.kind == StepKind::reduce &&
        (!in_bounds(st.src2) || st.src.bytes != st.dst.bytes || st.src2.bytes != st.dst.bytes))
      return os_str() + "reduce operands out of bounds or of different lengths";
    if (st.kind == StepKind::copy && st.src.bytes != st.dst.bytes)
      return os_str() + "copy of different lengths";
    if (has_dst && st.dst.buffer == Buffer::input && st.dst.bytes > 0)
      return os_str() + "writes the input buffer";
    if (st.kind == StepKind::finalize && a.op != ReduceOp::avg)
      return os_str() + "finalize without avg";
    if ((st.kind == StepKind::send || st.kind == StepKind::recv) &&
        (st.peer < 0 || st.peer >= a.size || st.peer == a.rank))
      return os_str() + "bad peer";
  }
  for (auto [from, to] : s.edges)
    if (from >= to || to >= s.steps.size()) return "rank " + std::to_string(a.rank) + ": bad edge";
  return "";
}

// Two steps of one rank that touch overlapping bytes, one writing, with no dependency path
// between them: the engine may run them in either order (or at once). Receives from the same
// peer are ordered by the channel and exempt.
std::string find_race(const Schedule& s, const CollectiveArgs& a, RankMemory& m) {
  const size_t n = s.steps.size();
  const size_t words = (n + 63) / 64;
  std::vector<uint64_t> reach(n * words, 0);  // reach[j] has bit i: i happens before j
  std::vector<std::vector<uint32_t>> preds(n);
  for (auto [from, to] : s.edges) preds[to].push_back(from);
  for (size_t j = 0; j < n; ++j)
    for (uint32_t i : preds[j]) {
      for (size_t w = 0; w < words; ++w) reach[j * words + w] |= reach[i * words + w];
      reach[j * words + i / 64] |= uint64_t{1} << (i % 64);
    }
  struct Access {
    const uint8_t *lo, *hi;
    bool write;
  };
  std::vector<std::vector<Access>> acc(n);
  for (size_t i = 0; i < n; ++i) {
    const Step& st = s.steps[i];
    auto add = [&](const Slice& x, bool w) {
      if (x.bytes == 0) return;
      const uint8_t* p = resolve(m, x);
      acc[i].push_back({p, p + x.bytes, w});
    };
    switch (st.kind) {
      case StepKind::send:
        add(st.src, false);
        break;
      case StepKind::recv:
        add(st.dst, true);
        break;
      case StepKind::reduce:
        add(st.src, false);
        add(st.src2, false);
        add(st.dst, true);
        break;
      case StepKind::copy:
        if (resolve(m, st.src) != resolve(m, st.dst)) {
          add(st.src, false);
          add(st.dst, true);
        }
        break;
      case StepKind::finalize:
        add(st.dst, true);
        break;
    }
  }
  for (size_t j = 0; j < n; ++j)
    for (size_t i = 0; i < j; ++i) {
      if (reach[j * words + i / 64] >> (i % 64) & 1) continue;
      if (s.steps[i].kind == StepKind::recv && s.steps[j].kind == StepKind::recv &&
          s.steps[i].peer == s.steps[j].peer)
        continue;
      for (const Access& x : acc[i])
        for (const Access& y : acc[j])
          if ((x.write || y.write) && x.lo < y.hi && y.lo < x.hi)
            return "rank " + std::to_string(a.rank) + ": steps " + std::to_string(i) + " (" +
                   describe(s.steps[i]) + ") and " + std::to_string(j) + " (" +
                   describe(s.steps[j]) + ") touch the same bytes unordered";
    }
  return "";
}

// Runs the schedules of all ranks together; "" on success, else what went wrong.
std::string execute(const std::vector<Schedule>& sch, const std::vector<CollectiveArgs>& args,
                    std::vector<RankMemory>& mem) {
  const int p = static_cast<int>(sch.size());
  struct State {
    std::vector<uint32_t> remaining;
    std::vector<std::vector<uint32_t>> dependents;
    std::vector<std::vector<uint32_t>> sends, recvs;  // per peer, in step order
    std::vector<size_t> send_head, recv_head;
    std::vector<uint32_t> local_ready;
    size_t done = 0;
  };
  std::vector<State> st(p);
  for (int r = 0; r < p; ++r) {
    const Schedule& s = sch[r];
    State& x = st[r];
    x.remaining.assign(s.steps.size(), 0);
    x.dependents.assign(s.steps.size(), {});
    x.sends.assign(p, {});
    x.recvs.assign(p, {});
    x.send_head.assign(p, 0);
    x.recv_head.assign(p, 0);
    for (auto [from, to] : s.edges) {
      ++x.remaining[to];
      x.dependents[from].push_back(to);
    }
    for (uint32_t i = 0; i < s.steps.size(); ++i) {
      const Step& step = s.steps[i];
      if (step.kind == StepKind::send)
        x.sends[step.peer].push_back(i);
      else if (step.kind == StepKind::recv)
        x.recvs[step.peer].push_back(i);
    }
  }
  std::string error;
  std::vector<std::pair<int, int>> pairs_to_try;  // (sender, receiver)
  auto complete = [&](int r, uint32_t i) {
    State& x = st[r];
    ++x.done;
    for (uint32_t d : x.dependents[i])
      if (--x.remaining[d] == 0) {
        const Step& step = sch[r].steps[d];
        if (step.kind == StepKind::send)
          pairs_to_try.emplace_back(r, step.peer);
        else if (step.kind == StepKind::recv)
          pairs_to_try.emplace_back(step.peer, r);
        else
          x.local_ready.push_back(d);
      }
  };
  auto run_local = [&](int r, uint32_t i) {
    const Step& step = sch[r].steps[i];
    const CollectiveArgs& a = args[r];
    const uint64_t es = size_of(a.dtype);
    switch (step.kind) {
      case StepKind::reduce:
        if (step.dst.bytes > 0)
          kernels::reduce(resolve(mem[r], step.dst), resolve(mem[r], step.src),
                          resolve(mem[r], step.src2), step.dst.bytes / es, a.dtype, a.op);
        break;
      case StepKind::copy: {
        uint8_t* d = resolve(mem[r], step.dst);
        const uint8_t* s = resolve(mem[r], step.src);
        if (step.dst.bytes > 0 && d != s) std::memmove(d, s, step.dst.bytes);
        break;
      }
      case StepKind::finalize:
        if (step.dst.bytes > 0)
          kernels::finalize_avg(resolve(mem[r], step.dst), step.dst.bytes / es, a.dtype, a.size);
        break;
      default:
        break;
    }
    complete(r, i);
  };
  auto try_pair = [&](int a, int b) {
    State &x = st[a], &y = st[b];
    while (x.send_head[b] < x.sends[b].size() && y.recv_head[a] < y.recvs[a].size()) {
      const uint32_t i = x.sends[b][x.send_head[b]], j = y.recvs[a][y.recv_head[a]];
      if (x.remaining[i] != 0 || y.remaining[j] != 0) return;
      const Step &s = sch[a].steps[i], &d = sch[b].steps[j];
      if (s.src.bytes != d.dst.bytes) {
        if (error.empty())
          error = "frame " + std::to_string(x.send_head[b]) + " from rank " + std::to_string(a) +
                  " to " + std::to_string(b) + ": sent " + std::to_string(s.src.bytes) +
                  " bytes, receive posted for " + std::to_string(d.dst.bytes);
        return;
      }
      if (s.src.bytes > 0) std::memcpy(resolve(mem[b], d.dst), resolve(mem[a], s.src), s.src.bytes);
      ++x.send_head[b];
      ++y.recv_head[a];
      complete(a, i);
      complete(b, j);
    }
  };
  for (int r = 0; r < p; ++r)
    for (uint32_t i = 0; i < sch[r].steps.size(); ++i)
      if (st[r].remaining[i] == 0) {
        const Step& step = sch[r].steps[i];
        if (step.kind == StepKind::send)
          pairs_to_try.emplace_back(r, step.peer);
        else if (step.kind == StepKind::recv)
          pairs_to_try.emplace_back(step.peer, r);
        else
          st[r].local_ready.push_back(i);
      }
  for (bool progress = true; progress && error.empty();) {
    progress = false;
    for (int r = 0; r < p; ++r)
      while (!st[r].local_ready.empty()) {
        const uint32_t i = st[r].local_ready.back();
        st[r].local_ready.pop_back();
        run_local(r, i);
        progress = true;
      }
    while (!pairs_to_try.empty()) {
      auto [a, b] = pairs_to_try.back();
      pairs_to_try.pop_back();
      try_pair(a, b);
      progress = true;
    }
  }
  if (!error.empty()) return error;
  std::ostringstream os;
  for (int r = 0; r < p; ++r) {
    if (st[r].done == sch[r].steps.size()) continue;
    if (os.tellp() == 0) os << "deadlock:";
    os << " rank " << r << " finished " << st[r].done << "/" << sch[r].steps.size() << " steps";
    for (int q = 0; q < p; ++q) {
      if (st[r].recv_head[q] < st[r].recvs[q].size())
        os << ", waits for frame " << st[r].recv_head[q] << " from " << q;
    }
    os << ";";
  }
  return os.str();
}

// Reference values repeat with period 36 in the element index (see values.hpp).
struct Reference {
  std::vector<double> want;
  Reference(int p, DataType t, ReduceOp op) {
    for (uint64_t i = 0; i < 36; ++i) want.push_back(expected(p, i, t, op));
  }
  double operator()(uint64_t i) const { return want[i % 36]; }
};

void fill(uint8_t* buf, uint64_t first, uint64_t n, int r, DataType t, ReduceOp op) {
  const uint64_t es = size_of(t);
  uint8_t pattern[36 * 8];
  for (uint64_t k = 0; k < 36; ++k) store(pattern, k, t, value(r, first + k, t, op));
  for (uint64_t i = 0; i < n; i += 36)
    std::memcpy(buf + i * es, pattern, std::min<uint64_t>(36, n - i) * es);
}

struct Case {
  const AlgorithmInfo* algo;
  int p;
  uint64_t count;
  DataType dtype;
  ReduceOp op;
  bool in_place;
  bool race_check;
  const std::vector<int>* ring_order = nullptr;  // link_ring's; null: rank order
};

std::string name_of(const Case& c) {
  std::ostringstream os;
  os << to_string(c.algo->collective) << ":" << c.algo->name << " p=" << c.p << " count=" << c.count
     << " " << to_string(c.dtype) << " " << to_string(c.op)
     << (c.in_place ? " in-place" : " out-of-place");
  return os.str();
}

// Runs one call on all ranks and checks every rank's output; "" if right.
std::string run_case(const Case& c) {
  const int p = c.p;
  const DataType t = c.dtype;
  const uint64_t es = size_of(t), block = c.count * es, total = block * static_cast<uint64_t>(p);
  const Collective coll = c.algo->collective;
  std::vector<RankMemory> mem(p);
  std::vector<CollectiveArgs> args(p);
  std::vector<Schedule> sch(p);
  std::vector<std::vector<uint8_t>> original(p);
  for (int r = 0; r < p; ++r) {
    RankMemory& m = mem[r];
    CollectiveArgs& a = args[r];
    a.collective = coll;
    a.dtype = t;
    a.op = coll == Collective::all_gather ? ReduceOp::sum : c.op;
    a.count = c.count;
    a.rank = r;
    a.size = p;
    a.chunk_bytes = 4096;  // small, so that ring chunking is exercised too
    a.ring_order = c.ring_order;
    const uint64_t ub = coll == Collective::all_reduce ? block : total;
    m.arena.assign(ub + 16, 0xcd);
    if (c.in_place) {
      m.input = m.output = m.arena.data();
      if (coll == Collective::all_gather) m.input = m.arena.data() + r * block;
      if (coll == Collective::reduce_scatter) m.output = m.arena.data() + r * block;
    } else {
      m.out_arena.assign((coll == Collective::all_gather ? total : block) + 16, 0xcd);
      m.input = m.arena.data();
      m.output = m.out_arena.data();
    }
    a.in_place = m.input == m.output;
    const uint64_t in_elems = coll == Collective::reduce_scatter ? c.count * p : c.count;
    fill(m.input, 0, in_elems, r, t, a.op);
    original[r].assign(m.input, m.input + in_elems * es);
    m.in_bytes = input_bytes(a);
    m.out_bytes = output_bytes(a);
    c.algo->build(sch[r], a);
    m.scratch.assign(sch[r].scratch_bytes + 16, 0xcd);
    if (std::string e = validate(sch[r], a, m); !e.empty()) return e;
    if (c.race_check)
      if (std::string e = find_race(sch[r], a, m); !e.empty()) return e;
  }
  if (std::string e = execute(sch, args, mem); !e.empty()) return e;
  const ReduceOp op = args[0].op;
  // The expected result of every rank, built once: the gathered blocks, or the reduction of
  // the whole input (reduce_scatter's rank r holds block r of it).
  const uint64_t want_elems = coll == Collective::all_reduce ? c.count : c.count * p;
  std::vector<uint8_t> want(want_elems * es + 1);
  if (coll == Collective::all_gather) {
    for (int b = 0; b < p; ++b) fill(want.data() + b * block, 0, c.count, b, t, op);
  } else {
    const Reference ref(p, t, op);
    uint8_t pattern[36 * 8];
    for (uint64_t k = 0; k < 36; ++k) store(pattern, k, t, ref(k));
    for (uint64_t i = 0; i < want_elems; i += 36)
      std::memcpy(want.data() + i * es, pattern, std::min<uint64_t>(36, want_elems - i) * es);
  }
  for (int r = 0; r < p; ++r) {
    const RankMemory& m = mem[r];
    const uint64_t first = coll == Collective::reduce_scatter ? r * c.count : 0;
    const uint64_t n = coll == Collective::all_gather ? c.count * p : c.count;
    if (!same_bytes(m.output, want.data() + first * es, n * es))
      for (uint64_t i = 0; i < n; ++i)
        if (double got = load(m.output, i, t), w = load(want.data(), first + i, t); !(got == w)) {
          std::ostringstream os;
          os << "rank " << r << " element " << i << ": got " << got << ", want " << w;
          return os.str();
        }
    if (!c.in_place && !original[r].empty() &&
        !same_bytes(m.input, original[r].data(), original[r].size()))
      return "rank " + std::to_string(r) + ": the input changed";
    const uint64_t out_bytes = coll == Collective::all_gather ? total : block;
    if (m.output + out_bytes <= m.arena.data() + m.arena.size() || !c.in_place) {
      const uint8_t* end = m.output + out_bytes;  // the guard bytes after the output stay
      const uint8_t* arena_end =
          c.in_place ? m.arena.data() + m.arena.size() : m.out_arena.data() + m.out_arena.size();
      for (const uint8_t* g = arena_end - 16; g < arena_end; ++g)
        if (*g != 0xcd && g >= end) return "rank " + std::to_string(r) + ": wrote past the output";
    }
  }
  // all_reduce: every rank holds the same bits.
  if (coll == Collective::all_reduce)
    for (int r = 1; r < p; ++r)
      if (!same_bytes(mem[r].output, mem[0].output, block))
        return "rank " + std::to_string(r) + "'s result differs bitwise from rank 0's";
  return "";
}

constexpr int kWorlds[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                           12, 13, 14, 15, 16, 17, 24, 31, 32, 33, 64};
constexpr DataType kTypes[] = {DataType::float32,  DataType::float64, DataType::int32,
                               DataType::int8,     DataType::uint8,   DataType::float16,
                               DataType::bfloat16, DataType::int64};

std::vector<const AlgorithmInfo*> rows() {
  std::vector<const AlgorithmInfo*> out;
  for (const auto& row : registry())
    if (row.collective == Collective::all_reduce || row.collective == Collective::all_gather ||
        row.collective == Collective::reduce_scatter)
      out.push_back(&row);
  return out;
}

class Schedules : public ::testing::TestWithParam<const AlgorithmInfo*> {};

TEST_P(Schedules, MatchReferenceForEveryWorldCountDtypeAndOp) {
  const AlgorithmInfo* algo = GetParam();
  const bool reduces = algo->collective != Collective::all_gather;
  int failures = 0, cases = 0;
  for (int p : kWorlds) {
    const uint64_t counts[] = {0, 1, 7, static_cast<uint64_t>(p - 1), 1000, 20003};
    for (uint64_t count : counts) {
      // The full dtype x op matrix up to 1000 elements; the largest count, and 1000 on the
      // biggest worlds, on a subset that still covers 1-, 2-, 4- and 8-byte types and avg.
      const bool big = count == 20003 || (count == 1000 && p > 17);
      const uint64_t elems = count * (algo->collective == Collective::all_reduce ? 1 : p);
      if (count == 20003 && p > 33) continue;
      for (DataType t : kTypes) {
        if (big && t != DataType::float32 && t != DataType::int8 && t != DataType::bfloat16 &&
            t != DataType::float64)
          continue;
        // The largest count beyond 9 ranks: 1- and 4-byte types, and only avg past 17.
        if (count == 20003 && p > 9 && t != DataType::float32 && t != DataType::int8) continue;
        for (ReduceOp op : kAllOps) {
          if (!reduces && op != ReduceOp::sum) continue;
          if (big && op != ReduceOp::sum && op != ReduceOp::avg &&
              !(t == DataType::int8 && op == ReduceOp::prod))
            continue;
          if (big && elems > 200000 && (op != ReduceOp::avg || t == DataType::float64)) continue;
          if (count == 20003 && p > 17 && op != ReduceOp::avg) continue;
          for (bool in_place : {false, true}) {
            const bool race = t == DataType::float32 &&
                              (op == ReduceOp::sum || op == ReduceOp::avg) && elems <= 100000 &&
                              p <= 33;
            Case c{algo, p, count, t, op, in_place, race};
            ++cases;
            std::string e = run_case(c);
            if (!e.empty() && ++failures <= 5) ADD_FAILURE() << name_of(c) << ": " << e;
          }
        }
      }
    }
  }
  EXPECT_EQ(failures, 0) << "of " << cases << " cases";
}

INSTANTIATE_TEST_SUITE_P(Registry, Schedules, ::testing::ValuesIn(rows()), [](const auto& info) {
  return std::string(to_string(info.param->collective)) + "_" + std::string(info.param->name);
});

// The rings that follow measured links, in orders other than the ranks'.
TEST(LinkRing, MatchesReferenceInAnyOrder) {
  std::mt19937 rng(11);
  int cases = 0, failures = 0;
  for (const AlgorithmInfo* algo : rows()) {
    if (!algo->follows_links) continue;
    for (int p : {2, 3, 4, 5, 7, 8, 13}) {
      for (int trial = 0; trial < 3; ++trial) {
        std::vector<int> order(static_cast<size_t>(p));
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng);
        for (uint64_t count :
             {uint64_t{0}, uint64_t{1}, uint64_t{7}, uint64_t{1000}, uint64_t{20003}})
          for (DataType t : {DataType::float32, DataType::int8})
            for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
              if (algo->collective == Collective::all_gather && op != ReduceOp::sum) continue;
              for (bool in_place : {false, true}) {
                Case c{algo, p, count, t, op, in_place, t == DataType::float32, &order};
                ++cases;
                if (std::string e = run_case(c); !e.empty() && ++failures <= 5) {
                  std::string o;
                  for (int r : order) o += " " + std::to_string(r);
                  ADD_FAILURE() << name_of(c) << " order" << o << ": " << e;
                }
              }
            }
      }
    }
  }
  EXPECT_GT(cases, 0);
  EXPECT_EQ(failures, 0) << "of " << cases << " cases";
}

// ---- the executor itself must catch broken schedules ----

std::string run_pair(const Schedule& s0, const Schedule& s1) {
  std::vector<Schedule> sch{s0, s1};
  std::vector<CollectiveArgs> args(2);
  std::vector<RankMemory> mem(2);
  for (int r = 0; r < 2; ++r) {
    args[r].count = 4;
    args[r].rank = r;
    args[r].size = 2;
    mem[r].arena.assign(64, 0);
    mem[r].out_arena.assign(64, 0);
    mem[r].input = mem[r].arena.data();
    mem[r].output = mem[r].out_arena.data();
    mem[r].scratch.assign(64, 0);
  }
  return execute(sch, args, mem);
}

TEST(Executor, DetectsDeadlockInsteadOfHanging) {
  // Both ranks receive before they send, and each send waits for its receive.
  Schedule s0, s1;
  for (Schedule* s : {&s0, &s1}) {
    const int peer = s == &s0 ? 1 : 0;
    uint32_t r = s->recv(peer, {Buffer::output, 0, 16});
    s->send(peer, {Buffer::input, 0, 16}, {r});
  }
  EXPECT_NE(run_pair(s0, s1).find("deadlock"), std::string::npos);
}

TEST(Executor, DetectsUnmatchedSend) {
  Schedule s0, s1;
  s0.send(1, {Buffer::input, 0, 16});
  s0.send(1, {Buffer::input, 0, 16});
  s1.recv(0, {Buffer::output, 0, 16});
  EXPECT_NE(run_pair(s0, s1).find("deadlock"), std::string::npos);
}

TEST(Executor, DetectsLengthMismatch) {
  Schedule s0, s1;
  s0.send(1, {Buffer::input, 0, 16});
  s1.recv(0, {Buffer::output, 0, 8});
  EXPECT_NE(run_pair(s0, s1).find("sent 16 bytes"), std::string::npos);
}

TEST(Executor, DetectsUnorderedAccess) {
  Schedule s;
  s.send(1, {Buffer::output, 0, 16});
  s.recv(1, {Buffer::output, 8, 16});  // may land while the send still reads
  CollectiveArgs a;
  a.count = 4;
  a.size = 2;
  RankMemory m;
  m.arena.assign(64, 0);
  m.input = m.output = m.arena.data();
  EXPECT_NE(find_race(s, a, m), "");
  s.add_dep(1, 0);
  EXPECT_EQ(find_race(s, a, m), "");
}

// ---- registry, override, signature, costs ----

TEST(Registry, SwingPeersAreInvolutionsAndCoverEveryBlock) {
  for (int p2 = 1; p2 <= 1024; p2 *= 2) {
    int levels = 0;
    while ((1 << levels) < p2) ++levels;
    for (int v = 0; v < p2; ++v) {
      for (int s = 0; s < levels; ++s) ASSERT_EQ(swing_peer(swing_peer(v, s, p2), s, p2), v);
      auto all = butterfly_blocks(v, 0, levels, p2, swing_peer);
      ASSERT_EQ(all.size(), static_cast<size_t>(p2));
      for (int i = 0; i < p2; ++i) ASSERT_EQ(all[i], i);
    }
  }
}

TEST(Registry, DefaultIsTheFirstRowAndEveryRowHasACost) {
  CollectiveArgs a;
  a.size = 8;
  a.count = 1000;
  for (Collective c :
       {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter}) {
    a.collective = c;
    EXPECT_EQ(choose(a).name, "ring");
  }
  for (const auto& row : registry()) {
    ASSERT_NE(row.cost, nullptr) << row.name;
    EXPECT_FALSE(row.description.empty());
    for (int p : {1, 2, 3, 8, 33, 4096}) {
      const double small = row.cost(p, 8, CostParams{}), large = row.cost(p, 1 << 30, CostParams{});
      EXPECT_GE(small, 0) << row.name;
      EXPECT_GE(large, small) << row.name;
    }
  }
  // Latency algorithms win small messages, bandwidth algorithms large ones.
  const auto* rd = find_algorithm(Collective::all_reduce, "recursive_doubling");
  const auto* ring = find_algorithm(Collective::all_reduce, "ring");
  const auto* rab = find_algorithm(Collective::all_reduce, "rabenseifner");
  EXPECT_LT(rd->cost(64, 64, {}), ring->cost(64, 64, {}));
  EXPECT_LT(ring->cost(64, 1 << 30, {}), rd->cost(64, 1 << 30, {}));
  EXPECT_LT(rab->cost(64, 1 << 30, {}), rd->cost(64, 1 << 30, {}));
}

TEST(Registry, OverrideParsesAndRejectsWithClearErrors) {
  auto rules =
      parse_override("all_reduce:0-64K:binomial; all_reduce:rabenseifner,all_gather:bruck");
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(rules[0].max_bytes, 64u << 10);
  EXPECT_EQ(rules[2].algorithm->name, "bruck");
  EXPECT_TRUE(parse_override("").empty());
  auto message = [](const char* spec) {
    try {
      parse_override(spec);
    } catch (const InvalidArgumentError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("all_reduce:nope").find("unknown algorithm 'nope'"), std::string::npos);
  EXPECT_NE(message("allreduce:ring").find("unknown collective"), std::string::npos);
  EXPECT_NE(message("all_reduce:bruck").find("does not serve all_reduce"), std::string::npos);
  EXPECT_NE(message("all_reduce:64K:ring").find("byte range"), std::string::npos);
  EXPECT_NE(message("all_reduce").find("collective:algorithm"), std::string::npos);

  CollectiveArgs a;
  a.size = 4;
  a.dtype = DataType::float32;
  a.count = 16;  // 64 bytes
  const uint32_t ring_sig = signature(a);
  detail::set_thread_algorithm_override("all_reduce:0-64K:binomial;all_reduce:rabenseifner");
  EXPECT_EQ(choose(a).name, "binomial");
  EXPECT_NE(signature(a), ring_sig);  // ranks that choose differently mismatch
  a.count = 1 << 20;
  EXPECT_EQ(choose(a).name, "rabenseifner");
  std::string name;
  build_schedule(a, &name);
  EXPECT_EQ(name, "rabenseifner");
  a.collective = Collective::all_gather;
  EXPECT_EQ(choose(a).name, "ring");
  detail::set_thread_algorithm_override("");
  a.collective = Collective::all_reduce;
  EXPECT_EQ(choose(a).name, "ring");
  // The process-wide override (what SHOAL_ALGO sets), below a thread's own.
  detail::set_algorithm_override("all_reduce:swing");
  EXPECT_EQ(choose(a).name, "swing");
  detail::set_thread_algorithm_override("all_reduce:binomial");
  EXPECT_EQ(choose(a).name, "binomial");
  detail::set_thread_algorithm_override("");
  EXPECT_THROW(detail::set_algorithm_override("all_reduce:bruck"), InvalidArgumentError);
  EXPECT_EQ(choose(a).name, "swing");  // a rejected value changes nothing
  detail::set_algorithm_override("");
  EXPECT_EQ(choose(a).name, "ring");
}

}  // namespace
}  // namespace shoal::testing
