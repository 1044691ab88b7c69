// The WAN model behind shoal-wan (src/wan/model.hpp) in virtual time, against figures computed
// here from the settings: serialization at a stage's rate, tail drops past its queue, one-way
// delay, jitter's bounds and the reordering it causes, random loss at its rate, a region's way
// out shared by its hosts, and the spec's errors naming their line.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "wan/model.hpp"

using namespace shoal::wan;

namespace {

constexpr int64_t kMs = 1'000'000;

Spec parse(const std::string& text) {
  std::istringstream in(text);
  return parse_spec(in);
}

// Two hosts in one region: A sends at `up` bit/s, the path between them has the given delay,
// jitter and loss.
Spec two_hosts(double up_bps, int64_t delay_ns, int64_t jitter_ns = 0, double loss = 0) {
  Spec s = parse(
      "regions 1\n"
      "endpoint ns-a eth0 198.18.0.1 0 0 0\n"
      "endpoint ns-b eth0 198.18.0.2 0 0 0\n");
  s.endpoints[0].up_bps = up_bps;
  s.paths[0] = Path{0, delay_ns, jitter_ns, loss};
  return s;
}

std::vector<Event> run_to_end(Network& net) {
  std::vector<Event> out;
  while (net.in_flight() > 0) net.advance(net.next_due(), out);
  return out;
}

// Moves the network step by step up to `until`, recording each delivery's (time, id).
void deliver_until(Network& net, int64_t until, std::vector<std::pair<int64_t, uint64_t>>& got) {
  std::vector<Event> out;
  while (net.next_due() <= until) {
    const int64_t t = net.next_due();
    out.clear();
    net.advance(t, out);
    for (const Event& e : out)
      if (!e.dropped) got.emplace_back(t, e.id);
  }
}

}  // namespace

TEST(WanSpec, ParsesEveryStatement) {
  const Spec s = parse(
      "# two regions\n"
      "regions 2\n"
      "endpoint wan-h0 eth0 198.18.0.1 40000000 200000000 0\n"
      "endpoint - wan-root 198.18.0.254 0 0 1   # the root namespace\n"
      "path 0 1 100000000 40000000 5000000 0.001\n"
      "queue_ns 50000000\nseed 7\nmtu 9000\n");
  ASSERT_EQ(s.endpoints.size(), 2u);
  EXPECT_EQ(s.endpoints[0].netns, "wan-h0");
  EXPECT_EQ(s.endpoints[0].addr, (198u << 24) | (18u << 16) | 1u);
  EXPECT_EQ(s.endpoints[0].up_bps, 40e6);
  EXPECT_EQ(s.endpoints[0].down_bps, 200e6);
  EXPECT_EQ(s.endpoints[1].netns, "");
  EXPECT_EQ(s.endpoints[1].region, 1);
  EXPECT_EQ(s.path(0, 1).bps, 100e6);
  EXPECT_EQ(s.path(0, 1).delay_ns, 40 * kMs);
  EXPECT_EQ(s.path(0, 1).jitter_ns, 5 * kMs);
  EXPECT_DOUBLE_EQ(s.path(0, 1).loss, 0.001);
  EXPECT_EQ(s.path(1, 0).delay_ns, 0);
  EXPECT_EQ(s.queue_ns, 50 * kMs);
  EXPECT_EQ(s.seed, 7u);
  EXPECT_EQ(s.mtu, 9000);
}

