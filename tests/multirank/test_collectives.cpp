// Every collective x dtype x op x world size {1,2,3,4,5,8} x count {0,1,7,1000,20003,2^20+3},
// ranks as threads over real TCP sockets, checked element by element against an independent
// reference (tests/support/values.hpp).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <sstream>

#include "algorithms/registry.hpp"
#include "support/env.hpp"
#include "support/ranks.hpp"
#include "support/values.hpp"

namespace shoal::testing {
namespace {

constexpr uint64_t kCounts[] = {0, 1, 7, 1000, 20000 + 3, (1u << 20) + 3};

std::string where(const char* coll, DataType t, ReduceOp op, uint64_t count, int rank,
                  const char* how) {
  std::ostringstream os;
  os << coll << " " << to_string(t) << " " << to_string(op) << " count=" << count
     << " rank=" << rank << " " << how;
  return os.str();
}

void check_reductions(Communicator& c, DataType t, uint64_t count) {
  const int p = c.size(), r = c.rank();
  for (ReduceOp op : ops_for(t)) {
    auto in = bytes_for(count, t);
    for (uint64_t i = 0; i < count; ++i) store(in.data(), i, t, value(r, i, t, op));
    auto want = [&](uint64_t i) { return expected(p, i, t, op); };
    // all_reduce, out of place and in place
    auto out = bytes_for(count, t);
    c.all_reduce(in.data(), out.data(), count, t, op);
    EXPECT_EQ(wrong(out.data(), 0, count, t, want), 0u)
        << where("all_reduce", t, op, count, r, "out-of-place");
    auto inplace = in;
    c.all_reduce(inplace.data(), count, t, op);
    EXPECT_EQ(wrong(inplace.data(), 0, count, t, want), 0u)
        << where("all_reduce", t, op, count, r, "in-place");
    // reduce_scatter: input of p blocks of `count`; element j of block b has value(rank, b*count+j)
    auto rs_in = bytes_for(count * p, t);
    for (uint64_t i = 0; i < count * p; ++i) store(rs_in.data(), i, t, value(r, i, t, op));
    auto rs_out = bytes_for(count, t);
    c.reduce_scatter(rs_in.data(), rs_out.data(), count, t, op);
    EXPECT_EQ(wrong(rs_out.data(), 0, count, t,
                    [&](uint64_t j) { return expected(p, r * count + j, t, op); }),
              0u)
        << where("reduce_scatter", t, op, count, r, "out-of-place");
    c.reduce_scatter(rs_in.data(), count, t, op);
    EXPECT_EQ(wrong(rs_in.data(), r * count, count, t,
                    [&](uint64_t j) { return expected(p, r * count + j, t, op); }),
              0u)
        << where("reduce_scatter", t, op, count, r, "in-place");
    // reduce to a root that moves with the op
    const int root = static_cast<int>(op) % p;
    auto red = bytes_for(count, t);
    c.reduce(in.data(), red.data(), count, t, op, root);
    if (r == root) {
      EXPECT_EQ(wrong(red.data(), 0, count, t, want), 0u) << where("reduce", t, op, count, r, "");
    }
  }
}

void check_data_movement(Communicator& c, DataType t, uint64_t count) {
  const int p = c.size(), r = c.rank();
  const ReduceOp op = ReduceOp::sum;  // values only
  auto mine = bytes_for(count, t);
  for (uint64_t i = 0; i < count; ++i) store(mine.data(), i, t, value(r, i, t, op));
  // all_gather: block b = rank b's data
  auto gathered = bytes_for(count * p, t);
  c.all_gather(mine.data(), gathered.data(), count, t);
  auto from_block = [&](uint64_t i) {
    return as_stored(value(static_cast<int>(i / std::max<uint64_t>(count, 1)),
                           i % std::max<uint64_t>(count, 1), t, op),
                     t);
  };
  EXPECT_EQ(wrong(gathered.data(), 0, count * p, t, from_block), 0u)
      << where("all_gather", t, op, count, r, "out-of-place");
  auto ag_inplace = bytes_for(count * p, t);
  std::memcpy(ag_inplace.data() + r * count * size_of(t), mine.data(), count * size_of(t));
  c.all_gather(ag_inplace.data(), count, t);
  EXPECT_EQ(wrong(ag_inplace.data(), 0, count * p, t, from_block), 0u)
      << where("all_gather", t, op, count, r, "in-place");
  // broadcast from a root that depends on the count
  const int root = static_cast<int>(count % p);
  auto bc = r == root ? mine : bytes_for(count, t);
  c.broadcast(bc.data(), count, t, root);
  EXPECT_EQ(wrong(bc.data(), 0, count, t,
                  [&](uint64_t i) { return as_stored(value(root, i, t, op), t); }),
            0u)
      << where("broadcast", t, op, count, r, "");
  // gather and scatter
  auto g = bytes_for(count * p, t);
  c.gather(mine.data(), g.data(), count, t, root);
  if (r == root) {
    EXPECT_EQ(wrong(g.data(), 0, count * p, t, from_block), 0u)
        << where("gather", t, op, count, r, "");
  }
  auto sc = bytes_for(count, t);
  c.scatter(gathered.data(), sc.data(), count, t, root);  // every rank holds the gathered blocks
  EXPECT_EQ(
      wrong(sc.data(), 0, count, t, [&](uint64_t i) { return as_stored(value(r, i, t, op), t); }),
      0u)
      << where("scatter", t, op, count, r, "");
  // all_to_all: send block b = value(r, b*count + j); receive block b from rank b = value(b,
  // r*count + j)
  auto a2a_in = bytes_for(count * p, t), a2a_out = bytes_for(count * p, t);
  for (uint64_t i = 0; i < count * p; ++i) store(a2a_in.data(), i, t, value(r, i, t, op));
  auto a2a_want = [&](uint64_t i) {
    const uint64_t b = i / std::max<uint64_t>(count, 1), j = i % std::max<uint64_t>(count, 1);
    return as_stored(value(static_cast<int>(b), r * count + j, t, op), t);
  };
  c.all_to_all(a2a_in.data(), a2a_out.data(), count, t);
  EXPECT_EQ(wrong(a2a_out.data(), 0, count * p, t, a2a_want), 0u)
      << where("all_to_all", t, op, count, r, "out-of-place");
  c.all_to_all(a2a_in.data(), count, t);
  EXPECT_EQ(wrong(a2a_in.data(), 0, count * p, t, a2a_want), 0u)
      << where("all_to_all", t, op, count, r, "in-place");
  // send/recv around the ring, both posted before waiting
  if (p > 1) {
    auto got = bytes_for(count, t);
    Work s = c.send_async(mine.data(), count, t, (r + 1) % p, 7);
    c.recv(got.data(), count, t, (r + p - 1) % p, 7);
    s.wait();
    EXPECT_EQ(wrong(got.data(), 0, count, t,
                    [&](uint64_t i) { return as_stored(value((r + p - 1) % p, i, t, op), t); }),
              0u)
        << where("send/recv", t, op, count, r, "");
  }
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, EveryCollectiveDtypeOpAndCountMatchesReference) {
  const int n = GetParam();
  std::string err = run_ranks(n, [&](Communicator& c) {
    for (uint64_t count : kCounts)
      for (DataType t : kAllTypes) {
        check_reductions(c, t, count);
        check_data_movement(c, t, count);
      }
    c.barrier();
  });
  EXPECT_EQ(err, "");
}

// The largest world this machine runs: 16 ranks on 2 cores, every collective, dtype and op,
// at counts that do not divide by the world size.
TEST(Collectives16, EveryCollectiveAtSixteenRanks) {
  std::string err = run_ranks(16, [&](Communicator& c) {
    for (uint64_t count : {uint64_t{0}, uint64_t{7}, uint64_t{1000}, uint64_t{40000 + 3}})
      for (DataType t : kAllTypes) {
        check_reductions(c, t, count);
        check_data_movement(c, t, count);
      }
    c.barrier();
  });
  EXPECT_EQ(err, "");
}

// ---- every registry algorithm of all_reduce, all_gather and reduce_scatter, forced as
// SHOAL_ALGO would (a per-thread override, so each rank sets its own before every call) and
// run by the engine over the real transport ----

void check_forced(Communicator& c, const algorithms::AlgorithmInfo& algo, DataType t,
                  uint64_t count) {
  using algorithms::Collective;
  const int p = c.size(), r = c.rank();
  algorithms::detail::set_thread_algorithm_override(std::string(to_string(algo.collective)) + ":" +
                                                    std::string(algo.name));
  const std::string label = std::string(to_string(algo.collective)) + ":" + std::string(algo.name);
  if (algo.collective == Collective::all_gather) {
    const ReduceOp op = ReduceOp::sum;
    auto mine = bytes_for(count, t);
    for (uint64_t i = 0; i < count; ++i) store(mine.data(), i, t, value(r, i, t, op));
    auto from_block = [&](uint64_t i) {
      return as_stored(value(static_cast<int>(i / count), i % count, t, op), t);
    };
    auto out = bytes_for(count * p, t);
    c.all_gather(mine.data(), out.data(), count, t);
    EXPECT_EQ(wrong(out.data(), 0, count * p, t, from_block), 0u)
        << where(label.c_str(), t, op, count, r, "out-of-place");
    auto inplace = bytes_for(count * p, t);
    std::memcpy(inplace.data() + r * count * size_of(t), mine.data(), count * size_of(t));
    c.all_gather(inplace.data(), count, t);
    EXPECT_EQ(wrong(inplace.data(), 0, count * p, t, from_block), 0u)
        << where(label.c_str(), t, op, count, r, "in-place");
  } else {
    // Every algorithm is op-agnostic but for avg; bxor on integers catches a block that is
    // reduced twice or not at all, as a bitwise operator.
    std::vector<ReduceOp> ops(std::begin(kAllOps), std::end(kAllOps));
    if (!is_float(t)) ops.push_back(ReduceOp::bxor);
    for (ReduceOp op : ops) {
      const bool rs = algo.collective == Collective::reduce_scatter;
      const uint64_t n = rs ? count * p : count;
      auto in = bytes_for(n, t);
      for (uint64_t i = 0; i < n; ++i) store(in.data(), i, t, value(r, i, t, op));
      const uint64_t first = rs ? r * count : 0;
      auto want = [&](uint64_t j) { return expected(p, first + j, t, op); };
      auto out = bytes_for(count, t);
      if (rs)
        c.reduce_scatter(in.data(), out.data(), count, t, op);
      else
        c.all_reduce(in.data(), out.data(), count, t, op);
      EXPECT_EQ(wrong(out.data(), 0, count, t, want), 0u)
          << where(label.c_str(), t, op, count, r, "out-of-place");
      if (rs)
        c.reduce_scatter(in.data(), count, t, op);
      else
        c.all_reduce(in.data(), count, t, op);
      EXPECT_EQ(wrong(in.data(), first, count, t, want), 0u)
          << where(label.c_str(), t, op, count, r, "in-place");
    }
  }
  algorithms::detail::set_thread_algorithm_override("");
}

class ForcedAlgorithms : public ::testing::TestWithParam<int> {};

TEST_P(ForcedAlgorithms, EveryAlgorithmMatchesReference) {
  ScopedEnv no_flat("SHOAL_FLAT_MAX_BYTES", "0");  // small calls would skip the schedule
  std::string err = run_ranks(GetParam(), [&](Communicator& c) {
    for (const auto& algo : algorithms::registry()) {
      using algorithms::Collective;
      if (algo.collective != Collective::all_reduce && algo.collective != Collective::all_gather &&
          algo.collective != Collective::reduce_scatter)
        continue;
      for (uint64_t count :
           {uint64_t{0}, uint64_t{1}, uint64_t{7}, uint64_t{1000}, uint64_t{20003}})
        for (DataType t : kAllTypes) check_forced(c, algo, t, count);
      check_forced(c, algo, DataType::float32, (1u << 18) + 3);  // frames past the eager limits
    }
    c.barrier();
  });
  EXPECT_EQ(err, "");
}

INSTANTIATE_TEST_SUITE_P(Worlds, ForcedAlgorithms, ::testing::Values(2, 3, 4, 5, 8),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// Ranks that chose different algorithms fail with MismatchError instead of waiting forever.
TEST(ForcedAlgorithms, DifferentChoicesMismatch) {
  ScopedEnv no_flat("SHOAL_FLAT_MAX_BYTES", "0");
  std::atomic<int> mismatches{0}, other{0};
  run_ranks(2, [&](Communicator& c) {
    algorithms::detail::set_thread_algorithm_override(
        c.rank() == 0 ? "all_reduce:ring" : "all_reduce:recursive_doubling");
    std::vector<float> v(1000, 1.0f);
    try {
      c.all_reduce(std::span<float>(v), ReduceOp::sum);
      ++other;
    } catch (const MismatchError&) {
      ++mismatches;
    } catch (const Error&) {
      ++other;
    }
    algorithms::detail::set_thread_algorithm_override("");
  });
  EXPECT_EQ(mismatches.load(), 2);
  EXPECT_EQ(other.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Collectives, ::testing::Values(1, 2, 3, 4, 5, 8),
                         [](const auto& info) { return "ranks" + std::to_string(info.param); });

}  // namespace
}  // namespace shoal::testing
