// The planner (comm/plan.hpp): each path taken where the rules of docs/architecture.md say, and
// a schedule's row the one those rules name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "algorithms/registry.hpp"
#include "comm/flat.hpp"
#include "comm/plan.hpp"
#include "shoal/error.hpp"
#include "support/env.hpp"

namespace shoal::comm {
namespace {

using algorithms::Collective;
using testing::ScopedEnv;

constexpr uint64_t kSlots = 64 << 10, kDirect = 256 << 10;

algorithms::CollectiveArgs args_of(const Request& r, int size) {
  algorithms::CollectiveArgs a;
  a.collective = r.collective;
  a.dtype = r.dtype;
  a.op = r.op;
  a.count = r.count;
  a.root = r.root;
  a.size = size;
  return a;
}

Request call(Collective c, uint64_t count, DataType dtype = DataType::float32) {
  Request r;
  r.collective = c;
  r.count = count;
  r.dtype = dtype;
  r.root = c == Collective::broadcast || c == Collective::reduce ? 0 : -1;
  r.may_use_hierarchy = true;
  return r;
}

// Four ranks on one host (shared memory: slots of 64 KiB, direct from 256 KiB; with `rounds`, an
// all_reduce beyond the slots through them in rounds) or on two hosts of two ranks each (TCP
// between them; the hierarchy fits).
Planner one_host(bool rounds = false) {
  Planner::Layout layout{{kSlots, kDirect, rounds}, false};
  return Planner(layout, [] {
    return tune::Dispatcher::from_environment(tune::make_context({0, 0, 0, 0}, true), nullptr);
  });
}
Planner two_hosts() {
  Planner::Layout layout{{0, UINT64_MAX, false}, true};
  return Planner(layout, [] {
    return tune::Dispatcher::from_environment(tune::make_context({0, 0, 1, 1}, false), nullptr);
  });
}

Plan plan(Planner& p, const Request& r) { return p.plan(r, args_of(r, 4)); }

class PlanTest : public ::testing::Test {
 protected:
  void TearDown() override { algorithms::detail::set_algorithm_override(""); }
  ScopedEnv hierarchical_{"SHOAL_HIERARCHICAL", "off"};
  ScopedEnv dispatch_{"SHOAL_DISPATCH", "off"};  // the first row, unless a case says otherwise
};

TEST_F(PlanTest, SmallCallsOnOneHostAreFlatAndSmallBroadcastsQueued) {
  Planner p = one_host();
  for (Collective c : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                       Collective::broadcast, Collective::reduce}) {
    const Plan flat = plan(p, call(c, 256));  // 1 KiB a rank (4 KiB in a reduce_scatter)
    EXPECT_EQ(flat.path, Path::flat) << algorithms::to_string(c);
    EXPECT_EQ(flat.queued, c == Collective::broadcast) << algorithms::to_string(c);
  }
  EXPECT_FALSE(plan(p, call(Collective::broadcast, 2048)).queued);    // 8 KiB: beyond the queue
  EXPECT_EQ(plan(p, call(Collective::barrier, 0)).path, Path::flat);  // an empty slot
  for (Collective c : {Collective::all_to_all, Collective::gather, Collective::scatter})
    EXPECT_EQ(plan(p, call(c, 256)).path, Path::schedule) << algorithms::to_string(c);
  EXPECT_EQ(p.planned(Path::flat), 7u);
  EXPECT_EQ(p.planned(Path::schedule), 3u);
}

TEST_F(PlanTest, BeyondTheSlotsOnlyTheDirectPathIsFlatAndASettingRuleThereWins) {
  Planner p = one_host();
  // 128 KiB: beyond the slots, below the direct path.
  EXPECT_EQ(plan(p, call(Collective::all_reduce, 32 << 10)).path, Path::schedule);
  // 1 MiB: direct.
  EXPECT_EQ(plan(p, call(Collective::all_reduce, 256 << 10)).path, Path::flat);
  EXPECT_EQ(plan(p, call(Collective::all_gather, 256 << 10)).path, Path::flat);
  algorithms::detail::set_algorithm_override("all_reduce:ring");
  const Plan ring = plan(p, call(Collective::all_reduce, 256 << 10));
  EXPECT_EQ(ring.path, Path::schedule);
  EXPECT_EQ(ring.args.algorithm, algorithms::find_algorithm(Collective::all_reduce, "ring"));
  // Within the slots the flat path stays (documented).
  EXPECT_EQ(plan(p, call(Collective::all_reduce, 256)).path, Path::flat);
}

TEST_F(PlanTest, WithRoundsEveryReductionBeyondTheSlotsIsFlatAndASettingRuleThereWins) {
  Planner p = one_host(/*rounds=*/true);
  for (uint64_t count : {16u << 10, 32u << 10, 256u << 10}) {  // 64 KiB (the slots) to 1 MiB
    const Plan flat = plan(p, call(Collective::all_reduce, count));
    EXPECT_EQ(flat.path, Path::flat) << count;
    EXPECT_EQ(flat_rounds(flat.args, {kSlots, kDirect, true}), (count * 4 + kSlots - 1) / kSlots);
    EXPECT_FALSE(flat_direct(flat.args, {kSlots, kDirect, true})) << count;
  }
  // A reduce_scatter's too (its 4 blocks of 32 KiB, 2 rounds of 4 pieces of 8 KiB), but not an
  // all_gather's: of 128 KiB a rank it is still below the direct path.
  const Plan rs = plan(p, call(Collective::reduce_scatter, 8 << 10));
  EXPECT_EQ(rs.path, Path::flat);
  EXPECT_EQ(flat_rounds(rs.args, {kSlots, kDirect, true}), 2u);
  EXPECT_EQ(plan(p, call(Collective::all_gather, 32 << 10)).path, Path::schedule);
  // No rounds where a round holds no element of each block, or where there would be more than
  // 2^24 rounds (their flat numbers must stay within the wrap-safe comparisons).
  EXPECT_EQ(flat_rounds(args_of(call(Collective::reduce_scatter, 100, DataType::float64), 4),
                        {16, UINT64_MAX, true}),
            1u);
  EXPECT_EQ(flat_rounds(args_of(call(Collective::all_reduce, uint64_t{1} << 30), 4),
                        {64, UINT64_MAX, true}),
            1u);
  EXPECT_EQ(flat_rounds(args_of(call(Collective::all_reduce, uint64_t{1} << 26), 4),
                        {64, UINT64_MAX, true}),
            uint32_t{1} << 22);
  algorithms::detail::set_algorithm_override("all_reduce:ring");
  EXPECT_EQ(plan(p, call(Collective::all_reduce, 32 << 10)).path, Path::schedule);
  // Without a direct path (a kernel that refuses cross-memory attach) rounds still run.
  Planner no_direct(Planner::Layout{{kSlots, UINT64_MAX, true}, false}, [] {
    return tune::Dispatcher::from_environment(tune::make_context({0, 0, 0, 0}, true), nullptr);
  });
  algorithms::detail::set_algorithm_override("");
  EXPECT_EQ(plan(no_direct, call(Collective::all_reduce, 256 << 10)).path, Path::flat);
}

TEST_F(PlanTest, AVectoredCallIsFlatOnlyWithinTheSlots) {
  Planner p = one_host();
  Request r = call(Collective::all_reduce, 256);
  Pieces pieces;
  r.vectored = &pieces;
  EXPECT_EQ(plan(p, r).path, Path::flat);
  r.count = 256 << 10;  // direct for a plain call
  EXPECT_EQ(plan(p, r).path, Path::schedule);
  Planner rounds = one_host(/*rounds=*/true);  // in rounds for a plain call
  EXPECT_EQ(plan(rounds, r).path, Path::schedule);
}

TEST_F(PlanTest, AForcedRowRunsWhateverElseWouldApply) {
  ScopedEnv on("SHOAL_HIERARCHICAL", "on");
  algorithms::detail::set_algorithm_override("all_reduce:ring");
  const auto* bruck = algorithms::find_algorithm(Collective::all_gather, "bruck");
  const auto* swing = algorithms::find_algorithm(Collective::all_reduce, "swing");
  ASSERT_TRUE(bruck && swing);
  Planner shm = one_host(), hosts = two_hosts();
  Request small = call(Collective::all_gather, 4);
  small.forced = bruck;
  const Plan a = plan(shm, small);  // would be flat
  EXPECT_EQ(a.path, Path::schedule);
  EXPECT_EQ(a.args.algorithm, bruck);
  EXPECT_TRUE(a.args.forced);
  Request big = call(Collective::all_reduce, 1 << 20);
  big.forced = swing;
  const Plan b = plan(hosts, big);  // would be hierarchical, and SHOAL_ALGO names ring
  EXPECT_EQ(b.path, Path::schedule);
  EXPECT_EQ(b.args.algorithm, swing);
}

TEST_F(PlanTest, AScheduleNamesItsFinalRow) {
  Planner p = two_hosts();
  // SHOAL_DISPATCH=off: the collective's first row.
  const Plan first = plan(p, call(Collective::reduce_scatter, 1024));
  EXPECT_EQ(first.path, Path::schedule);
  EXPECT_EQ(first.args.algorithm, &algorithms::first_row(Collective::reduce_scatter));
  EXPECT_TRUE(first.args.forced);  // nothing applies again on the way to the engine
  algorithms::detail::set_algorithm_override("reduce_scatter:0-8K:ring;all_reduce:rabenseifner");
  EXPECT_EQ(plan(p, call(Collective::reduce_scatter, 512)).args.algorithm,
            algorithms::find_algorithm(Collective::reduce_scatter, "ring"));
  // 32 KiB: outside the rule's range.
  EXPECT_EQ(plan(p, call(Collective::reduce_scatter, 2048)).args.algorithm,
            &algorithms::first_row(Collective::reduce_scatter));
}

TEST_F(PlanTest, TheHierarchyTakesPublicReductionsAndGathersWhereTheLayoutFits) {
  ScopedEnv on("SHOAL_HIERARCHICAL", "on");
  Planner hosts = two_hosts();
  for (Collective c : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter})
    EXPECT_EQ(plan(hosts, call(c, 1024)).path, Path::hierarchy) << algorithms::to_string(c);
  EXPECT_EQ(plan(hosts, call(Collective::broadcast, 1024)).path, Path::schedule);
  EXPECT_EQ(plan(hosts, call(Collective::all_reduce, 0)).path, Path::schedule);
  Request internal = call(Collective::all_gather, 1024);
  internal.may_use_hierarchy = false;  // the library's own calls (creation, split)
  EXPECT_EQ(plan(hosts, internal).path, Path::schedule);
  Request vectored = call(Collective::all_reduce, 1024);
  Pieces pieces;
  vectored.vectored = &pieces;
  EXPECT_EQ(plan(hosts, vectored).path, Path::schedule);
  EXPECT_EQ(hosts.planned(Path::hierarchy), 3u);
  // One host: nothing to compose, whatever the setting says.
  Planner shm = one_host();
  EXPECT_EQ(shm.hierarchy_mode(), HierarchyMode::off);
  EXPECT_NE(plan(shm, call(Collective::all_reduce, 1 << 20)).path, Path::hierarchy);
}

