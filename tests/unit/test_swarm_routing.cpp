// SWARM's control plane without torch: stochastic wiring, rebalancing rule, registry leases.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <thread>
#include <vector>

#include "shoal/error.hpp"
#include "swarm/net/rebalance.hpp"
#include "swarm/net/registry.hpp"
#include "swarm/net/router.hpp"

using namespace shoal;
using namespace shoal::swarm;
using namespace std::chrono_literals;

namespace {
// Drives a router against replicas of known speeds in simulated time: each task takes
// 1/speed seconds on its replica. Returns how many tasks each replica got.
std::map<std::string, int> simulate(Router& router, const std::map<std::string, double>& speed,
                                    int tasks) {
  std::map<std::string, int> got;
  for (int i = 0; i < tasks; ++i) {
    auto r = router.choose(1.0);
    EXPECT_TRUE(r.has_value());
    ++got[r->id];
    router.report_success(r->id, 1.0, 1.0 / speed.at(r->id));
  }
  return got;
}
}  // namespace

TEST(Router, SharesWorkInProportionToMeasuredSpeed) {
  Router router;
  router.set_replicas({{"a", "h:1", 0}, {"b", "h:2", 0}, {"c", "h:3", 0}});
  auto got = simulate(router, {{"a", 4.0}, {"b", 2.0}, {"c", 1.0}}, 7000);
  // Speeds 4:2:1 -> shares 4/7, 2/7, 1/7 once the rates are learned.
  EXPECT_NEAR(got["a"] / 7000.0, 4.0 / 7, 0.02);
  EXPECT_NEAR(got["b"] / 7000.0, 2.0 / 7, 0.02);
  EXPECT_NEAR(got["c"] / 7000.0, 1.0 / 7, 0.02);
  EXPECT_NEAR(router.throughput("a"), 4.0, 1e-9);
}

TEST(Router, NewReplicaEntersAtTheMinimumAndIsTriedAtOnce) {
  Router router;
  router.set_replicas({{"a", "h:1", 0}, {"b", "h:2", 0}});
  simulate(router, {{"a", 1.0}, {"b", 1.0}}, 100);
  router.set_replicas({{"a", "h:1", 0}, {"b", "h:2", 0}, {"c", "h:3", 0}});
  EXPECT_LE(router.virtual_time("c"), std::min(router.virtual_time("a"), router.virtual_time("b")));
  auto r = router.choose(1.0);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->id, "c");
  // A vanished replica is forgotten.
  router.set_replicas({{"a", "h:1", 0}});
  EXPECT_EQ(router.size(), 1u);
  EXPECT_EQ(router.choose(1.0)->id, "a");
}

TEST(Router, AnnouncedThroughputIsUsedUntilMeasured) {
  Router router;
  router.set_replicas({{"fast", "h:1", 10.0}, {"slow", "h:2", 1.0}});
  std::map<std::string, int> got;
  for (int i = 0; i < 110; ++i) ++got[router.choose(1.0)->id];
  EXPECT_NEAR(got["fast"], 100, 2);
}

TEST(Router, FailingReplicaIsBannedWithExponentialBackoff) {
  RouterOptions options;
  options.ban_base = 100ms;
  options.ban_max = 350ms;
  Router router(options);
  router.set_replicas({{"a", "h:1", 1}, {"b", "h:2", 1}});
  auto t0 = SteadyClock::now();
  router.report_failure("a", 1.0, t0);
  EXPECT_TRUE(router.banned("a", t0 + 99ms));
  EXPECT_FALSE(router.banned("a", t0 + 101ms));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(router.choose(1.0, t0 + 50ms)->id, "b");
  router.report_failure("a", 1.0, t0);
  EXPECT_TRUE(router.banned("a", t0 + 199ms));  // 2nd failure: 200 ms
  router.report_failure("a", 1.0, t0);
  router.report_failure("a", 1.0, t0);
  EXPECT_TRUE(router.banned("a", t0 + 349ms));  // capped at ban_max
  EXPECT_FALSE(router.banned("a", t0 + 351ms));
  router.report_failure("b", 1.0, t0);
  EXPECT_FALSE(router.choose(1.0, t0 + 10ms).has_value());  // everyone banned
  router.report_success("a", 1.0, 1.0);
  router.report_failure("a", 1.0, t0);
  EXPECT_FALSE(router.banned("a", t0 + 101ms));  // success reset the back-off
}

namespace {
PeerRecord peer(const std::string& id, int stage, double throughput) {
  PeerRecord r;
  r.id = id;
  r.stage = stage;
  r.host = "127.0.0.1";
  r.port = 1;
  r.throughput = throughput;
  return r;
}
}  // namespace

