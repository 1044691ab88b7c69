// EtcdStore and EtcdRegistry against a real 3-member etcd cluster: the Store semantics against
// an in-memory reference, exactly-once add() while the leader is killed, leases, and clear
// errors (never a hang) when a majority is gone or the input is wrong.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "shoal/error.hpp"
#include "shoal/store.hpp"
#include "support/etcd_cluster.hpp"
#include "swarm/net/registry.hpp"

using namespace shoal;
using shoal::testing::EtcdCluster;
using Clock = std::chrono::steady_clock;

namespace {

EtcdStore::Options quick() {
  EtcdStore::Options o;
  o.timeout = std::chrono::seconds(10);
  return o;
}

class EtcdStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new EtcdCluster(3); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  static EtcdCluster* cluster_;
};
EtcdCluster* EtcdStoreTest::cluster_ = nullptr;

}  // namespace

TEST_F(EtcdStoreTest, MatchesAnInMemoryStoreOverRandomOperations) {
  EtcdStore a(cluster_->endpoints(), quick());
  EtcdStore b(cluster_->endpoints(), quick());  // a second client: its reads see a's writes
  std::map<std::string, std::string> reference;
  std::mt19937 rng(7);
  for (int op = 0; op < 400; ++op) {
    std::string key = "ops/k" + std::to_string(rng() % 12);
    EtcdStore& s = rng() % 2 ? a : b;
    switch (rng() % 5) {
      case 0: {  // binary values, the empty one included
        std::string value(rng() % 5, '\0');
        for (char& c : value) c = static_cast<char>(rng());
        s.set(key, Bytes(value.begin(), value.end()));
        reference[key] = value;
        break;
      }
      case 1:
        ASSERT_EQ(s.remove(key), reference.erase(key) == 1) << key;
        break;
      case 2:
        ASSERT_EQ(s.check({key}), reference.count(key) == 1) << key;
        if (reference.count(key)) {
          ASSERT_EQ(s.get_string(key), reference[key]);
        }
        break;
      case 3: {
        std::string counter = "ops/n" + std::to_string(rng() % 3);
        int64_t delta = static_cast<int64_t>(rng() % 7) - 3;
        int64_t expect = (reference.count(counter) ? std::stoll(reference[counter]) : 0) + delta;
        ASSERT_EQ(s.add(counter, delta), expect);
        reference[counter] = std::to_string(expect);
        break;
      }
      case 4: {
        std::vector<std::string> keys{key, "ops/k" + std::to_string(rng() % 12)};
        bool all = reference.count(keys[0]) && reference.count(keys[1]);
        ASSERT_EQ(s.check(keys), all);
        break;
      }
    }
  }
  auto listed = a.list("ops/");
  std::map<std::string, std::string> got;
  for (auto& [k, v] : listed) got[k] = std::string(v.begin(), v.end());
  EXPECT_EQ(got, reference);
  EXPECT_TRUE(a.list("ops/none/").empty());
}

TEST_F(EtcdStoreTest, GetAndWaitBlockUntilSetThenTimeOutNamingTheKey) {
  EtcdStore s(cluster_->endpoints(), quick());
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EtcdStore w(cluster_->endpoints(), quick());
    w.set("wait/late", std::string("here"));
  });
  auto t0 = Clock::now();
  EXPECT_EQ(s.get_string("wait/late"), "here");
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(250));
  writer.join();
  s.wait({"wait/late"}, std::chrono::seconds(1));
  s.set_timeout(std::chrono::milliseconds(300));
  EXPECT_THROW(s.get("wait/never"), TimeoutError);
  try {
    s.wait({"wait/late", "wait/never"}, std::chrono::milliseconds(300));
    FAIL() << "wait returned without the key";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("'wait/never'"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("'wait/late'"), std::string::npos) << e.what();
  }
}

TEST_F(EtcdStoreTest, ConcurrentAddsFromManyClientsAreExact) {
  constexpr int kClients = 4, kAdds = 50;
  std::vector<std::vector<int64_t>> seen(kClients);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c)
    threads.emplace_back([&, c] {
      EtcdStore s(cluster_->endpoints(), quick());
      for (int i = 0; i < kAdds; ++i) seen[c].push_back(s.add("adds/n", 1));
    });
  for (auto& t : threads) t.join();
  std::set<int64_t> all;
  for (auto& v : seen) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kClients * kAdds));  // every value once
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kClients * kAdds);
}