TEST_F(PlanTest, AutoStandsAsideForASettingRule) {
  ScopedEnv automatic("SHOAL_HIERARCHICAL", "auto");
  {
    ScopedEnv algo("SHOAL_ALGO", "all_reduce:ring");
    EXPECT_EQ(two_hosts().hierarchy_mode(), HierarchyMode::off);
  }
  EXPECT_EQ(two_hosts().hierarchy_mode(), HierarchyMode::automatic);
}

TEST_F(PlanTest, AMalformedHierarchySettingIsAClearError) {
  ScopedEnv bad("SHOAL_HIERARCHICAL", "sometimes");
  Planner p = two_hosts();
  try {
    plan(p, call(Collective::all_reduce, 1024));
    FAIL() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("SHOAL_HIERARCHICAL='sometimes'"), std::string::npos)
        << e.what();
  }
}

TEST_F(PlanTest, APathByNameIsTakenWhereTheCallCanTakeItAndRefusedElsewhere) {
  Planner shm = one_host(), hosts = two_hosts();
  Request flat = call(Collective::all_gather, 64 << 10);  // 256 KiB a rank: direct
  flat.forced_path = algorithms::NamedPath::flat;
  algorithms::detail::set_algorithm_override("all_gather:ring");  // would win beyond the slots
  EXPECT_EQ(plan(shm, flat).path, Path::flat);
  EXPECT_THROW(plan(hosts, flat), InvalidArgumentError);  // no shared memory across hosts
  Request hier = call(Collective::reduce_scatter, 1024);
  hier.forced_path = algorithms::NamedPath::hierarchical;  // SHOAL_HIERARCHICAL is off here
  EXPECT_EQ(plan(hosts, hier).path, Path::hierarchy);
  EXPECT_THROW(plan(shm, hier), InvalidArgumentError);  // one host
  Request bcast = call(Collective::broadcast, 1024);
  bcast.forced_path = algorithms::NamedPath::hierarchical;
  EXPECT_THROW(plan(hosts, bcast), InvalidArgumentError);  // no hierarchical broadcast
  EXPECT_EQ(hosts.planned(Path::hierarchy), 1u);
}