TEST(WanSpec, ErrorsNameTheLine) {
  auto error_of = [](const std::string& text) {
    try {
      parse(text);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string head = "regions 2\nendpoint a eth0 198.18.0.1 0 0 0\n";
  EXPECT_NE(error_of(head + "endpoint b eth0 198.18.0.300 0 0 0\n").find("line 3"),
            std::string::npos);
  EXPECT_NE(error_of(head + "endpoint b eth0 198.18.0.1 0 0 0\n").find("already held"),
            std::string::npos);
  EXPECT_NE(error_of(head + "endpoint b eth0 198.18.0.2 0 0 2\n").find("no such region"),
            std::string::npos);
  EXPECT_NE(error_of(head + "path 0 1 0 1000 2000 0\n").find("jitter is at most the delay"),
            std::string::npos);
  EXPECT_NE(error_of(head + "path 0 1 0 1000 0 1.0\n").find("probability"), std::string::npos);
  EXPECT_NE(error_of(head + "path 0 2 0 1000 0 0\n").find("path FROM TO"), std::string::npos);
  EXPECT_NE(error_of(head + "bogus 1\n").find("unknown statement"), std::string::npos);
  EXPECT_NE(error_of(head + "seed 1 2\n").find("more words"), std::string::npos);
  EXPECT_NE(error_of("endpoint a eth0 198.18.0.1 0 0 0\n").find("line 1"), std::string::npos);
  EXPECT_NE(error_of("# nothing\n").find("empty"), std::string::npos);
  EXPECT_NE(error_of("regions 1\n").find("no endpoint"), std::string::npos);
}

TEST(WanModel, RoutesByAddress) {
  Network net(two_hosts(0, 0));
  EXPECT_EQ(net.route(parse_ipv4("198.18.0.1")), 0);
  EXPECT_EQ(net.route(parse_ipv4("198.18.0.2")), 1);
  EXPECT_EQ(net.route(parse_ipv4("198.18.0.3")), -1);
}

// Paced at the rate, every packet leaves one serialization time after the previous one and
// arrives a one-way delay later; nothing queues, nothing drops.
TEST(WanModel, SerializesAtTheRateAndDelays) {
  const double rate = 100e6;
  const int64_t delay = 40 * kMs;
  Network net(two_hosts(rate, delay));
  const int64_t per_packet = std::llround(1500 * 8e9 / rate);  // 120 us
  std::vector<std::pair<int64_t, uint64_t>> arrived;
  for (int k = 0; k < 100; ++k) {
    deliver_until(net, k * per_packet, arrived);
    net.inject(k, 0, 1, 1500, k * per_packet);
  }
  deliver_until(net, std::numeric_limits<int64_t>::max() - 1, arrived);
  ASSERT_EQ(arrived.size(), 100u);
  for (int k = 0; k < 100; ++k) {
    EXPECT_EQ(arrived[k].second, static_cast<uint64_t>(k));
    EXPECT_EQ(arrived[k].first, (k + 1) * per_packet + delay) << k;
  }
  EXPECT_EQ(net.stats().queue_drops, 0u);
  EXPECT_EQ(net.stats().delivered_bytes, 100u * 1500);
}

// A burst at one instant queues; past the queue's length in time at the rate, the tail drops:
// packet k starts after k serialization times, and is kept while that wait is within the queue.
TEST(WanModel, TailDropsPastTheQueue) {
  Spec s = two_hosts(100e6, 0);
  s.queue_ns = 25 * kMs;
  Network net(s);
  for (int k = 0; k < 1000; ++k) net.inject(k, 0, 1, 1500, 0);
  const std::vector<Event> out = run_to_end(net);
  const int64_t per_packet = 120'000;
  const uint64_t kept = s.queue_ns / per_packet + 1;  // waits 0, 120 us, ..., <= 25 ms
  EXPECT_EQ(net.stats().delivered, kept);
  EXPECT_EQ(net.stats().queue_drops, 1000 - kept);
  ASSERT_EQ(out.size(), 1000u);  // every packet is accounted for, dropped or delivered
}

// Jitter: every delay within [delay - jitter, delay + jitter], their mean near the delay, and
// packets sent in order arrive out of order.
TEST(WanModel, JitterBoundsAndReorders) {
  const int64_t delay = 10 * kMs, jitter = 5 * kMs, gap = 100'000;
  Network net(two_hosts(0, delay, jitter));
  std::vector<int64_t> sent(2000);
  std::vector<std::pair<int64_t, uint64_t>> arrivals;
  for (int k = 0; k < 2000; ++k) {
    sent[k] = k * gap;
    deliver_until(net, sent[k], arrivals);
    net.inject(k, 0, 1, 1000, sent[k]);
  }
  deliver_until(net, std::numeric_limits<int64_t>::max() - 1, arrivals);
  ASSERT_EQ(arrivals.size(), 2000u);
  double sum = 0;
  int reordered = 0;
  for (size_t i = 0; i < arrivals.size(); ++i) {
    const int64_t d = arrivals[i].first - sent[arrivals[i].second];
    EXPECT_GE(d, delay - jitter);
    EXPECT_LE(d, delay + jitter);
    sum += d;
    if (i > 0 && arrivals[i].second < arrivals[i - 1].second) ++reordered;
  }
  EXPECT_NEAR(sum / arrivals.size(), delay, 0.05 * delay);
  EXPECT_GT(reordered, 100);
}

// Random loss: the share lost within 4 standard deviations of the setting.
TEST(WanModel, LosesAtTheRate) {
  const double p = 0.01;
  const int n = 100'000;
  Network net(two_hosts(0, kMs, 0, p));
  std::vector<Event> out;
  for (int k = 0; k < n; ++k) net.inject(k, 0, 1, 100, k * 1000);
  out = run_to_end(net);
  const double sigma = std::sqrt(n * p * (1 - p));
  EXPECT_NEAR(static_cast<double>(net.stats().lost), n * p, 4 * sigma);
  EXPECT_EQ(net.stats().lost + net.stats().delivered, static_cast<uint64_t>(n));
  size_t dropped = 0;
  for (const Event& e : out) dropped += e.dropped;
  EXPECT_EQ(dropped, net.stats().lost);
}

// Two regions: two hosts of region 0 sending to region 1 share the line from 0 to 1 (their bytes
// leave at its rate, together), and pay its delay; a host of the same region is not held by it.
TEST(WanModel, RegionsShareTheirWayOut) {
  Spec s = parse(
      "regions 2\n"
      "endpoint a eth0 198.18.0.1 0 0 0\n"
      "endpoint b eth0 198.18.0.2 0 0 1\n"
      "endpoint c eth0 198.18.0.3 0 0 0\n"
      "endpoint d eth0 198.18.0.4 0 0 0\n"
      "path 0 1 10000000 70000000 0 0\n"
      "queue_ns 1000000000\n");
  Network net(s);
  for (int k = 0; k < 50; ++k) {
    net.inject(2 * k, 0, 1, 1250, 0);      // a -> b, across
    net.inject(2 * k + 1, 2, 1, 1250, 0);  // c -> b, across
  }
  net.inject(1000, 0, 3, 1250, 0);  // a -> d, inside region 0
  std::vector<Event> out;
  int64_t last_across = 0, inside = -1;
  while (net.in_flight() > 0) {
    const int64_t t = net.next_due();
    out.clear();
    net.advance(t, out);
    for (const Event& e : out) (e.id == 1000 ? inside : last_across) = t;
  }
  EXPECT_EQ(inside, 0);
  // 100 packets of 1,250 B at 10 Mbit/s: 1 ms each through the line, then 70 ms.
  EXPECT_EQ(last_across, 100 * kMs + 70 * kMs);
}
