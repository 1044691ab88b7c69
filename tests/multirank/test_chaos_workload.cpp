// The chaos soak's workload (src/chaos/workload): every member derives the same ops, each
// result is checked against inputs recomputed from the stable ids, and a wrong element is
// reported, on ranks whose stable ids are not their ranks.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "chaos/workload.hpp"
#include "support/ranks.hpp"

namespace shoal::chaos {
namespace {

TEST(ChaosWorkload, EveryMemberDerivesTheSameOpsAndTheMixCoversEveryKindTypeAndSize) {
  std::map<Kind, int> kinds;
  std::set<DataType> dtypes;
  int odd = 0, large = 0;
  for (int64_t op = 0; op < 3000; ++op) {
    const OpSpec s = derive_op(42, 3, op, 4), again = derive_op(42, 3, op, 4);
    EXPECT_EQ(s.kind, again.kind);
    EXPECT_EQ(s.count, again.count);
    EXPECT_EQ(s.dtype, again.dtype);
    EXPECT_EQ(s.op, again.op);
    EXPECT_EQ(s.root_pick, again.root_pick);
    ASSERT_GE(s.count, 1u);
    if (s.kind == Kind::reduce_scatter) {
      EXPECT_EQ(s.op, ReduceOp::sum);
    }
    ++kinds[s.kind];
    dtypes.insert(s.dtype);
    odd += s.count % 2;
    large += s.count >= 524288;
  }
  EXPECT_EQ(kinds.size(), 5u);
  EXPECT_GT(kinds[Kind::all_reduce], kinds[Kind::barrier]);
  EXPECT_EQ(dtypes.size(), 3u);
  EXPECT_GT(odd, 300);
  EXPECT_GT(large, 10);
  // Another epoch or seed is another sequence.
  int differ_epoch = 0, differ_seed = 0;
  for (int64_t op = 0; op < 100; ++op) {
    differ_epoch += derive_op(42, 3, op, 4).count != derive_op(42, 4, op, 4).count;
    differ_seed += derive_op(42, 3, op, 4).count != derive_op(43, 3, op, 4).count;
  }
  EXPECT_GT(differ_epoch, 80);
  EXPECT_GT(differ_seed, 80);
}

TEST(ChaosWorkload, ExpectedResultsFollowFromTheMembersInputs) {
  const std::vector<int> members = {7, 3, 11};  // stable ids of ranks 0, 1, 2
  OpSpec s;
  s.dtype = DataType::int32;
  s.count = 5;
  s.kind = Kind::all_reduce;
  s.op = ReduceOp::max;
  auto b = prepare<int32_t>(s, members, 1, 2, 9);
  ASSERT_EQ(b.send.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(b.send[i], input_value(3, 2, 9, i));
    int mx = -100;
    for (int id : members) mx = std::max(mx, input_value(id, 2, 9, i));
    EXPECT_EQ(b.expect[i], mx);
  }
  s.kind = Kind::reduce_scatter;
  s.op = ReduceOp::sum;
  b = prepare<int32_t>(s, members, 2, 2, 9);
  ASSERT_EQ(b.send.size(), 15u);
  for (size_t i = 0; i < 5; ++i)
    EXPECT_EQ(b.expect[i], input_value(7, 2, 9, 10 + i) + input_value(3, 2, 9, 10 + i) +
                               input_value(11, 2, 9, 10 + i));
  s.kind = Kind::all_gather;
  b = prepare<int32_t>(s, members, 0, 2, 9);
  ASSERT_EQ(b.expect.size(), 15u);
  EXPECT_EQ(b.expect[5 + 4], input_value(3, 2, 9, 4));
  s.kind = Kind::broadcast;
  s.root_pick = 5;  // root 5 % 3 = 2: stable id 11
  b = prepare<int32_t>(s, members, 2, 2, 9);
  EXPECT_EQ(b.recv, b.expect);  // the root's buffer holds its input already
  EXPECT_EQ(b.expect[0], input_value(11, 2, 9, 0));
  b = prepare<int32_t>(s, members, 0, 2, 9);
  EXPECT_NE(b.recv, b.expect);
}

TEST(ChaosWorkload, AWrongOrMissingElementIsNamed) {
  OpSpec s;
  s.kind = Kind::all_gather;
  s.dtype = DataType::float32;
  s.count = 4;
  auto b = prepare<float>(s, {0, 1}, 0, 0, 0);
  b.recv = b.expect;
  EXPECT_EQ(difference(s, b), "");
  b.recv[6] += 1;
  const std::string what = difference(s, b);
  EXPECT_NE(what.find("element 6"), std::string::npos) << what;
  EXPECT_NE(what.find("1 of 8 differ"), std::string::npos) << what;
  b.recv.pop_back();
  EXPECT_NE(difference(s, b).find("7 elements received, 8 expected"), std::string::npos);
}

TEST(ChaosWorkload, EveryDerivedOpIsRightOnFourRanksWithPermutedIds) {
  const std::vector<int> members = {6, 0, 9, 2};
  ASSERT_EQ(
      testing::run_ranks(4,
                         [&](Communicator& comm) {
                           int checked = 0;
                           for (int64_t op = 0; checked < 120; ++op) {
                             const OpSpec s = derive_op(7, 1, op, comm.size());
                             if (s.count > 65536) continue;  // the mix, kept short
                             const std::string bad = run_op(comm, s, members, 1, op);
                             if (!bad.empty())
                               throw std::runtime_error("op " + std::to_string(op) + ": " + bad);
                             ++checked;
                           }
                         }),
      "");
}

}  // namespace
}  // namespace shoal::chaos