TEST(Rebalance, MovesOnePeerToTheBottleneckAndConverges) {
  // Five equal peers piled on stage 0 of three stages.
  std::vector<PeerRecord> peers;
  for (int i = 0; i < 5; ++i) peers.push_back(peer("p" + std::to_string(i), 0, 1.0));
  peers.push_back(peer("q", 1, 1.0));
  peers.push_back(peer("r", 2, 1.0));
  int moves = 0;
  double last = 0;
  while (auto m = plan_move(peers, 3, 0.05)) {
    EXPECT_GE(m->bottleneck_after, m->bottleneck_before);  // leximin: ties may keep b one move
    EXPECT_GE(m->bottleneck_after, last);
    last = m->bottleneck_after;
    for (auto& p : peers)
      if (p.id == m->peer) p.stage = m->to;
    ASSERT_LT(++moves, 10) << "placement did not converge";
  }
  auto t = stage_throughputs(peers, 3);
  EXPECT_EQ(moves, 2);  // 5,1,1 -> 4,2,1 -> 3,2,2, then no move gains
  EXPECT_DOUBLE_EQ(last, 2.0);
  for (double x : t) EXPECT_GE(x, 2.0);
}

TEST(Rebalance, NoMoveWithinThresholdAndNeverFromALoneReplica) {
  std::vector<PeerRecord> peers = {peer("a", 0, 1.0), peer("b", 0, 1.0), peer("c", 1, 1.9)};
  // Moving a or b would give 1.0 vs 2.9: bottleneck 1.0 -> 1.0, no gain.
  EXPECT_FALSE(plan_move(peers, 2, 0.05).has_value());
  // A lone replica never leaves its stage, however slow the other stage is.
  peers = {peer("a", 0, 10.0), peer("b", 1, 1.0)};
  EXPECT_FALSE(plan_move(peers, 2, 0.0).has_value());
  // Heterogeneous: the slow peer of the over-served stage is the one that helps most... or not:
  // stage 0 = 4+1, stage 1 = 1. Moving the 4 gives min(1, 5) = 1; moving the 1 gives min(4, 2) = 2.
  peers = {peer("fast", 0, 4.0), peer("slow", 0, 1.0), peer("x", 1, 1.0)};
  auto m = plan_move(peers, 2, 0.05);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->peer, "slow");
  EXPECT_DOUBLE_EQ(m->bottleneck_after, 2.0);
}

// Stages of unequal cost (1, 1 and 4 probes per sample): nine peers of equal speed start three
// a stage. A moved peer is worth its speed over the cost of the stage it joins, which the
// rebalancer learns from the records (speed / throughput); the best placement is 2, 2, 5
// (bottleneck min(2, 2, 5/4) = 1.25, worked by hand over every split of nine).
TEST(Rebalance, UnequalStagesAreCreditedAtTheirMeasuredCost) {
  const double cost[3] = {1, 1, 4};
  std::vector<PeerRecord> peers;
  for (int i = 0; i < 9; ++i) {
    peers.push_back(peer("p" + std::to_string(i), i % 3, 1.0 / cost[i % 3]));
    peers.back().speed = 1.0;
  }
  const auto measured = stage_costs(peers, 3);
  for (int k = 0; k < 3; ++k) EXPECT_DOUBLE_EQ(measured[k], cost[k]);
  EXPECT_DOUBLE_EQ(best_bottleneck(peers, 3), 1.25);
  int moves = 0;
  while (auto m = plan_move(peers, 3, 0.05)) {
    for (auto& p : peers)
      if (p.id == m->peer) {
        p.stage = m->to;
        p.throughput = p.speed / cost[m->to];  // what the peer then measures there
      }
    auto t = stage_throughputs(peers, 3);
    // The move's prediction is what the stages then deliver.
    EXPECT_DOUBLE_EQ(m->bottleneck_after, *std::min_element(t.begin(), t.end()));
    ASSERT_LT(++moves, 10) << "placement did not converge";
  }
  std::vector<int> replicas(3, 0);
  for (auto& p : peers) ++replicas[p.stage];
  EXPECT_EQ(replicas, (std::vector<int>{2, 2, 5}));
  // Without speeds (older peers) the stages count as equal, as before.
  for (auto& p : peers) p.speed = 0;
  EXPECT_DOUBLE_EQ(stage_costs(peers, 3)[0], 0);
  EXPECT_DOUBLE_EQ(best_bottleneck(peers, 3), 0);
}

