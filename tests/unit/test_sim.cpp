// The virtual-time executor (src/sim) and a symbolic one that proves the schedules right at
// large world sizes.
//  - Symbolic execution: every byte of every rank's buffers is tracked as (the logical byte of
//    the collective's data it holds, the set of ranks whose contributions are summed into it)
//    — no real data. Sets are sorted interval lists of ranks, so a reduction of two operands
//    that share a contributor is caught (every contribution exactly once), and all_gather
//    bytes carry the logical offset of the source rank's input, which only that rank has (the
//    right block from the right rank). Every row of all_reduce, all_gather and reduce_scatter
//    at p = 1000, 1024 and 4096 (ring and swing at 4096: SHOAL_SIM_LONG=1, ~80M steps each).
//  - Simulation invariants: every byte sent is received and nothing deadlocks; no schedule
//    beats the bandwidth lower bound of its collective; a lone message costs latency + n/B;
//    ring all_reduce's latency term grows linearly in p and recursive doubling's as log2 p;
//    a tapered core is never faster; hierarchical schedules (algorithms/hierarchy.hpp) are
//    proved like the rows and, unlike the flat ring, speed up with every NIC a host adds.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "algorithms/hierarchy.hpp"
#include "algorithms/registry.hpp"
#include "shoal/error.hpp"
#include "sim/calibrate.hpp"
#include "sim/executor.hpp"
#include "sim/model.hpp"
#include "sim/tables.hpp"
#include "support/temp_file.hpp"
#include "tune/links.hpp"

namespace shoal::testing {
namespace {

using namespace shoal::algorithms;
using shoal::sim::ClusterModel;

// ---- symbolic execution ----

using Intervals = std::vector<std::pair<int, int>>;  // sorted, disjoint, non-adjacent [lo, hi)
using RankSet = std::shared_ptr<const Intervals>;

struct Seg {
  uint64_t hi;
  uint64_t origin;  // logical byte held by the segment's first byte
  RankSet set;      // nullptr: garbage (never written)
};
struct Piece {
  uint64_t len, origin;
  RankSet set;
};

bool same_set(const RankSet& a, const RankSet& b) { return a == b || (a && b && *a == *b); }

// One address space (a rank's user memory or its scratch): an interval map of segments.
class Space {
 public:
  std::vector<Piece> read(uint64_t lo, uint64_t len) const {
    std::vector<Piece> out;
    const uint64_t hi = lo + len;
    auto it = map_.upper_bound(lo);
    if (it != map_.begin()) --it;
    uint64_t at = lo;
    for (; it != map_.end() && it->first < hi; ++it) {
      const uint64_t s = it->first, e = it->second.hi;
      if (e <= at) continue;
      if (s > at) {
        out.push_back({s - at, 0, nullptr});
        at = s;
      }
      const uint64_t end = std::min(e, hi);
      out.push_back({end - at, it->second.origin + (at - s), it->second.set});
      at = end;
    }
    if (at < hi) out.push_back({hi - at, 0, nullptr});
    return out;
  }

  void write(uint64_t lo, const std::vector<Piece>& pieces) {
    uint64_t len = 0;
    for (const auto& p : pieces) len += p.len;
    if (len == 0) return;
    const uint64_t hi = lo + len;
    cut(lo);
    cut(hi);
    map_.erase(map_.lower_bound(lo), map_.lower_bound(hi));
    uint64_t at = lo;
    for (const auto& p : pieces) {
      if (p.set) map_[at] = {at + p.len, p.origin, p.set};
      at += p.len;
    }
    merge_around(lo, hi);
  }

