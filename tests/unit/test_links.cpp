// Measured links (src/tune/links.hpp): regions, the ring order the link_ring rows follow against
// a brute force over every order, and a row's time on the links against sums worked by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "algorithms/registry.hpp"
#include "shoal/error.hpp"
#include "tune/links.hpp"

namespace shoal {
namespace {

using algorithms::Collective;
using tune::Links;

constexpr double kFast = 125e6, kSlow = 12.5e6;  // 1 Gbit/s, 100 Mbit/s

// Two regions, ranks alternating between them (the order a launcher that knows nothing of the
// regions gives): fast links inside a region, slow between.
Links alternating_regions(int p) {
  Links l{p, std::vector<double>(static_cast<size_t>(p * p), 0)};
  for (int i = 0; i < p; ++i)
    for (int j = 0; j < p; ++j)
      if (i != j) l.bandwidth[i * p + j] = i % 2 == j % 2 ? kFast : kSlow;
  return l;
}

Links random_links(int p, std::mt19937& rng) {
  std::uniform_int_distribution<int> rate(1, 8);  // few distinct rates: ties happen
  Links l{p, std::vector<double>(static_cast<size_t>(p * p), 0)};
  for (int i = 0; i < p; ++i)
    for (int j = 0; j < p; ++j)
      if (i != j) l.bandwidth[i * p + j] = rate(rng) * 1e6;
  return l;
}

double slowest_hop(const Links& l, const std::vector<int>& order) {
  double s = INFINITY;
  for (size_t k = 0; k < order.size(); ++k)
    s = std::min(s, l.at(order[k], order[(k + 1) % order.size()]));
  return s;
}
double summed(const Links& l, const std::vector<int>& order) {
  double s = 0;
  for (size_t k = 0; k < order.size(); ++k) s += 1 / l.at(order[k], order[(k + 1) % order.size()]);
  return s;
}
int crossings(const std::vector<int>& order) {
  int n = 0;
  for (size_t k = 0; k < order.size(); ++k) n += order[k] % 2 != order[(k + 1) % order.size()] % 2;
  return n;
}
bool is_permutation_from_0(const std::vector<int>& order, int p) {
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> ranks(static_cast<size_t>(p));
  std::iota(ranks.begin(), ranks.end(), 0);
  return sorted == ranks && order.front() == 0;
}

TEST(Links, RegionsAreTheRanksJoinedByFastLinks) {
  EXPECT_EQ(tune::regions_of(alternating_regions(6)), (std::vector<int>{0, 1, 0, 1, 0, 1}));
  Links uniform{3, {0, 5, 5, 5, 0, 5, 5, 5, 0}};
  EXPECT_EQ(tune::regions_of(uniform), (std::vector<int>{0, 0, 0}));
  // Fast in one direction only: two regions.
  Links one_way{2, {0, kFast, kSlow, 0}};
  EXPECT_EQ(tune::regions_of(one_way), (std::vector<int>{0, 1}));
}

TEST(Links, OrderHasTheBestBottleneckThenTheLeastSumOfEveryOrder) {
  std::mt19937 rng(7);
  int compared = 0;
  for (int p = 4; p <= 8; ++p)
    for (int trial = 0; trial < 12; ++trial) {
      const Links l = random_links(p, rng);
      // The reference: every order that starts at rank 0.
      std::vector<int> perm(static_cast<size_t>(p));
      std::iota(perm.begin(), perm.end(), 0);
      double best_floor = 0, best_sum = INFINITY;
      do {
        const double f = slowest_hop(l, perm), s = summed(l, perm);
        if (f > best_floor || (f == best_floor && s < best_sum)) {
          best_floor = f;
          best_sum = s;
        }
      } while (std::next_permutation(perm.begin() + 1, perm.end()));
      const std::vector<int> order = tune::ring_order(l);
      ASSERT_TRUE(is_permutation_from_0(order, p));
      std::vector<int> identity(static_cast<size_t>(p));
      std::iota(identity.begin(), identity.end(), 0);
      // Rank order stays where the optimal tour is no faster by the model's ring time.
      if (order == identity) continue;
      ++compared;
      EXPECT_EQ(slowest_hop(l, order), best_floor) << "p=" << p << " trial " << trial;
      EXPECT_NEAR(summed(l, order), best_sum, 1e-12 * best_sum) << "p=" << p << " trial " << trial;
    }
  EXPECT_GT(compared, 40) << "of 60 orders, the rest kept rank order";
}

TEST(Links, AlternatingRegionsAreCrossedTwice) {
  for (int p : {4, 6, 8, 12, 16, 24}) {  // exact up to 12 ranks, the heuristic beyond
    const Links l = alternating_regions(p);
    const std::vector<int> order = tune::ring_order(l);
    ASSERT_TRUE(is_permutation_from_0(order, p)) << p;
    EXPECT_EQ(crossings(order), 2) << "p=" << p;
    std::vector<int> identity(static_cast<size_t>(p));
    std::iota(identity.begin(), identity.end(), 0);
    // Rank order crosses at every hop: p/2 hops share each direction's pipe.
    EXPECT_DOUBLE_EQ(tune::ring_seconds_per_byte(l, identity), (p / 2) / kSlow);
    EXPECT_DOUBLE_EQ(tune::ring_seconds_per_byte(l, order), 1 / kSlow);
  }
}

TEST(Links, OneRegionKeepsRankOrder) {
  Links l{5, std::vector<double>(25, kFast)};
  for (int i = 0; i < 5; ++i) l.bandwidth[i * 5 + i] = 0;
  EXPECT_EQ(tune::ring_order(l), (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(Links, RowTimeCountsEveryPipe) {
  // Four ranks in two alternating regions; an all_reduce of n bytes around a ring sends
  // 2 (p-1)/p n = 1.5 n over every hop.
  const Links l = alternating_regions(4);
  const auto* ring = algorithms::find_algorithm(Collective::all_reduce, "ring");
  const auto* link_ring = algorithms::find_algorithm(Collective::all_reduce, "link_ring");
  ASSERT_TRUE(ring && link_ring);
  const std::vector<int> order = tune::ring_order(l);
  // Rank order: hops 0->1 and 2->3 both cross from region 0 to region 1: 3 n through the pipe.
  EXPECT_NEAR(tune::link_seconds_per_byte(*ring, l, order), 3 / kSlow, 1e-9 / kSlow);
  // The measured order crosses once each way: 1.5 n through each pipe.
  EXPECT_NEAR(tune::link_seconds_per_byte(*link_ring, l, order), 1.5 / kSlow, 1e-9 / kSlow);
  // all_gather of n bytes gathered: (p-1)/p n per hop.
  const auto* gather = algorithms::find_algorithm(Collective::all_gather, "link_ring");
  ASSERT_TRUE(gather);
  EXPECT_NEAR(tune::link_seconds_per_byte(*gather, l, order), 0.75 / kSlow, 1e-9 / kSlow);
}

// One rate, one latency L on every pair: the chain of dependent flights is what the rows' own
// descriptions say, a ring's 2(p-1) steps, halving and doubling's 2 log2 p, recursive doubling's
// log2 p.
TEST(Links, LatencyCountsEachDependentFlight) {
  constexpr double kL = 0.04;  // 80 ms round trips
  Links l{4, std::vector<double>(16, kFast), std::vector<double>(16, kL)};
  for (int i = 0; i < 4; ++i) l.bandwidth[i * 5] = l.latency[i * 5] = 0;
  const std::vector<int> order{0, 1, 2, 3};
  auto flights = [&](const char* name) {
    const auto* row = algorithms::find_algorithm(Collective::all_reduce, name);
    EXPECT_TRUE(row) << name;
    return row ? tune::link_latency_seconds(*row, l, order) / kL : -1;
  };
  EXPECT_NEAR(flights("ring"), 6, 1e-9);
  EXPECT_NEAR(flights("rabenseifner"), 4, 1e-9);
  EXPECT_NEAR(flights("recursive_doubling"), 2, 1e-9);
  // The bytes' bound does not move with the latencies, and without them no flight counts.
  const auto* ring = algorithms::find_algorithm(Collective::all_reduce, "ring");
  Links no_latency = l;
  no_latency.latency.clear();
  EXPECT_DOUBLE_EQ(tune::link_seconds_per_byte(*ring, l, order),
                   tune::link_seconds_per_byte(*ring, no_latency, order));
  EXPECT_EQ(tune::link_latency_seconds(*ring, no_latency, order), 0);
}

// Two regions, ranks alternating, 0.1 ms one way inside and 70 ms between: the ring in rank
// order crosses at every hop (6 x 70 ms on its chain); in the measured order it crosses every
// other hop, so any 6 consecutive hops cross 3 times.
TEST(Links, LatencyBetweenRegionsFollowsTheRingOrder) {
  Links l = alternating_regions(4);
  l.latency.assign(16, 0);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      if (i != j) l.latency[i * 4 + j] = i % 2 == j % 2 ? 1e-4 : 0.07;
  const auto* ring = algorithms::find_algorithm(Collective::all_reduce, "ring");
  const auto* link_ring = algorithms::find_algorithm(Collective::all_reduce, "link_ring");
  ASSERT_TRUE(ring && link_ring);
  const std::vector<int> order = tune::ring_order(l);
  EXPECT_NEAR(tune::link_latency_seconds(*ring, l, order), 6 * 0.07, 1e-9);
  EXPECT_NEAR(tune::link_latency_seconds(*link_ring, l, order), 3 * 0.07 + 3 * 1e-4, 1e-9);
}

TEST(Links, BadMatricesAreClearErrors) {
  EXPECT_THROW(tune::ring_order(Links{3, {0, 1, 1}}), InvalidArgumentError);
  Links zero = alternating_regions(4);
  zero.bandwidth[1] = 0;
  try {
    tune::ring_order(zero);
    FAIL() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("from rank 0 to rank 1"), std::string::npos) << e.what();
  }
  Links nan = alternating_regions(4);
  nan.bandwidth[6] = NAN;
  EXPECT_THROW(tune::check_links(nan), InvalidArgumentError);
  Links short_latencies = alternating_regions(4);
  short_latencies.latency.assign(15, 0);
  EXPECT_THROW(tune::check_links(short_latencies), InvalidArgumentError);
  Links negative = alternating_regions(4);
  negative.latency.assign(16, 0);
  negative.latency[6] = -1e-3;
  try {
    tune::check_links(negative);
    FAIL() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("from rank 1 to rank 2 has latency"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace shoal