TEST(Registry, LeasesExpireAndRecordsRoundTrip) {
  TcpStore::Options o;
  o.is_server = true;
  auto store = std::make_shared<TcpStore>("127.0.0.1", 0, o);
  StoreRegistry a(store), b(store);
  a.set_lease(1s);  // the checks before it expires must fit in it, even on a loaded machine
  auto ra = peer("server-a", 1, 12.5);
  ra.port = 4242;
  ra.round = 7;
  ra.load = 3;
  ra.speed = 3.25;
  a.announce(ra);
  b.announce(peer("server-b", 0, 1.0));
  auto all = b.peers();
  ASSERT_EQ(all.size(), 2u);
  auto s1 = b.peers(1);
  ASSERT_EQ(s1.size(), 1u);
  EXPECT_EQ(s1[0].id, "server-a");
  EXPECT_EQ(s1[0].address(), "127.0.0.1:4242");
  EXPECT_DOUBLE_EQ(s1[0].throughput, 12.5);
  EXPECT_DOUBLE_EQ(s1[0].speed, 3.25);
  EXPECT_EQ(s1[0].round, 7u);
  // a stops renewing: gone once the expiry its record states has passed (that time, not a
  // guess at it, is what the wait is for)
  while (wall_ms() <= s1[0].expires_ms) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(b.peers(1).size(), 0u);
  a.announce(ra);  // renewing brings it back under the same slot
  EXPECT_EQ(b.peers(1).size(), 1u);
  EXPECT_EQ(store->add("swarm/peer_slots", 0), 2);
  a.withdraw("server-a");
  EXPECT_EQ(b.peers(1).size(), 0u);
}

TEST(Registry, ListingSkipsASlotCountedButNotYetWrittenAndStrangersBytes) {
  TcpStore::Options o;
  o.is_server = true;
  auto store = std::make_shared<TcpStore>("127.0.0.1", 0, o);
  StoreRegistry a(store), b(store);
  a.announce(peer("server-a", 0, 1.0));
  store->add("swarm/peer_slots", 1);  // a peer between counting its slot and writing it
  b.announce(peer("server-b", 2, 2.0));
  store->set("swarm/peer/1", std::string("not a record"));  // then someone else's bytes there
  store->add("swarm/peer_slots", 1);                        // and one more slot never written
  auto all = a.peers();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].id, "server-a");
  EXPECT_EQ(all[1].id, "server-b");
  EXPECT_EQ(a.peers(2).size(), 1u);
  // A connection of its own to the same store sees the same keys.
  auto own = a.connect_rendezvous();
  EXPECT_NE(own.get(), store.get());
  EXPECT_EQ(own->add("swarm/peer_slots", 0), 4);
  RendezvousPool pool(std::make_shared<StoreRegistry>(store));
  {
    auto first = pool.borrow();
    auto second = pool.borrow();  // none idle: a second connection
    EXPECT_NE(first.operator->(), second.operator->());
    first->set("x", std::string("1"));
    EXPECT_EQ(second->get_string("x"), "1");
  }
  auto again = pool.borrow();  // back from the pool
  EXPECT_EQ(again->add("swarm/peer_slots", 0), 4);
}

TEST(Registry, MalformedRecordsAreRejectedClearly) {
  EXPECT_THROW(StoreRegistry::decode("v1\tx"), InvalidArgumentError);
  // A record of an older peer (v1: no speed) still reads, with speed 0.
  const PeerRecord old = StoreRegistry::decode("v1\tid\t0\th\t80\t2.5\t1\t3\t99");
  EXPECT_EQ(old.port, 80);
  EXPECT_DOUBLE_EQ(old.throughput, 2.5);
  EXPECT_DOUBLE_EQ(old.speed, 0);
  EXPECT_THROW(StoreRegistry::decode("v3\tid\t0\th\t80\t2.5\t1\t3\t99\t1"), InvalidArgumentError);
  EXPECT_THROW(StoreRegistry::decode("v2\tid\t0\th\t1\t1\t1\t1\t1"), InvalidArgumentError);
  EXPECT_THROW(StoreRegistry::decode("v1\tid\t0\th\t70000\t1\t1\t1\t1"), InvalidArgumentError);
  auto bad = peer("has\ttab", 0, 1);
  EXPECT_THROW(StoreRegistry::encode(bad), InvalidArgumentError);
  auto r = StoreRegistry::decode(StoreRegistry::encode(peer("ok", 2, 0.25)));
  EXPECT_EQ(r.id, "ok");
  EXPECT_EQ(r.stage, 2);
  EXPECT_DOUBLE_EQ(r.throughput, 0.25);
}