 private:
  void cut(uint64_t x) {  // splits the segment that strictly contains x
    auto it = map_.upper_bound(x);
    if (it == map_.begin()) return;
    --it;
    if (it->first < x && x < it->second.hi) {
      Seg right{it->second.hi, it->second.origin + (x - it->first), it->second.set};
      it->second.hi = x;
      map_[x] = right;
    }
  }
  void merge_around(uint64_t lo, uint64_t hi) {
    auto it = map_.lower_bound(lo);
    if (it != map_.begin()) --it;
    while (it != map_.end() && it->first <= hi) {
      auto next = std::next(it);
      if (next == map_.end()) break;
      if (it->second.hi == next->first &&
          it->second.origin + (it->second.hi - it->first) == next->second.origin &&
          same_set(it->second.set, next->second.set)) {
        it->second.hi = next->second.hi;
        map_.erase(next);
      } else {
        it = next;
      }
    }
  }
  std::map<uint64_t, Seg> map_;
};

// Union of two disjoint sets; nullptr when they share a rank.
RankSet unite(const Intervals& a, const Intervals& b) {
  auto out = std::make_shared<Intervals>();
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    std::pair<int, int> x;
    if (j == b.size() || (i < a.size() && a[i].first < b[j].first))
      x = a[i++];
    else
      x = b[j++];
    if (!out->empty() && x.first < out->back().second) return nullptr;
    if (!out->empty() && x.first == out->back().second)
      out->back().second = x.second;
    else
      out->push_back(x);
  }
  return out;
}

struct SymRank {
  Space user, scratch;
  CollectiveArgs args;
  uint64_t block = 0;
};

// Where a slice lives, with the in-place aliasing of the API (every call here is in place
// for all_reduce and all_gather's and reduce_scatter's blocks, as Tracked assumes anyway).
std::pair<Space*, uint64_t> locate(SymRank& m, const Slice& s) {
  const uint64_t r = static_cast<uint64_t>(m.args.rank);
  if (s.buffer == Buffer::scratch) return {&m.scratch, s.offset};
  const Collective c = m.args.collective;
  if (s.buffer == Buffer::input && c == Collective::all_gather)
    return {&m.user, r * m.block + s.offset};
  if (s.buffer == Buffer::output && c == Collective::reduce_scatter)
    return {&m.user, r * m.block + s.offset};
  return {&m.user, s.offset};
}

std::vector<Piece> read(SymRank& m, const Slice& s) {
  auto [space, off] = locate(m, s);
  return space->read(off, s.bytes);
}
void write(SymRank& m, const Slice& s, const std::vector<Piece>& v) {
  auto [space, off] = locate(m, s);
  space->write(off, v);
}

// Executes the schedules of all ranks symbolically (in place); "" on success.
std::string symbolic_run(Collective c, const sim::Builder& build, int p, uint64_t count,
                         uint64_t chunk, double* seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t es = 4, block = count * es;
  std::vector<SymRank> ranks(p);
  std::vector<Schedule> sch(p);
  auto gathered =
      std::make_shared<const Intervals>(Intervals{{-1, 0}});  // all_gather bytes: origin only
  for (int r = 0; r < p; ++r) {
    CollectiveArgs& a = ranks[r].args;
    a.collective = c;
    a.dtype = DataType::float32;
    a.count = count;
    a.rank = r;
    a.size = p;
    a.in_place = true;
    a.chunk_bytes = chunk;
    ranks[r].block = block;
    const RankSet own = std::make_shared<const Intervals>(Intervals{{r, r + 1}});
    if (c == Collective::all_gather)
      ranks[r].user.write(r * block, {{block, r * block, gathered}});
    else if (c == Collective::reduce_scatter)
      ranks[r].user.write(0, {{block * p, 0, own}});
    else
      ranks[r].user.write(0, {{block, 0, own}});
  }
  {  // Building dominates for Swing (Tracked's scan): use the cores.
    const int n = static_cast<int>(std::max(1u, std::min(4u, std::thread::hardware_concurrency())));
    std::vector<std::thread> workers;
    for (int w = 0; w < n; ++w)
      workers.emplace_back([&, w] {
        for (int r = w; r < p; r += n) build(sch[r], ranks[r].args);
      });
    for (auto& t : workers) t.join();
  }
  // Dependency-driven, a send meets the receive of the same index on its pair (schedule.hpp).
  struct State {
    std::vector<uint32_t> remaining;
    std::vector<std::vector<uint32_t>> dependents;
    std::map<int, std::vector<uint32_t>> sends, recvs;
    std::map<int, size_t> send_head, recv_head;
    size_t done = 0;
  };
  std::vector<State> st(p);
  std::vector<std::pair<int, uint32_t>> ready;
  for (int r = 0; r < p; ++r) {
    State& x = st[r];
    x.remaining.assign(sch[r].steps.size(), 0);
    x.dependents.assign(sch[r].steps.size(), {});
    for (auto [from, to] : sch[r].edges) {
      ++x.remaining[to];
      x.dependents[from].push_back(to);
    }
    for (uint32_t i = 0; i < sch[r].steps.size(); ++i) {
      const Step& s = sch[r].steps[i];
      if (s.kind == StepKind::send) x.sends[s.peer].push_back(i);
      if (s.kind == StepKind::recv) x.recvs[s.peer].push_back(i);
      if (x.remaining[i] == 0) ready.emplace_back(r, i);
    }
  }
  std::string error;
  auto complete = [&](int r, uint32_t i) {
    ++st[r].done;
    for (uint32_t d : st[r].dependents[i])
      if (--st[r].remaining[d] == 0) ready.emplace_back(r, d);
  };
  auto try_pair = [&](int a, int b) {
    State &x = st[a], &y = st[b];
    auto& sends = x.sends[b];
    auto& recvs = y.recvs[a];
    size_t& sh = x.send_head[b];
    size_t& rh = y.recv_head[a];
    while (sh < sends.size() && rh < recvs.size() && x.remaining[sends[sh]] == 0 &&
           y.remaining[recvs[rh]] == 0) {
      const Step &s = sch[a].steps[sends[sh]], &d = sch[b].steps[recvs[rh]];
      if (s.src.bytes != d.dst.bytes) {
        error = "frame length mismatch from " + std::to_string(a) + " to " + std::to_string(b);
        return;
      }
      write(ranks[b], d.dst, read(ranks[a], s.src));
      x.remaining[sends[sh]] = UINT32_MAX;  // done; never ready again
      y.remaining[recvs[rh]] = UINT32_MAX;
      const uint32_t si = sends[sh++], ri = recvs[rh++];
      complete(a, si);
      complete(b, ri);
    }
  };
  while (!ready.empty() && error.empty()) {
    auto [r, i] = ready.back();
    ready.pop_back();
    const Step& s = sch[r].steps[i];
    switch (s.kind) {
      case StepKind::send:
        try_pair(r, s.peer);
        break;
      case StepKind::recv:
        try_pair(s.peer, r);
        break;
      case StepKind::copy:
        write(ranks[r], s.dst, read(ranks[r], s.src));
        complete(r, i);
        break;
      case StepKind::finalize:
        complete(r, i);
        break;
      case StepKind::reduce: {
        auto x = read(ranks[r], s.src), y = read(ranks[r], s.src2);
        std::vector<Piece> out;
        size_t ix = 0, iy = 0;
        uint64_t ox = 0, oy = 0;  // consumed bytes of x[ix], y[iy]
        while (ix < x.size() && iy < y.size()) {
          const uint64_t len = std::min(x[ix].len - ox, y[iy].len - oy);
          const Piece &px = x[ix], &py = y[iy];
          if (!px.set || !py.set) {
            error = "rank " + std::to_string(r) + " step " + std::to_string(i) +
                    " reduces bytes never written";
            break;
          }
          if (px.origin + ox != py.origin + oy) {
            error = "rank " + std::to_string(r) + " step " + std::to_string(i) +
                    " reduces logical bytes " + std::to_string(px.origin + ox) + " and " +
                    std::to_string(py.origin + oy);
            break;
          }
          RankSet u = unite(*px.set, *py.set);
          if (!u) {
            error = "rank " + std::to_string(r) + " step " + std::to_string(i) +
                    " adds a contribution twice";
            break;
          }
          if (!out.empty() && same_set(out.back().set, u) &&
              out.back().origin + out.back().len == px.origin + ox)
            out.back().len += len;
          else
            out.push_back({len, px.origin + ox, u});
          ox += len;
          oy += len;
          if (ox == px.len) ++ix, ox = 0;
          if (oy == py.len) ++iy, oy = 0;
        }
        if (error.empty()) {
          write(ranks[r], s.dst, out);
          complete(r, i);
        }
        break;
      }
    }
  }
  if (!error.empty()) return error;
  for (int r = 0; r < p; ++r)
    if (st[r].done != sch[r].steps.size()) return "deadlock at rank " + std::to_string(r);
  // The result: logical offsets and full sets (or, for all_gather, the gathered marker).
  const Intervals everyone{{0, p}};
  for (int r = 0; r < p; ++r) {
    uint64_t lo = 0, len = block, origin = 0;
    if (c == Collective::all_gather) len = block * p;
    if (c == Collective::reduce_scatter) lo = origin = r * block;
    uint64_t at = origin;
    for (const Piece& x : ranks[r].user.read(lo, len)) {
      const bool ok = x.set && x.origin == at &&
                      (c == Collective::all_gather ? x.set == gathered : *x.set == everyone);
      if (!ok) {
        std::string what = !x.set           ? "garbage"
                           : x.origin != at ? "logical byte " + std::to_string(x.origin)
                                            : std::to_string(x.set->size()) + " rank intervals";
        return "rank " + std::to_string(r) + " output byte " + std::to_string(at - origin) +
               " holds " + what;
      }
      at += x.len;
    }
  }
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return "";
}

std::string symbolic_run(const AlgorithmInfo& row, int p, uint64_t count, uint64_t chunk,
                         double* seconds) {
  return symbolic_run(row.collective, sim::Builder(row.build), p, count, chunk, seconds);
}

sim::Builder hierarchy(int ranks_per_host, std::string_view local, std::string_view inter) {
  const HierarchyPlan plan{ranks_per_host, local, inter};
  return [plan](Schedule& s, const CollectiveArgs& a) { hierarchical(s, a, plan); };
}

bool long_tests() {
  const char* v = std::getenv("SHOAL_SIM_LONG");
  return v && *v && std::string(v) != "0";
}

std::vector<const AlgorithmInfo*> rows_of_interest() {
  std::vector<const AlgorithmInfo*> rows;
  for (const auto& row : registry())
    if (row.collective == Collective::all_reduce || row.collective == Collective::all_gather ||
        row.collective == Collective::reduce_scatter)
      rows.push_back(&row);
  return rows;
}

TEST(Symbolic, DetectsDoubleContribution) {
  Intervals a{{0, 3}}, b{{2, 5}}, c{{3, 5}};
  EXPECT_EQ(unite(a, b), nullptr);
  ASSERT_NE(unite(a, c), nullptr);
  EXPECT_EQ(*unite(a, c), (Intervals{{0, 5}}));
  Space s;
  auto one = std::make_shared<const Intervals>(Intervals{{1, 2}});
  s.write(0, {{8, 0, one}});
  s.write(4, {{4, 100, one}});
  auto v = s.read(0, 12);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[1].origin, 100u);
  EXPECT_EQ(v[2].set, nullptr);
}