TEST_F(EtcdStoreTest, RejectsBadInputClearly) {
  EXPECT_THROW(EtcdStore::parse_endpoints("etcd://"), InvalidArgumentError);
  EXPECT_THROW(EtcdStore::parse_endpoints("etcd://host-without-port"), InvalidArgumentError);
  EXPECT_THROW(EtcdStore::parse_endpoints("etcd://h:99999"), InvalidArgumentError);
  EXPECT_EQ(EtcdStore::parse_endpoints("etcd://a:1,http://b:2/"),
            (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_THROW(EtcdStore({}, quick()), InvalidArgumentError);
  EtcdStore s(cluster_->endpoints(), quick());
  s.set("bad/text", std::string("twelve"));
  EXPECT_THROW(s.add("bad/text", 1), InvalidArgumentError);
  EXPECT_EQ(s.get_string("bad/text"), "twelve");  // nothing lost
}

TEST_F(EtcdStoreTest, LeasedKeysVanishWithTheirLease) {
  EtcdStore s(cluster_->endpoints(), quick());
  int64_t lease = s.grant_lease(std::chrono::seconds(2));
  s.put("lease/a", Bytes{1}, lease);
  int64_t other = s.grant_lease(std::chrono::seconds(60));
  s.put("lease/b", Bytes{2}, other);
  for (int i = 0; i < 4; ++i) {  // renewed: outlives its TTL
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    ASSERT_TRUE(s.keep_alive(lease));
  }
  EXPECT_TRUE(s.check({"lease/a"}));
  auto dropped = Clock::now();
  while (s.check({"lease/a"}) && Clock::now() - dropped < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(s.check({"lease/a"}));  // expired once no longer renewed
  EXPECT_FALSE(s.keep_alive(lease));
  EXPECT_THROW(s.put("lease/c", Bytes{3}, lease), InvalidArgumentError);
  s.revoke_lease(other);
  EXPECT_FALSE(s.check({"lease/b"}));
  s.revoke_lease(other);  // twice: no error
}

TEST_F(EtcdStoreTest, RegistryListsAnnouncedPeersAndDropsSilentOnes) {
  auto store = std::make_shared<EtcdStore>(cluster_->endpoints(), quick());
  swarm::EtcdRegistry registry(store, "reg-test");
  registry.set_lease(std::chrono::seconds(2));
  swarm::PeerRecord a{"a", 0, "127.0.0.1", 1000, 12.5, 1, 3, 0};
  swarm::PeerRecord b{"b", 1, "127.0.0.1", 1001, 7.0, 0, 2, 0};
  registry.announce(a);
  registry.announce(b);
  auto zero = registry.peers(0);
  ASSERT_EQ(zero.size(), 1u);
  EXPECT_EQ(zero[0].id, "a");
  EXPECT_EQ(zero[0].address(), "127.0.0.1:1000");
  EXPECT_DOUBLE_EQ(zero[0].throughput, 12.5);
  EXPECT_EQ(registry.peers().size(), 2u);
  // Another swarm on the same cluster sees none of them.
  swarm::EtcdRegistry stranger(store, "reg-other");
  EXPECT_TRUE(stranger.peers().empty());
  registry.withdraw("b");
  EXPECT_EQ(registry.peers().size(), 1u);
  // "a" stops announcing: etcd drops it after its lease, with nobody saying goodbye.
  auto t0 = Clock::now();
  while (!registry.peers().empty() && Clock::now() - t0 < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(registry.peers().empty());
  registry.announce(a);  // a fresh lease after the old one expired
  EXPECT_EQ(registry.peers().size(), 1u);
  EXPECT_EQ(registry.rendezvous()->add("counter", 2), 2);
  EXPECT_EQ(store->get_string("reg-test/counter"), "2");
}

// A cluster of its own: these kill members.
TEST(EtcdFailover, LeaderKilledDuringAddsLosesAndDoublesNothing) {
  EtcdCluster cluster(3);
  constexpr int kClients = 3;
  std::atomic<bool> stop{false};
  std::vector<std::vector<int64_t>> seen(kClients);
  std::vector<std::string> errors(kClients);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c)
    threads.emplace_back([&, c] {
      try {
        EtcdStore s(cluster.endpoints(), quick());
        while (!stop) {
          seen[c].push_back(s.add("failover/n", 1));
          s.set("failover/last/" + std::to_string(c), std::to_string(seen[c].back()));
        }
      } catch (const std::exception& e) {
        errors[c] = e.what();
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  int leader = cluster.leader();
  ASSERT_GE(leader, 0);
  cluster.kill_member(leader);
  std::this_thread::sleep_for(std::chrono::seconds(3));  // an election, then more adds
  stop = true;
  for (auto& t : threads) t.join();
  for (auto& e : errors) EXPECT_EQ(e, "");
  std::set<int64_t> all;
  size_t total = 0;
  for (auto& v : seen) {
    all.insert(v.begin(), v.end());
    total += v.size();
  }
  EXPECT_EQ(all.size(), total);  // no value handed out twice
  EtcdStore s(cluster.endpoints(), quick());
  EXPECT_EQ(s.add("failover/n", 0), static_cast<int64_t>(total));  // none lost, none doubled
  EXPECT_GT(cluster.leader(), -1);
}

TEST(EtcdFailover, MajorityLostFailsWithinTheFailoverTimeNotAHang) {
  EtcdCluster cluster(3);
  cluster.kill_member(0);
  cluster.kill_member(1);
  EtcdStore::Options o = quick();
  o.failover_timeout = std::chrono::seconds(3);
  o.request_timeout = std::chrono::milliseconds(500);
  EtcdStore s(cluster.endpoints(), o);
  auto t0 = Clock::now();
  try {
    s.set("lost", std::string("x"));
    FAIL() << "a write committed without a majority";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("majority"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(6));
}