TEST_F(PlanTest, ASettingRuleMayNameAPathTakenWhereTheCallCanTakeIt) {
  Planner shm = one_host(), hosts = two_hosts();
  algorithms::detail::set_algorithm_override(
      "all_reduce:0-1M:hierarchical;all_gather:flat;all_reduce:ring");
  EXPECT_EQ(plan(hosts, call(Collective::all_reduce, 1024)).path, Path::hierarchy);
  const Plan big = plan(hosts, call(Collective::all_reduce, 1 << 20));  // 4 MiB: the ring rule
  EXPECT_EQ(big.path, Path::schedule);
  EXPECT_EQ(big.args.algorithm, algorithms::find_algorithm(Collective::all_reduce, "ring"));
  // One host: no hierarchy to take, so the rows decide (the flat path within the slots).
  EXPECT_EQ(plan(shm, call(Collective::all_reduce, 256)).path, Path::flat);
  // 128 KiB a rank: beyond the slots, below the direct path; flat named, but it cannot.
  EXPECT_EQ(plan(shm, call(Collective::all_gather, 32 << 10)).path, Path::schedule);
  EXPECT_EQ(plan(shm, call(Collective::all_gather, 64 << 10)).path, Path::flat);
  EXPECT_EQ(plan(hosts, call(Collective::all_gather, 64 << 10)).path, Path::schedule);
  // Paths only where the planner has them.
  EXPECT_THROW(algorithms::parse_override("broadcast:hierarchical"), InvalidArgumentError);
  EXPECT_THROW(algorithms::parse_override("all_to_all:flat"), InvalidArgumentError);
  EXPECT_EQ(algorithms::parse_override("reduce:flat").front().path, algorithms::NamedPath::flat);
}