TEST(Symbolic, SmallWorldsWithChunking) {
  for (const auto* row : rows_of_interest())
    for (int p : {1, 2, 3, 5, 8, 13, 16, 24, 33}) {
      double secs = 0;
      // Uneven blocks and several chunks per block.
      const std::string e = symbolic_run(
          *row, p, row->collective == Collective::all_reduce ? 7 * p + 3 : 7, 8, &secs);
      EXPECT_EQ(e, "") << to_string(row->collective) << ":" << row->name << " p=" << p;
    }
}

TEST(Symbolic, EveryRankRightAtScale) {
  for (int p : {1000, 1024, 4096})
    for (const auto* row : rows_of_interest()) {
      // ~20k steps per rank at 4,096; the direct rows' p^2 messages from 1,000 (5-10 s each):
      // SHOAL_SIM_LONG=1
      const bool heavy =
          row->overlaps_flights ||
          (p == 4096 && (row->name == "ring" || row->name == "link_ring" || row->name == "swing"));
      if (heavy && !long_tests()) continue;
      double secs = 0;
      const uint64_t count =
          row->collective == Collective::all_reduce ? 3 * static_cast<uint64_t>(p) + 1 : 2;
      const std::string e = symbolic_run(*row, p, count, 512 << 10, &secs);
      EXPECT_EQ(e, "") << to_string(row->collective) << ":" << row->name << " p=" << p;
      std::printf("  symbolic %s:%s p=%d: %.2f s\n",
                  std::string(to_string(row->collective)).c_str(), std::string(row->name).c_str(),
                  p, secs);
    }
}

// Hierarchical schedules (algorithms/hierarchy.hpp): every inter-host row under a ring or a
// Swing local phase, hosts of 1 to 8 ranks, uneven blocks, several chunks per block.
TEST(Symbolic, HierarchicalSchedulesSmallWorlds) {
  for (Collective c : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter})
    for (auto [p, L] : {std::pair{2, 1},
                        {4, 2},
                        {6, 2},
                        {6, 3},
                        {9, 3},
                        {8, 4},
                        {12, 4},
                        {10, 5},
                        {16, 8},
                        {8, 8}})
      for (std::string_view local : {"ring", "swing"})
        for (const auto& row : registry()) {
          if (row.collective != c) continue;
          double secs = 0;
          // all_reduce: count % L elements left over for the runtime's second pair of calls.
          const uint64_t count =
              c == Collective::all_reduce ? static_cast<uint64_t>(L) * (2 * p / L + 3) + L / 2 : 7;
          const std::string e = symbolic_run(c, hierarchy(L, local, row.name), p, count, 8, &secs);
          EXPECT_EQ(e, "") << to_string(c) << " hier(" << local << "+" << row.name << ") p=" << p
                           << " L=" << L;
        }
}

TEST(Symbolic, HierarchicalSchedulesAtScale) {
  // 1,000, 1,024 and 4,096 ranks in hosts of 8; at 4,096 the recursive inter-host rows (all
  // the others, ~10-20 s each: SHOAL_SIM_LONG=1).
  for (int p : {1000, 1024, 4096})
    for (Collective c :
         {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter})
      for (const auto& row : registry()) {
        if (row.collective != c || row.name == "binomial" || row.name == "bruck") continue;
        // all_gather's composition runs no row: one of them stands for all.
        if (c == Collective::all_gather && &row != &first_row(c)) continue;
        const bool recursive = row.name.starts_with("recursive") || row.name == "rabenseifner";
        if (p == 4096 && !recursive && !long_tests()) continue;
        double secs = 0;
        const uint64_t count =
            c == Collective::all_reduce ? 8 * static_cast<uint64_t>(p / 8 + 1) : 2;
        const std::string e =
            symbolic_run(c, hierarchy(8, "ring", row.name), p, count, 512 << 10, &secs);
        EXPECT_EQ(e, "") << to_string(c) << " hier(ring+" << row.name << ") p=" << p;
        std::printf("  symbolic %s:hier(ring+%s) p=%d: %.2f s\n", std::string(to_string(c)).c_str(),
                    std::string(row.name).c_str(), p, secs);
      }
}

TEST(Symbolic, HierarchicalScheduleRejectsLayoutsItCannotServe) {
  Schedule s;
  CollectiveArgs a;
  a.collective = Collective::all_reduce;
  a.size = 6;
  a.count = 8;
  EXPECT_THROW(hierarchical(s, a, HierarchyPlan{4, "ring", "ring"}),
               InvalidArgumentError);  // 4 does not divide 6
  a.size = 8;
  a.count = 8;
  EXPECT_THROW(hierarchical(s, a, HierarchyPlan{4, "ring", "bruck"}),
               InvalidArgumentError);  // no such all_reduce
  a.collective = Collective::broadcast;
  EXPECT_THROW(hierarchical(s, a, HierarchyPlan{4, "ring", "ring"}), InvalidArgumentError);
}

// ---- virtual time ----

ClusterModel one_rank_per_host(double bw, double latency) {
  ClusterModel m;
  m.ranks_per_host = 1;
  m.nics = 1;
  m.nic_bw = bw;
  m.nic_latency = latency;
  m.reduce_cost = m.copy_cost = 0;
  m.overhead = 0;
  return m;
}

sim::SimResult sim_row(const AlgorithmInfo& row, uint64_t size, int p, const ClusterModel& m,
                       uint64_t chunk = 512 << 10) {
  auto a = shoal::sim::args_for(row.collective, size, p);
  a.chunk_bytes = chunk;
  const auto prog = shoal::sim::compile(a, &row, 1);
  EXPECT_EQ(prog.error, "") << row.name;
  return shoal::sim::simulate(prog, m);
}

TEST(Sim, LoneMessageCostsLatencyPlusBytesOverBandwidth) {
  const auto m = one_rank_per_host(1e9, 5e-6);
  const auto* ring = find_algorithm(Collective::all_gather, "ring");
  const auto r = sim_row(*ring, 2 << 20, 2, m, 4 << 20);  // each rank sends its 1 MiB block once
  ASSERT_EQ(r.error, "");
  EXPECT_NEAR(r.time, 5e-6 + (1 << 20) / 1e9, 1e-9);
  EXPECT_EQ(r.messages, 2u);
}

TEST(Sim, BytesConservedNoDeadlockAndBandwidthBound) {
  ClusterModel m = one_rank_per_host(10e9, 2e-6);
  m.reduce_cost = 1e-11;
  m.copy_cost = 5e-12;
  for (const auto* row : rows_of_interest())
    for (int p : {2, 3, 7, 8, 24, 64})
      for (uint64_t size : {uint64_t{4096} * p, uint64_t{1} << 24}) {
        const auto r = sim_row(*row, size, p, m);
        ASSERT_EQ(r.error, "") << row->name << " p=" << p;
        EXPECT_EQ(r.bytes_sent, r.bytes_received) << row->name;
        // Every rank must get (p-1)/p of n (all_gather, reduce_scatter) or send and get it twice
        // (all_reduce) through its NIC.
        const auto a = shoal::sim::args_for(row->collective, size, p);
        const double n = static_cast<double>(model_bytes(a));
        const double bound = sim::bus_factor(row->collective, p) * n / m.nic_bw + m.nic_latency;
        EXPECT_GE(r.time, bound * (1 - 1e-9))
            << to_string(row->collective) << ":" << row->name << " p=" << p << " size=" << size;
      }
}

TEST(Sim, RingLatencyLinearRecursiveDoublingLogarithmic) {
  const double alpha = 1e-6;
  const auto m = one_rank_per_host(1e18, alpha);  // bandwidth out of the picture
  const auto* ring = find_algorithm(Collective::all_reduce, "ring");
  const auto* rd = find_algorithm(Collective::all_reduce, "recursive_doubling");
  for (int p : {16, 64, 256, 1024}) {
    const uint64_t size = 4 * static_cast<uint64_t>(p);  // one element per block
    const double t_ring = sim_row(*ring, size, p, m).time, t_rd = sim_row(*rd, size, p, m).time;
    EXPECT_NEAR(t_ring / alpha, 2.0 * (p - 1), 0.01 * p) << p;
    EXPECT_NEAR(t_rd / alpha, std::log2(p), 0.01) << p;
  }
}

// The same for all_gather and reduce_scatter (docs/algorithms.md, "Latency against world
// size"): with bandwidth out of the picture a schedule's time is its critical path in message
// latencies, p-1 for the rings and ceil(log2 p) for Bruck at any p, log2 p for recursive
// doubling and halving at powers of two (+2 for the fold elsewhere).
TEST(Sim, AllGatherAndReduceScatterLatencyGrowsWithLog2P) {
  const double alpha = 1e-6;
  const auto m = one_rank_per_host(1e18, alpha);
  auto steps = [&](Collective c, const char* name, int p) {
    const auto* row = find_algorithm(c, name);
    const uint64_t size = 4 * static_cast<uint64_t>(p);  // one element per block
    return sim_row(*row, size, p, m).time / alpha;
  };
  for (int p : {16, 100, 1000, 1024}) {
    const double log_p = std::ceil(std::log2(p)), fold = (p & (p - 1)) == 0 ? 0 : 2;
    EXPECT_NEAR(steps(Collective::all_gather, "ring", p), p - 1, 0.01 * p) << p;
    EXPECT_NEAR(steps(Collective::reduce_scatter, "ring", p), p - 1, 0.01 * p) << p;
    EXPECT_NEAR(steps(Collective::all_gather, "bruck", p), log_p, 0.01) << p;
    EXPECT_LE(steps(Collective::all_gather, "recursive_doubling", p),
              std::floor(std::log2(p)) + fold + 0.01)
        << p;
    EXPECT_LE(steps(Collective::reduce_scatter, "recursive_halving", p),
              std::floor(std::log2(p)) + fold + 0.01)
        << p;
    EXPECT_GE(steps(Collective::reduce_scatter, "recursive_halving", p),
              std::floor(std::log2(p)) - 0.01)
        << p;
  }
}

// A token bucket per NIC (tc's tbf on the emulated cluster, a cloud VM's burst allowance):
// calls that leave the links idle most of the time run at the burst rate, calls that move more
// than the bucket refills run at the shaped rate, and back to back no call beats the shaped
// rate on average (what the bucket lends, the call before had to leave unused).
TEST(Sim, TokenBucketLendsIdleLinksNeverMoreThanTheShapedRate) {
  ClusterModel shaped = one_rank_per_host(125e6, 100e-6);  // 1 Gbit/s, a slow 100 us
  ClusterModel bucket = shaped;
  bucket.nic_burst_bytes = 250000;
  bucket.nic_burst_bw = 3e9;
  ClusterModel no_burst = bucket;  // a bucket of nothing: the shaped link
  no_burst.nic_burst_bytes = 0;
  const auto* ring = find_algorithm(Collective::all_gather, "ring");
  const auto* swing = find_algorithm(Collective::all_reduce, "swing");
  const int p = 8;
  // 8 KiB all_gather: 1 KiB blocks, 7 steps of 100 us latency; 7 KiB per call per NIC refill in
  // 56 us at 125 MB/s: the bucket stays full and the wire costs ~0 instead of 7 x 8 us.
  const double t_small = sim_row(*ring, 8 << 10, p, bucket).time;
  EXPECT_NEAR(t_small, 7 * 100e-6, 7 * 1e-6);
  EXPECT_NEAR(sim_row(*ring, 8 << 10, p, shaped).time, 7 * (100e-6 + 1024 / 125e6), 1e-9);
  EXPECT_DOUBLE_EQ(sim_row(*ring, 8 << 10, p, no_burst).time,
                   sim_row(*ring, 8 << 10, p, shaped).time);
  for (const auto* row : {ring, swing})
    for (uint64_t size = 8 << 10; size <= (64u << 20); size *= 8) {
      const double with = sim_row(*row, size, p, bucket).time,
                   without = sim_row(*row, size, p, shaped).time;
      const auto a = shoal::sim::args_for(row->collective, size, p);
      // What one NIC sends per call, at least (the bus bandwidth's bytes), at the shaped rate.
      const double wire =
          sim::bus_factor(row->collective, p) * static_cast<double>(model_bytes(a)) / 125e6;
      EXPECT_LE(with, without * (1 + 1e-9)) << row->name << " " << size;
      EXPECT_GE(with, wire * 0.999) << row->name << " " << size;
    }
  // 64 MiB moves 55 MiB per NIC: 220x the bucket; back to back it is as shaped.
  EXPECT_NEAR(sim_row(*ring, 64 << 20, p, bucket).time / sim_row(*ring, 64 << 20, p, shaped).time,
              1.0, 0.01);
  // The model file keeps the bucket.
  const ClusterModel back = sim::model_from_json(sim::to_json(bucket));
  EXPECT_EQ(back.nic_burst_bytes, 250000u);
  EXPECT_DOUBLE_EQ(back.nic_burst_bw, 3e9);
}

// Two regions of 1 Gbit/s hosts (host h in region h mod 2), 0.5 ms one way inside each and
// 35 ms plus a 100 Mbit/s line each way between them (netcluster.sh's continents in small).
ClusterModel two_regions() {
  ClusterModel m = one_rank_per_host(125e6, 5e-6);
  m.regions = 2;
  m.paths = {{0, 0.5e-3, 0}, {12.5e6, 35e-3, 0}, {12.5e6, 35e-3, 0}, {0, 0.5e-3, 0}};
  return m;
}