// A rule naming a path the call cannot take is as if not written: the next matching rule
// decides.
TEST_F(PlanTest, ARuleWhosePathTheCallCannotTakeGivesWayToTheNext) {
  Planner tcp_one_host(Planner::Layout{{0, UINT64_MAX, false}, false}, [] {
    return tune::Dispatcher::from_environment(tune::make_context({0, 0, 0, 0}, false), nullptr);
  });
  Planner hosts = two_hosts(), shm = one_host();
  algorithms::detail::set_algorithm_override(
      "all_reduce:0-1M:hierarchical;all_reduce:0-1M:flat;all_reduce:rabenseifner");
  const Plan p = plan(tcp_one_host, call(Collective::all_reduce, 1024));
  EXPECT_EQ(p.path, Path::schedule);
  EXPECT_EQ(p.args.algorithm, algorithms::find_algorithm(Collective::all_reduce, "rabenseifner"));
  EXPECT_EQ(plan(hosts, call(Collective::all_reduce, 1024)).path, Path::hierarchy);
  EXPECT_EQ(plan(shm, call(Collective::all_reduce, 1024)).path, Path::flat);
}

// The paths' table (what shoal-info lists and SHOAL_ALGO accepts) says what the planner does:
// each path takes every collective it lists, on a layout that has it, and refuses the others.
TEST_F(PlanTest, ThePathsTableIsWhatThePlannerTakes) {
  Planner shm = one_host(), hosts = two_hosts();
  ASSERT_EQ(algorithms::paths().size(), 2u);
  for (const auto& info : algorithms::paths()) {
    Planner& layout = info.path == algorithms::NamedPath::flat ? shm : hosts;
    const Path want = info.path == algorithms::NamedPath::flat ? Path::flat : Path::hierarchy;
    for (Collective c : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                         Collective::broadcast, Collective::reduce, Collective::all_to_all,
                         Collective::gather, Collective::scatter}) {
      const std::string rule = std::string(algorithms::to_string(c)) + ":" + std::string(info.name);
      Request r = call(c, 256);
      r.root = c == Collective::broadcast || c == Collective::reduce || c == Collective::gather ||
                       c == Collective::scatter
                   ? 0
                   : -1;
      r.forced_path = info.path;
      if (algorithms::find_path(c, info.name)) {
        EXPECT_NO_THROW(algorithms::parse_override(rule)) << rule;
        EXPECT_EQ(plan(layout, r).path, want) << rule;
      } else {
        EXPECT_THROW(algorithms::parse_override(rule), InvalidArgumentError) << rule;
        EXPECT_THROW(plan(layout, r), InvalidArgumentError) << rule;
      }
    }
  }
}

}  // namespace
}  // namespace shoal::comm