TEST(Sim, RegionsAddTheirDelayAndShareTheLineBetweenThem) {
  const ClusterModel m = two_regions();
  const auto* ring = find_algorithm(Collective::all_gather, "ring");
  // Hosts 0 and 1 lie in different regions: one 1 MiB block each way, each direction its own line.
  auto r = sim_row(*ring, 2 << 20, 2, m, 4 << 20);
  ASSERT_EQ(r.error, "");
  EXPECT_NEAR(r.time, 5e-6 + 35e-3 + (1 << 20) / 12.5e6, 1e-9);
  // Four hosts in rank order cross between the regions at every hop: 0->1 and 2->3 share the
  // line from region 0 to 1, 1->2 and 3->0 the other one; three dependent steps of a block.
  const double block = 1 << 20;
  r = sim_row(*ring, 4 << 20, 4, m, 4 << 20);
  ASSERT_EQ(r.error, "");
  EXPECT_NEAR(r.time, 3 * (5e-6 + 35e-3 + block / (12.5e6 / 2)), 1e-6);
  // Inside one region (hosts 0 and 2 of 4, region 0): the NIC's rate and the short delay.
  ClusterModel one = m;
  one.regions = 1;
  one.paths = {{0, 0.5e-3, 0}};
  r = sim_row(*ring, 2 << 20, 2, one, 4 << 20);
  EXPECT_NEAR(r.time, 5e-6 + 0.5e-3 + (1 << 20) / 125e6, 1e-9);
  // What measuring the links finds: each pair's rate alone and its one-way latency.
  const auto rates = sim::pair_rates(m, 4), lat = sim::pair_latencies(m, 4);
  EXPECT_DOUBLE_EQ(rates[0 * 4 + 1], 12.5e6);
  EXPECT_DOUBLE_EQ(rates[0 * 4 + 2], 125e6);
  EXPECT_DOUBLE_EQ(lat[0 * 4 + 1], 5e-6 + 35e-3);
  EXPECT_DOUBLE_EQ(lat[3 * 4 + 1], 5e-6 + 0.5e-3);
  // The ring that follows them crosses each line once (0 2 3 1 or its mirror), each crossing
  // alone on its line: at most three steps of one block over a line to itself.
  const auto order = tune::ring_order({4, rates, lat});
  ASSERT_EQ(order.size(), 4u);
  const auto* link_ring = find_algorithm(Collective::all_gather, "link_ring");
  ASSERT_NE(link_ring, nullptr);
  auto a = sim::args_for(Collective::all_gather, 4 << 20, 4);
  a.chunk_bytes = 4 << 20;
  a.ring_order = &order;
  const auto followed = sim::simulate(sim::compile(a, link_ring, 1), m);
  ASSERT_EQ(followed.error, "");
  EXPECT_LE(followed.time, 3 * (5e-6 + 35e-3 + block / 12.5e6) + 1e-6);
  EXPECT_LT(followed.time * 1.5, sim_row(*ring, 4 << 20, 4, m, 4 << 20).time);
}

TEST(Sim, AHomesDownlinkAndUplinkDifferAndTheSlowerOneBinds) {
  ClusterModel m = one_rank_per_host(5e6, 1e-6);  // 40 Mbit/s up
  m.nic_down_bw = 25e6;                           // 200 Mbit/s down
  const auto* linear = find_algorithm(Collective::gather, "linear");
  ASSERT_NE(linear, nullptr);
  // Three senders into rank 0: their uplinks (3 x 5 MB/s) stay under its downlink (25 MB/s).
  const double block = 1 << 20;
  auto r = sim_row(*linear, 4 << 20, 4, m, 4 << 20);
  ASSERT_EQ(r.error, "");
  EXPECT_NEAR(r.time, 1e-6 + block / 5e6, 1e-6);
  // Seven: 7 x 5 MB/s exceed it; the downlink shared by seven flows binds.
  r = sim_row(*linear, 8 << 20, 8, m, 8 << 20);
  EXPECT_NEAR(r.time, 1e-6 + block / (25e6 / 7), 1e-6);
  EXPECT_DOUBLE_EQ(sim::pair_rates(m, 2)[1], 5e6);
}

TEST(SimModel, ReadsTheWanSpecNetclusterWrites) {
  // `netcluster.sh spec --layout continents --hosts 4 --nics 2` (shortened), with the root
  // namespace's endpoint in a region of its own.
  const std::string spec = R"(regions 4
endpoint shoal-h0 eth0 198.18.0.1 1000000000 1000000000 0
endpoint shoal-h0 eth1 198.18.1.1 1000000000 1000000000 0
endpoint shoal-h1 eth0 198.18.0.2 1000000000 1000000000 1
endpoint shoal-h1 eth1 198.18.1.2 1000000000 1000000000 1
endpoint shoal-h2 eth0 198.18.0.3 1000000000 1000000000 2
endpoint shoal-h2 eth1 198.18.1.3 1000000000 1000000000 2
endpoint shoal-h3 eth0 198.18.0.4 1000000000 1000000000 0
endpoint shoal-h3 eth1 198.18.1.4 1000000000 1000000000 0
endpoint - shoal-w0 198.18.0.254 0 0 3
path 0 0 0 500000 0 0
path 0 1 300000000 35000000 0 0
path 0 2 200000000 70000000 0 0.001
path 1 0 300000000 35000000 0 0
path 1 1 0 500000 0 0
path 1 2 100000000 100000000 0 0
path 2 0 200000000 70000000 0 0
path 2 1 100000000 100000000 0 0
path 2 2 0 500000 0 0
)";
  ClusterModel base;
  base.ranks_per_host = 2;
  const ClusterModel m = sim::model_from_wan(spec, base);
  EXPECT_EQ(m.ranks_per_host, 2);
  EXPECT_EQ(m.nics, 2);
  EXPECT_DOUBLE_EQ(m.nic_bw, 125e6);
  EXPECT_EQ(m.nic_down_bw, 0);
  ASSERT_EQ(m.regions, 3);
  ASSERT_EQ(m.paths.size(), 9u);
  EXPECT_DOUBLE_EQ(m.paths[0 * 3 + 2].bw, 25e6);
  EXPECT_DOUBLE_EQ(m.paths[0 * 3 + 2].delay, 70e-3);
  EXPECT_DOUBLE_EQ(m.paths[0 * 3 + 2].loss, 0.001);
  EXPECT_DOUBLE_EQ(m.paths[1 * 3 + 2].bw, 12.5e6);
  EXPECT_DOUBLE_EQ(m.paths[1 * 3 + 1].delay, 0.5e-3);
  EXPECT_EQ(m.region_of(3), 0);
  // Its JSON carries the paths back.
  const ClusterModel back = sim::model_from_json(sim::to_json(m));
  ASSERT_EQ(back.paths.size(), 9u);
  EXPECT_EQ(back.regions, 3);
  EXPECT_DOUBLE_EQ(back.paths[1 * 3 + 2].delay, 100e-3);
  EXPECT_DOUBLE_EQ(back.paths[0 * 3 + 2].loss, 0.001);

  // Asymmetric homes: every host its own region.
  const ClusterModel home = sim::model_from_wan(R"(regions 2
endpoint a eth0 198.18.0.1 40000000 200000000 0
endpoint b eth0 198.18.0.2 40000000 200000000 1
path 0 1 0 15000000 0 0.005
path 1 0 0 15000000 0 0.005
)");
  EXPECT_DOUBLE_EQ(home.nic_bw, 5e6);
  EXPECT_DOUBLE_EQ(home.nic_down_bw, 25e6);
  EXPECT_EQ(home.regions, 2);

  // What the model cannot hold is refused, naming it.
  auto refused = [](const std::string& text, const std::string& what) {
    try {
      sim::model_from_wan(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refused(
      "regions 2\nendpoint a eth0 198.18.0.1 1000 1000 1\nendpoint b eth0 198.18.0.2 1000 "
      "1000 0\n",
      "not in region");
  refused(
      "regions 1\nendpoint a eth0 198.18.0.1 1000 1000 0\nendpoint b eth0 198.18.0.2 2000 "
      "1000 0\n",
      "differs in rate");
  refused("regions 1\nendpoint a eth0 198.18.0.1 0 0 0\n", "must be shaped");
  refused("regions x\n", "WAN spec");
  ClusterModel bad = m;
  bad.paths.pop_back();
  EXPECT_THROW(sim::check_model(bad), InvalidArgumentError);
  bad = m;
  bad.hosts_per_leaf = 2;
  EXPECT_THROW(sim::check_model(bad), InvalidArgumentError);
}

TEST(Sim, TaperNeverHelpsAndSharedNicsSlowDown) {
  ClusterModel m = sim::frontier_model();
  m.hosts_per_leaf = 4;
  const auto* rd = find_algorithm(Collective::all_gather, "recursive_doubling");
  const auto* rab = find_algorithm(Collective::all_reduce, "rabenseifner");
  for (const auto* row : {rd, rab}) {
    const double flat = sim_row(*row, 64 << 20, 128, m).time;
    m.taper = 4;
    const double tapered = sim_row(*row, 64 << 20, 128, m).time;
    m.taper = 1;
    EXPECT_GT(tapered, flat * 1.5) << row->name;  // distant partners cross the thin core
    ClusterModel one_nic = m;
    one_nic.nics = 1;
    EXPECT_GT(sim_row(*row, 64 << 20, 128, one_nic).time, flat * 1.5) << row->name;
  }
}

// Two leaves whose uplinks carry a tenth of a NIC, hosts alternating between them: the rates
// each pair has alone (what measuring the links finds), and the ring in the order they give
// against the ring in rank order, which crosses the core at every hop.
TEST(Sim, TheRingThatFollowsTheModelsLinksCrossesTheCoreTwice) {
  ClusterModel m = one_rank_per_host(125e6, 1e-6);
  m.hosts_per_leaf = 3;
  m.taper = 30;  // uplink: 3 x 125 MB/s / 30
  m.alternate_leaves = 1;
  const std::vector<double> rates = sim::pair_rates(m, 6);
  EXPECT_DOUBLE_EQ(rates[0 * 6 + 2], 125e6);   // hosts 0 and 2: leaf 0
  EXPECT_DOUBLE_EQ(rates[0 * 6 + 1], 12.5e6);  // hosts 0 and 1: through the core
  EXPECT_DOUBLE_EQ(rates[3 * 6 + 3], 0);
  const auto order = std::make_shared<const std::vector<int>>(tune::ring_order({6, rates}));
  int crossings = 0;
  for (size_t k = 0; k < order->size(); ++k)
    crossings += m.leaf_of((*order)[k], 6) != m.leaf_of((*order)[(k + 1) % 6], 6);
  EXPECT_EQ(crossings, 2);
  const auto* ring = find_algorithm(Collective::all_reduce, "ring");
  const auto* link_ring = find_algorithm(Collective::all_reduce, "link_ring");
  auto a = sim::args_for(Collective::all_reduce, 16 << 20, 6);
  const double in_rank_order = sim_row(*ring, 16 << 20, 6, m).time;
  const double in_link_order =
      sim::simulate(sim::compile(a, sim::Builder([&](Schedule& s, const CollectiveArgs& args) {
                                   CollectiveArgs with = args;
                                   with.ring_order = order.get();
                                   link_ring->build(s, with);
                                 }),
                                 1),
                    m)
          .time;
  // Rank order: three hops share each uplink; the link order: one. The core decides both.
  EXPECT_NEAR(in_rank_order / in_link_order, 3.0, 0.15);
}

TEST(Sim, HierarchicalSchedulesUseEveryNic) {
  // PCCL's point: the flat ring crosses each host boundary with one flow, so it runs on one NIC
  // however many the host has; the rank-aligned groups of the hierarchy run on all of them.
  ClusterModel m = sim::frontier_model();
  const auto* ring = find_algorithm(Collective::all_gather, "ring");
  const auto hier = hierarchy(m.ranks_per_host, "ring", "ring");
  auto time_of = [&](const sim::Builder& build, int nics) {
    m.nics = nics;
    const auto prog =
        shoal::sim::compile(shoal::sim::args_for(Collective::all_gather, 64 << 20, 64), build, 1);
    const auto r = shoal::sim::simulate(prog, m);
    EXPECT_EQ(r.error, "");
    EXPECT_EQ(r.bytes_sent, r.bytes_received);
    return r.time;
  };
  const double ring1 = time_of(sim::Builder(ring->build), 1),
               ring4 = time_of(sim::Builder(ring->build), 4);
  const double hier1 = time_of(hier, 1), hier4 = time_of(hier, 4);
  EXPECT_NEAR(ring4 / ring1, 1.0, 0.01);
  EXPECT_GT(hier1 / hier4, 1.5);
  EXPECT_LT(hier4, ring4);
  // and never below what must enter a host through its NICs: (H-1)/H of the output
  const double hosts = 64 / m.ranks_per_host;
  const double nic_bound = (hosts - 1) / hosts * (64 << 20) / (4 * m.nic_bw);
  EXPECT_GT(hier4, nic_bound);
  // shoal's multi-rail TCP stripes each pair's stream over every NIC: then the flat ring uses
  // all four too, up to the next bottleneck: the ring's steps inside a host, 50 GB/s each
  // (intra_flow_bw), twice one NIC's 25 GB/s. It still stays above the same bound.
  m.stripe = 1;
  const double striped1 = time_of(sim::Builder(ring->build), 1),
               striped4 = time_of(sim::Builder(ring->build), 4);
  EXPECT_NEAR(striped1, ring1, 1e-9 * ring1);  // one NIC: nothing to stripe over
  EXPECT_NEAR(ring4 / striped4, m.intra_flow_bw / m.nic_bw, 0.05);
  EXPECT_GT(striped4, nic_bound);
}

TEST(Sim, ForcedRowsAtScaleRunQuickly) {
  // The log-depth rows at 4096 ranks on the Frontier-like model, timed (the rings and Swing
  // take ~20k steps per rank: shoal-sim measures them; docs/scale.md).
  const ClusterModel m = sim::frontier_model();
  for (const char* name : {"rabenseifner", "recursive_doubling", "binomial"}) {
    const auto* row = find_algorithm(Collective::all_reduce, name);
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = sim_row(*row, 256 << 20, 4096, m);
    ASSERT_EQ(r.error, "") << name;
    // What leaves a host: 2(H-1)/H of the vector through its NICs (a host-level bound).
    const double hosts = 4096 / m.ranks_per_host;
    EXPECT_GT(r.time, 2.0 * (hosts - 1) / hosts * (256 << 20) / (m.nics * m.nic_bw)) << name;
    std::printf("  %s at 4096 ranks: %.1f us virtual, %.2f s wall\n", name, r.time * 1e6,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
}

// Constants a calibration test must find back (no per-message overhead, no per-flow cap: the
// fit sets both to 0).
ClusterModel known_model(double intra_latency, double intra_bw, double reduce_cost,
                         double copy_cost) {
  ClusterModel m;
  m.intra_latency = intra_latency;
  m.intra_bw = intra_bw;
  m.intra_flow_bw = 0;
  m.reduce_cost = reduce_cost;
  m.copy_cost = copy_cost;
  m.overhead = 0;
  return m;
}

TEST(Calibrate, SeparatesCopyFromReductionCountsSharedCoresAndKeepsTheBestRepeat) {
  // Points of 2, 4 and 8 ranks measured on 2 shared cores (4 and 8 ranks: every rank's work
  // over the 2 cores on top), with copies cheaper than reductions; every point also once more,
  // 30% slower (a noisy run).
  const ClusterModel truth = known_model(5e-6, 20e9, 2e-10, 0.5e-10);
  std::vector<sim::Measurement> pts;
  for (int p : {2, 4, 8})
    for (auto [coll, algo] : {std::pair{Collective::all_reduce, "rabenseifner"},
                              {Collective::all_gather, "bruck"},
                              {Collective::all_gather, "ring"},
                              {Collective::reduce_scatter, "recursive_halving"}})
      for (uint64_t size = 1024 * 8; size <= (16u << 20); size *= 4) {
        sim::Measurement x;
        x.collective = coll;
        x.algorithm = algo;
        x.transport = "shm";
        x.ranks = p;
        x.size = size;
        x.seconds = sim::predict(x, truth, /*cores=*/2);
        if (p <= 2)
          EXPECT_DOUBLE_EQ(x.seconds, sim::predict(x, truth));  // a core per rank
        else
          EXPECT_GT(x.seconds, sim::predict(x, truth) * 1.2) << p << " " << size;
        pts.push_back(x);
        x.seconds *= 1.3;
        pts.push_back(x);
      }
  pts = sim::best_of_repeats(pts);
  ASSERT_EQ(pts.size(), 3u * 4 * 6);
  ClusterModel fitted;
  const auto fits = sim::calibrate(pts, fitted, 8, /*cores=*/2);
  ASSERT_EQ(fits.size(), 1u);
  EXPECT_LT(fits[0].median_error, 0.01);
  EXPECT_NEAR(fitted.intra_latency, 5e-6, 0.25e-6);
  EXPECT_NEAR(fitted.reduce_cost, 2e-10, 0.1e-10);
  EXPECT_NEAR(fitted.copy_cost, 0.5e-10, 0.05e-10);
  // without the shared cores the same points fit worse
  std::vector<sim::Measurement> again = pts;
  ClusterModel naive;
  EXPECT_GT(sim::calibrate(again, naive)[0].median_error, 0.05);
}

TEST(Calibrate, OnSharedCoresTheTreeBeatsRecursiveDoublingAtSmallSizes) {
  // 8 ranks, 1 KiB, latency-bound: on a core per rank recursive doubling's 3 latencies beat the
  // tree's 6 (reduce up, broadcast down); on 2 cores each adds its messages over them, 8 x 3 = 24
  // against 2 x 7 = 14, and the tree wins, as measured (docs/algorithms.md).
  const ClusterModel m = known_model(5e-6, 1e15, 0, 0);
  auto time = [&](const char* algo, int cores) {
    sim::Measurement x;
    x.collective = Collective::all_reduce;
    x.algorithm = algo;
    x.transport = "shm";
    x.ranks = 8;
    x.size = 1024;
    return sim::predict(x, m, cores);
  };
  EXPECT_LT(time("recursive_doubling", 0), time("binomial", 0));
  EXPECT_NEAR(time("recursive_doubling", 2), 3 * 5e-6 + 24 * 5e-6 / 2, 1e-7);
  EXPECT_NEAR(time("binomial", 2), 6 * 5e-6 + 14 * 5e-6 / 2, 1e-7);
  EXPECT_LT(time("binomial", 2), time("recursive_doubling", 2));
}

TEST(Calibrate, LoopbackTcpIsOneHostWhoseTransfersShareOneRate) {
  // Loopback has no wire: every transfer is the kernel's copying on the same machine, so the
  // ranks' transfers share the tcp rate (nic_bw) instead of each rank having a NIC of its own.
  // A ring all_gather of S bytes on p ranks: p transfers of S/p at once in each of p-1 steps,
  // (p-1) S / nic_bw in all (with a NIC per rank: (p-1) S / (p nic_bw)).
  ClusterModel m = known_model(0, 1e30, 0, 0);
  m.nic_latency = 0;
  m.nic_bw = 1e9;
  sim::Measurement x;
  x.collective = Collective::all_gather;
  x.algorithm = "ring";
  x.transport = "tcp";
  x.ranks = 4;
  x.size = 4 << 20;
  EXPECT_EQ(sim::job_model(x, m).ranks_per_host, 4);
  EXPECT_NEAR(sim::predict(x, m), 3.0 * x.size / m.nic_bw, 1e-6 * 3.0 * x.size / m.nic_bw);
  // On 2 cores the transfers add no work: their one rate is already the cores' total.
  EXPECT_DOUBLE_EQ(sim::predict(x, m, /*cores=*/2), sim::predict(x, m));
  m.nic_latency = 10e-6;  // the latency is the tcp one
  x.size = 16;            // one float per rank: 3 latencies, and 4 bytes at a time to move
  EXPECT_NEAR(sim::predict(x, m), 3 * 10e-6, 1e-7);
  // On 2 cores, Brent's bound: the 3 latencies of the critical path, plus the 4 x 3 messages of
  // all the ranks, a latency each, over the 2 cores.
  EXPECT_NEAR(sim::predict(x, m, /*cores=*/2), 3 * 10e-6 + 4 * 3 * 10e-6 / 2, 1e-7);
}

TEST(Calibrate, ANetworksBandwidthIsNotStretchedBySharedCores) {
  // The emulated cluster: 2 to 16 ranks on 2 cores behind 1 Gbit/s links with tbf's bucket.
  // The links' rate is the network's, not the cores': a 16 MiB all_gather on 8 hosts is as
  // wire-bound on 2 cores as on 8, while its latency-bound 1 KiB call is nearly 4x slower; the
  // fit finds the links' rate and latency, from the default model's far start (25 GB/s, 2 us).
  ClusterModel truth = known_model(5e-6, 5e9, 3e-10, 1e-10);
  truth.nic_burst_bytes = 250000;
  truth.nic_burst_bw = 3e9;
  truth.nic_bw = 125e6;
  truth.nic_latency = 30e-6;
  auto point = [](const char* algo, Collective coll, int hosts, int per_host, uint64_t size) {
    sim::Measurement x;
    x.collective = coll;
    x.algorithm = algo;
    x.transport = "net";
    x.hosts = hosts;
    x.ranks = hosts * per_host;
    x.size = size;
    return x;
  };
  const auto big = point("ring", Collective::all_gather, 8, 1, 16u << 20);
  EXPECT_NEAR(sim::predict(big, truth, 2), sim::predict(big, truth),
              0.02 * sim::predict(big, truth));
  const auto small = point("ring", Collective::all_gather, 8, 1, 1024);
  const double stretch = sim::predict(small, truth, 2) / sim::predict(small, truth);
  EXPECT_GT(stretch, 3.5);  // 8 ranks on 2 cores: 4x, less the unstretched wire time
  EXPECT_LE(stretch, 4.0 + 1e-9);
  std::vector<sim::Measurement> pts;
  for (auto [hosts, per_host] : {std::pair{2, 1}, {4, 1}, {8, 1}, {8, 2}})
    for (auto [coll, algo] : {std::pair{Collective::all_reduce, "ring"},
                              {Collective::all_reduce, "rabenseifner"},
                              {Collective::all_gather, "bruck"},
                              {Collective::reduce_scatter, "recursive_halving"}})
      for (uint64_t size = 1024; size <= (16u << 20); size *= 16) {
        auto x = point(algo, coll, hosts, per_host, size);
        x.seconds = sim::predict(x, truth, /*cores=*/2);
        pts.push_back(x);
      }
  ClusterModel fitted = truth;  // the bucket and the intra-host constants (8 x 2) are given
  fitted.nic_bw = ClusterModel{}.nic_bw;
  fitted.nic_latency = ClusterModel{}.nic_latency;
  const auto fits = sim::calibrate(pts, fitted, 8, /*cores=*/2);
  ASSERT_EQ(fits.size(), 1u);
  EXPECT_EQ(fits[0].transport, "net");
  EXPECT_LT(fits[0].median_error, 0.01);
  EXPECT_NEAR(fitted.nic_bw, 125e6, 6e6);
  EXPECT_NEAR(fitted.nic_latency, 30e-6, 3e-6);
}

TEST(Calibrate, RecoversTheModelItWasGivenAndReadsBenchTables) {
  // Measurements made by the simulator itself, with known constants: the fit must find them.
  ClusterModel truth = known_model(7e-6, 3e9, 4e-10, 4e-10);
  truth.ranks_per_host = 4;
  std::vector<sim::Measurement> pts;
  for (const char* algo : {"ring", "rabenseifner", "recursive_doubling"})
    for (uint64_t size = 1024; size <= (16u << 20); size *= 4) {
      sim::Measurement x;
      x.algorithm = algo;
      x.transport = "shm";
      x.ranks = 4;
      x.size = size;
      x.seconds = sim::predict(x, truth);
      pts.push_back(x);
    }
  ClusterModel fitted;
  const auto fits = sim::calibrate(pts, fitted);
  ASSERT_EQ(fits.size(), 1u);
  EXPECT_LT(fits[0].median_error, 0.01);
  EXPECT_NEAR(fitted.intra_latency, 7e-6, 0.3e-6);
  EXPECT_NEAR(fitted.intra_bw, 3e9, 0.15e9);
  EXPECT_NEAR(fitted.reduce_cost, 4e-10, 0.3e-10);

  // shoal-bench's table: its header, its communicator line, then rows.
  auto bench_table = [](const std::string& coll, int ranks, int hosts, const std::string& transport,
                        const std::string& rows) {
    const std::string n = std::to_string(ranks), h = std::to_string(hosts),
                      local = std::to_string(ranks / hosts);
    return "# shoal-bench " + coll + ": " + n + " ranks (" + h +
           " hosts), dtype float32, op sum, iters 20, warmup 5\n" + "# rank 0 of " + n +
           " (local 0 of " + local + ", " + h + " host(s)), transport " + transport +
           ", timeout 300 s, chunk 524288 B\n" + rows;
  };
  const TempFile table(bench_table("all_reduce", 4, 1, "shm with 3 peer(s)",
                                   "        1024           256     float     sum      -1    20.50  "
                                   "  0.05    0.07      0    21.00    0.05    0.07      0\n"
                                   "     1048576        262144     float     sum      -1   900.00  "
                                   "  1.17    1.75      0   910.00    1.15    1.73      0\n"));
  const auto read = sim::read_bench_file(table.path, "rabenseifner");
  ASSERT_EQ(read.size(), 2u);
  EXPECT_EQ(read[1].size, 1048576u);
  EXPECT_DOUBLE_EQ(read[1].seconds, 900e-6);  // the lesser of out of place and in place
  EXPECT_DOUBLE_EQ(read[0].seconds, 20.5e-6);
  EXPECT_EQ(read[0].transport, "shm");
  EXPECT_EQ(read[0].ranks, 4);
  EXPECT_EQ(read[0].algorithm, "rabenseifner");

  // A job across hosts is measured on a network of its own: "net", apart from loopback "tcp".
  const TempFile across_hosts(
      bench_table("all_gather", 4, 4, "tcp with 3 peer(s) on 198.18.0.1",
                  "        1024           64     float     none      -1    80.00    0.01    0.01   "
                  "   0    81.00    0.01    0.01      0\n"));
  const auto across = sim::read_bench_file(across_hosts.path, "bruck");
  ASSERT_EQ(across.size(), 1u);
  EXPECT_EQ(across[0].transport, "net");
  EXPECT_EQ(across[0].hosts, 4);
  EXPECT_EQ(across[0].collective, Collective::all_gather);
}

// ---- predicted tuning tables (sim/tables.hpp, shoal-sim tune) ----

TEST(SimulatedTables, EveryRowAndTheHierarchyPerWorldAsTheDispatcherReadsThem) {
  ClusterModel m;
  m.ranks_per_host = 2;
  m.nics = 1;
  m.nic_bw = 1e9;
  m.nic_latency = 10e-6;
  shoal::sim::TableOptions o;
  o.collectives = {Collective::all_reduce, Collective::reduce_scatter};
  o.worlds = {2, 4};
  o.sizes = {1 << 10, 1 << 20};
  o.threads = 1;
  tune::TuningFile measured;  // a measured 2-rank all_reduce table: kept, not simulated
  tune::Measurements kept;
  kept.collective = Collective::all_reduce;
  kept.world = 2;
  kept.ranks_per_host = 2;
  kept.transport = tune::Transport::shm;
  kept.sizes = {1024};
  kept.times.emplace_back(&first_row(Collective::all_reduce), std::vector<double>{1e-5});
  measured.tables.push_back(kept);
  std::vector<std::string> lines;
  o.progress = [&](const std::string& line) { lines.push_back(line); };
  shoal::sim::predict_tuning_tables(m, o, measured);
  ASSERT_EQ(measured.tables.size(), 4u);  // the kept one and three simulated
  EXPECT_FALSE(measured.tables[0].simulated);
  EXPECT_EQ(lines.size(), 4u);
  for (size_t i = 1; i < measured.tables.size(); ++i) {
    const auto& t = measured.tables[i];
    SCOPED_TRACE(std::string(to_string(t.collective)) + " at " + std::to_string(t.world));
    EXPECT_TRUE(t.simulated);
    EXPECT_EQ(t.sizes, o.sizes);
    EXPECT_EQ(t.transport, t.world > 2 ? tune::Transport::tcp : tune::Transport::shm);
    size_t rows = 0;
    // Every row but those that follow links or overlap flights, which tables do not time.
    for (const auto& row : registry())
      rows += row.collective == t.collective && !row.follows_links && !row.overlaps_flights;
    ASSERT_EQ(t.times.size(), rows);
    // Each cell is the simulator's time for that row, computed here directly.
    for (const auto& [row, times] : t.times)
      for (size_t k = 0; k < o.sizes.size(); ++k) {
        auto a = shoal::sim::args_for(t.collective, o.sizes[k], t.world, DataType::float32);
        const auto res = shoal::sim::simulate(shoal::sim::compile(a, row, 1), m);
        EXPECT_DOUBLE_EQ(times[k], std::max(res.time, 1e-9)) << row->name;
      }
    // Across two hosts of two ranks: the hierarchy, no faster than its best composition.
    EXPECT_EQ(t.hierarchical.size(), t.world == 4 ? o.sizes.size() : 0u);
    for (size_t k = 0; k < t.hierarchical.size(); ++k) {
      auto a = shoal::sim::args_for(t.collective, o.sizes[k], t.world, DataType::float32);
      const HierarchyPlan plan{2, "ring", "ring"};
      const auto res = shoal::sim::simulate(
          shoal::sim::compile(
              a, [&](Schedule& s, const CollectiveArgs& x) { hierarchical(s, x, plan); }, 1),
          m);
      EXPECT_LE(t.hierarchical[k], res.time);
      EXPECT_GT(t.hierarchical[k], 0.0);
    }
  }
  // What it writes, the dispatcher loads.
  EXPECT_EQ(tune::parse_tuning_file(tune::to_json(measured), "predicted").tables.size(), 4u);
  o.worlds = {1};
  EXPECT_THROW(shoal::sim::predict_tuning_tables(m, o, measured), InvalidArgumentError);
}

}  // namespace
}  // namespace shoal::testing
