// The dispatcher on a running communicator: a tuning file that picks non-ring algorithms at
// worlds 3, 4 and 8, all_reduce / all_gather / reduce_scatter checked against the reference,
// and what every call ran read back from the communicator's counters (CommImpl::runs_of),
// against the plan the file was written from; and proof that the pick reaches the wire (the
// frame signature).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "algorithms/registry.hpp"
#include "comm/comm_impl.hpp"
#include "support/env.hpp"
#include "support/hosts.hpp"
#include "support/ranks.hpp"
#include "support/temp_file.hpp"
#include "support/values.hpp"
#include "tune/calibration.hpp"
#include "tune/dispatcher.hpp"
#include "tune/learned_file.hpp"

namespace shoal::testing {
namespace {

using algorithms::Collective;

// Per collective, one algorithm below the switch size (64K, bytes as the cost models count them)
// and another above; never ring. Times in microseconds at sizes 1, 64K, 2^40 (the small one's
// last time is huge so that the log interpolation hands over right after 64K).
struct Plan {
  const char* collective;
  const char* small;
  const char* large;
};
constexpr Plan kPlans[] = {{"all_reduce", "recursive_doubling", "swing"},
                           {"all_gather", "bruck", "recursive_doubling"},
                           {"reduce_scatter", "swing", "recursive_halving"}};
constexpr uint64_t kSwitch = 64 << 10;

std::string tuning_file_text() {
  std::ostringstream os;
  os << R"({"format": "shoal-tune 1", "tables": [)";
  bool first = true;
  for (int world : {3, 4, 8})
    for (const char* transport : {"shm", "tcp"})
      for (const Plan& p : kPlans) {
        os << (first ? "" : ",") << R"({"collective": ")" << p.collective << R"(", "world": )"
           << world << R"(, "ranks_per_host": )" << world << R"(, "transport": ")" << transport
           << R"(", "sizes": [1, )" << kSwitch
           << R"(, 1099511627776], "times_us": {"ring": [10, 10, 10], ")" << p.small
           << R"(": [1, 1, 1e12], ")" << p.large << R"(": [2, 2, 2]}})";
        first = false;
      }
  os << "]}";
  return os.str();
}

class DispatchedCollectives : public ::testing::TestWithParam<int> {};

// Runs `call` and returns the one row it ran (by the communicator's counters), or a text
// saying what else happened: no row, or several.
std::string ran(Communicator& c, const std::function<void()>& call) {
  const auto& rows = algorithms::registry();
  std::vector<uint64_t> before;
  for (const auto& row : rows) before.push_back(shoal::detail::Internals::of(c).runs_of(row));
  call();
  std::string which;
  int n = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const uint64_t d = shoal::detail::Internals::of(c).runs_of(rows[i]) - before[i];
    if (d == 0) continue;
    n += static_cast<int>(d);
    which += (which.empty() ? "" : ",") + std::string(algorithms::to_string(rows[i].collective)) +
             ":" + std::string(rows[i].name);
  }
  return n == 1 ? which : std::to_string(n) + " rows ran: " + which;
}

TEST_P(DispatchedCollectives, TuningFilePicksRunAndMatchReference) {
  TempFile file(tuning_file_text());
  ScopedEnv tune_file("SHOAL_TUNE_FILE", file.path.c_str());
  ScopedEnv as_measured("SHOAL_TUNE_SMOOTHING",
                        "0");                      // the tables are steps, read between neighbours
  ScopedEnv no_flat("SHOAL_FLAT_MAX_BYTES", "0");  // small calls would skip the schedule
  ScopedEnv on("SHOAL_DISPATCH", "on");
  std::string err = run_ranks(GetParam(), [&](Communicator& c) {
    const int p = c.size(), r = c.rank();
    // counts per rank: both sides of the switch for every collective
    for (uint64_t count :
         {uint64_t{1}, uint64_t{7}, uint64_t{1000}, uint64_t{20003}, uint64_t{70001}}) {
      for (DataType t : {DataType::float32, DataType::int32, DataType::bfloat16}) {
        const uint64_t es = size_of(t);
        // what runs is the plan's pick on each side of the switch, never ring (bytes as the
        // cost models count them: the vector, the gathered output, the scattered input)
        const uint64_t ar_bytes = count * es, ag_bytes = count * es * p;
        auto plan = [](const Plan& pl, uint64_t bytes) {
          return std::string(pl.collective) + ":" + (bytes <= kSwitch ? pl.small : pl.large);
        };
        const std::string why = " count=" + std::to_string(count) + " " + std::string(to_string(t));
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::avg}) {
          auto in = bytes_for(count, t), out = bytes_for(count, t);
          for (uint64_t i = 0; i < count; ++i) store(in.data(), i, t, value(r, i, t, op));
          EXPECT_EQ(ran(c, [&] { c.all_reduce(in.data(), out.data(), count, t, op); }),
                    plan(kPlans[0], ar_bytes))
              << why;
          EXPECT_EQ(
              wrong(out.data(), 0, count, t, [&](uint64_t i) { return expected(p, i, t, op); }), 0u)
              << "all_reduce " << to_string(t) << " " << to_string(op) << " count=" << count
              << " rank=" << r;
          auto rs_in = bytes_for(count * p, t), rs_out = bytes_for(count, t);
          for (uint64_t i = 0; i < count * p; ++i) store(rs_in.data(), i, t, value(r, i, t, op));
          EXPECT_EQ(ran(c, [&] { c.reduce_scatter(rs_in.data(), rs_out.data(), count, t, op); }),
                    plan(kPlans[2], ag_bytes))
              << why;
          EXPECT_EQ(wrong(rs_out.data(), 0, count, t,
                          [&](uint64_t j) { return expected(p, r * count + j, t, op); }),
                    0u)
              << "reduce_scatter " << to_string(t) << " " << to_string(op) << " count=" << count
              << " rank=" << r;
        }
        auto mine = bytes_for(count, t), gathered = bytes_for(count * p, t);
        for (uint64_t i = 0; i < count; ++i)
          store(mine.data(), i, t, value(r, i, t, ReduceOp::sum));
        EXPECT_EQ(ran(c, [&] { c.all_gather(mine.data(), gathered.data(), count, t); }),
                  plan(kPlans[1], ag_bytes))
            << why;
        EXPECT_EQ(wrong(gathered.data(), 0, count * p, t,
                        [&](uint64_t i) {
                          return as_stored(
                              value(static_cast<int>(i / count), i % count, t, ReduceOp::sum), t);
                        }),
                  0u)
            << "all_gather " << to_string(t) << " count=" << count << " rank=" << r;
      }
    }
    // The collectives with one row each run it (the file names none of them), once per call.
    std::vector<float> a(64 * p, 1.0f), b(64 * p);
    EXPECT_EQ(ran(c, [&] { c.broadcast(a.data(), b.data(), 64, DataType::float32, 0); }),
              "broadcast:binomial");
    EXPECT_EQ(
        ran(c, [&] { c.reduce(a.data(), b.data(), 64, DataType::float32, ReduceOp::sum, 0); }),
        "reduce:binomial");
    EXPECT_EQ(ran(c, [&] { c.all_to_all(a.data(), b.data(), 64, DataType::float32); }),
              "all_to_all:pairwise");
    EXPECT_EQ(ran(c, [&] { c.gather(a.data(), b.data(), 64, DataType::float32, 0); }),
              "gather:linear");
    EXPECT_EQ(ran(c, [&] { c.scatter(a.data(), b.data(), 64, DataType::float32, 0); }),
              "scatter:linear");
    EXPECT_EQ(ran(c, [&] { c.barrier(); }), "barrier:dissemination");
    if (r < 2) {
      const int peer = 1 - r;
      EXPECT_EQ(ran(c,
                    [&] {
                      if (r == 0)
                        c.send(a.data(), 64, DataType::float32, peer);
                      else
                        c.recv(b.data(), 64, DataType::float32, peer);
                    }),
                r == 0 ? "send:direct" : "recv:direct");
    }
    c.barrier();
  });
  EXPECT_EQ(err, "");
}

INSTANTIATE_TEST_SUITE_P(Worlds, DispatchedCollectives, ::testing::Values(3, 4, 8),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// Rank 0 forces ring (a per-thread override), rank 1 follows the dispatcher, whose tuning file
// says swing above 64K: the signatures differ, so both fail with MismatchError. Forcing swing
// instead agrees with the dispatcher and succeeds: the pick is what runs.
TEST(DispatchedCollectives, ThePickReachesTheWire) {
  TempFile file(tuning_file_text());
  ScopedEnv tune_file("SHOAL_TUNE_FILE", file.path.c_str());
  ScopedEnv as_measured("SHOAL_TUNE_SMOOTHING",
                        "0");  // the tables are steps, read between neighbours
  ScopedEnv no_flat("SHOAL_FLAT_MAX_BYTES", "0");
  ScopedEnv on("SHOAL_DISPATCH", "on");
  for (const char* forced : {"all_reduce:swing", "all_reduce:ring"}) {
    std::atomic<int> mismatches{0}, ok{0};
    std::string err = run_ranks(2, [&](Communicator& c) {
      // world 2 reads the nearest table (world 3 or 4: the same plan)
      if (c.rank() == 0) algorithms::detail::set_thread_algorithm_override(forced);
      std::vector<float> v(1 << 15, 1.0f);  // 128K bytes: above the switch
      try {
        c.all_reduce(std::span<float>(v), ReduceOp::sum);
        ++ok;
      } catch (const MismatchError&) {
        ++mismatches;
      }
      algorithms::detail::set_thread_algorithm_override("");
    });
    if (std::string(forced) == "all_reduce:swing") {
      EXPECT_EQ(err, "");
      EXPECT_EQ(ok.load(), 2);
    } else {
      EXPECT_EQ(mismatches.load(), 2);
    }
  }
}

// SHOAL_DISPATCH=off: the first row (ring) on every rank, whatever the tuning file says; rank 0
// forcing ring agrees.
TEST(DispatchedCollectives, DispatchOffRunsTheFirstRow) {
  TempFile file(tuning_file_text());
  ScopedEnv tune_file("SHOAL_TUNE_FILE", file.path.c_str());
  ScopedEnv as_measured("SHOAL_TUNE_SMOOTHING",
                        "0");  // the tables are steps, read between neighbours
  ScopedEnv no_flat("SHOAL_FLAT_MAX_BYTES", "0");
  ScopedEnv off("SHOAL_DISPATCH", "off");
  std::atomic<int> ok{0};
  std::string err = run_ranks(2, [&](Communicator& c) {
    if (c.rank() == 0) algorithms::detail::set_thread_algorithm_override("all_reduce:ring");
    std::vector<float> v(1 << 15, 1.0f);
    c.all_reduce(std::span<float>(v), ReduceOp::sum);
    ok += v[0] == 2.0f;
    algorithms::detail::set_thread_algorithm_override("");
  });
  EXPECT_EQ(err, "");
  EXPECT_EQ(ok.load(), 2);
}

// Calibration at creation (SHOAL_TUNE_CALIBRATE): every rank of a new communicator holds the same
// measured constants, bit for bit (so every rank picks alike), finite and positive, and the
// dispatcher uses them; SHOAL_DISPATCH=off or SHOAL_TUNE_CALIBRATE=off measure nothing; a bad
// value fails creation on every rank with the setting's name instead of a hang.
TEST(CalibrationAtCreation, EveryRankHoldsTheSameMeasuredConstants) {
  ScopedEnv on("SHOAL_TUNE_CALIBRATE", "on"), dispatch("SHOAL_DISPATCH", "on");
  for (int world : {2, 3, 5}) {
    std::atomic<int> agreed{0};
    const std::string err = run_ranks(world, [&](Communicator& c) {
      const auto& params = shoal::detail::Internals::of(c).calibrated_params;
      ASSERT_TRUE(params.has_value());
      double mine[3] = {params->alpha, params->beta, params->gamma};
      for (double x : mine) EXPECT_TRUE(std::isfinite(x) && x > 0) << x;
      std::vector<double> all(3 * static_cast<size_t>(world));
      c.all_gather(mine, all.data(), 3, DataType::float64);
      bool same = true;
      for (int r = 0; r < world; ++r)
        same &= std::memcmp(all.data() + 3 * r, mine, sizeof mine) == 0;
      // The dispatcher takes them (no SHOAL_TUNE_* set here).
      const tune::Dispatcher d = tune::Dispatcher::from_environment(
          shoal::detail::Internals::of(c).tune_context(), &*params);
      same &= d.params().alpha == params->alpha && d.params().beta == params->beta;
      agreed += same;
    });
    EXPECT_EQ(err, "") << world;
    EXPECT_EQ(agreed.load(), world) << world;
  }
}

TEST(CalibrationAtCreation, OffSwitchesMeasureNothingAndBadValuesFailCreation) {
  for (const char* setting : {"SHOAL_TUNE_CALIBRATE", "SHOAL_DISPATCH"}) {
    ScopedEnv off(setting, "off");
    std::atomic<int> none{0};
    EXPECT_EQ(run_ranks(2,
                        [&](Communicator& c) {
                          none += !shoal::detail::Internals::of(c).calibrated_params.has_value();
                        }),
              "");
    EXPECT_EQ(none.load(), 2) << setting;
  }
  ScopedEnv bad("SHOAL_TUNE_CALIBRATE", "sometimes");
  std::atomic<int> called{0};
  const std::string err = run_ranks(2, [&](Communicator&) { ++called; });
  EXPECT_NE(err.find("SHOAL_TUNE_CALIBRATE='sometimes'"), std::string::npos) << err;
  EXPECT_EQ(called.load(), 0);
}

// Ranks as threads on hosts of their own (TCP over loopback), rank r created with options_of(r).
std::string run_on_own_hosts(int n, const std::function<Options(int)>& options_of,
                             const std::function<void(Communicator&)>& fn) {
  return run_ranks(n, fn, options_of, [](int r) {
    comm::set_thread_host_id_for_testing("emulated-host-" + std::to_string(r));
  });
}

// Options::calibrate=latency (over SHOAL_TUNE_CALIBRATE=on): no timed call at creation, and every
// rank holds the defaults with the job's longest handshake flight, the same bits everywhere, as
// tune::latency_cost_params gives them; `on` times ring calls. Ranks whose modes differ fail
// their first call with MismatchError naming the calibration, and a bad value fails creation.
TEST(CalibrationAtCreation, LatencyTakesTheAgreedRoundTripWithoutTimedCalls) {
  ScopedEnv on("SHOAL_TUNE_CALIBRATE", "on"), dispatch("SHOAL_DISPATCH", "on");
  const auto* ring_all_gather = algorithms::find_algorithm(Collective::all_gather, "ring");
  ASSERT_NE(ring_all_gather, nullptr);
  for (const char* mode : {"latency", "on"}) {
    const int world = 3;
    std::atomic<int> good{0};
    const std::string err = run_on_own_hosts(
        world,
        [&](int) {
          Options o;
          o.calibrate = mode;
          return o;
        },
        [&](Communicator& c) {
          auto& impl = shoal::detail::Internals::of(c);
          const bool timed = impl.runs_of(*ring_all_gather) > 0;
          const auto& params = impl.calibrated_params;
          ASSERT_TRUE(params.has_value());
          ASSERT_GT(impl.tcp_peers, 0);
          double mine[4] = {params->alpha, params->beta, params->flight, impl.longest_round_trip_s};
          std::vector<double> all(4 * world);
          c.all_gather(mine, all.data(), 4, DataType::float64);
          bool same = true;
          for (int r = 0; r < world; ++r)
            same &= std::memcmp(all.data() + 4 * r, mine, sizeof mine) == 0;
          bool expected = timed == (std::string(mode) == "on");
          if (std::string(mode) == "latency") {
            const algorithms::CostParams want = tune::latency_cost_params(
                impl.tune_context().transport, impl.longest_round_trip_s / 2);
            expected &= impl.longest_round_trip_s > 0 && params->alpha == want.alpha &&
                        params->beta == want.beta && params->gamma == want.gamma &&
                        params->flight == impl.longest_round_trip_s / 2;
          }
          good += same && expected;
        });
    EXPECT_EQ(err, "") << mode;
    EXPECT_EQ(good.load(), world) << mode;
  }

  std::atomic<int> mismatched{0};
  run_on_own_hosts(
      2,
      [](int r) {
        Options o;
        o.timeout = std::chrono::seconds(20);
        o.calibrate = r == 0 ? "on" : "latency";
        return o;
      },
      [&](Communicator& c) {
        int x = 1;
        try {
          c.all_reduce(&x, &x, 1, DataType::int32, ReduceOp::sum);
        } catch (const MismatchError& e) {
          mismatched += std::string(e.what()).find("calibration at creation") != std::string::npos;
        }
      });
  EXPECT_EQ(mismatched.load(), 2);

  const std::string err = run_on_own_hosts(
      2,
      [](int) {
        Options o;
        o.calibrate = "sometimes";
        return o;
      },
      [](Communicator&) {});
  EXPECT_NE(err.find("Options::calibrate 'sometimes'"), std::string::npos) << err;
}

// A malformed tuning file fails the first collective with InvalidArgumentError naming it.
TEST(DispatchedCollectives, MalformedFileFailsTheCall) {
  char name[] = "/tmp/shoal-dispatch-bad-XXXXXX";
  const int fd = mkstemp(name);
  close(fd);
  std::ofstream(name) << R"({"format": "shoal-tune 1", "tables": [{"collective": "all_reduce"}]})";
  ScopedEnv tune_file("SHOAL_TUNE_FILE", name);
  std::atomic<int> named{0};
  run_ranks(2, [&](Communicator& c) {
    std::vector<float> v(8, 1.0f);
    try {
      c.all_reduce(std::span<float>(v), ReduceOp::sum);
    } catch (const InvalidArgumentError& e) {
      named += std::string(e.what()).find(name) != std::string::npos &&
               std::string(e.what()).find("missing field 'world'") != std::string::npos;
    }
  });
  std::remove(name);
  EXPECT_EQ(named.load(), 2);
}

// Measured links (SHOAL_LINKS, Communicator::measure_links and use_links; tune/links.hpp).

// Two regions, ranks alternating between them: fast links inside, slow between.
std::vector<double> alternating_regions(int p) {
  std::vector<double> rates(static_cast<size_t>(p * p), 0);
  for (int i = 0; i < p; ++i)
    for (int j = 0; j < p; ++j)
      if (i != j) rates[i * p + j] = i % 2 == j % 2 ? 125e6 : 12.5e6;
  return rates;
}

TEST(MeasuredLinks, EveryRankHoldsTheSameRatesAndTheirOrder) {
  ScopedEnv measure("SHOAL_LINKS", "measure"), bytes("SHOAL_LINKS_BYTES", "64K");
  for (const char* transport : {"shm", "tcp"}) {
    ScopedEnv over("SHOAL_TRANSPORT", transport);
    std::atomic<int> agreed{0};
    const std::string err = run_ranks(4, [&](Communicator& c) {
      const auto& impl = shoal::detail::Internals::of(c);
      ASSERT_TRUE(impl.links && impl.ring_order);
      const std::vector<double>& mine = impl.links->bandwidth;
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
          EXPECT_TRUE(i == j ? mine[i * 4 + j] == 0
                             : std::isfinite(mine[i * 4 + j]) && mine[i * 4 + j] > 0)
              << i << "->" << j << ": " << mine[i * 4 + j];
      // One-way latencies beside the rates: half a measured round trip, under a second here.
      const std::vector<double>& flights = impl.links->latency;
      ASSERT_EQ(flights.size(), 16u);
      for (int i = 0; i < 16; ++i)
        EXPECT_TRUE(flights[i] >= 0 && flights[i] < 1 && (i % 5 != 0 || flights[i] == 0))
            << i / 4 << "->" << i % 4 << ": " << flights[i] << " s";
      std::vector<double> both(mine);
      both.insert(both.end(), flights.begin(), flights.end());
      std::vector<double> all(32 * 4);
      c.all_gather(both.data(), all.data(), 32, DataType::float64);
      bool same = true;
      for (int r = 0; r < 4; ++r) same &= std::memcmp(all.data() + 32 * r, both.data(), 256) == 0;
      std::vector<int> order = c.ring_order();
      std::sort(order.begin(), order.end());
      agreed += same && order == std::vector<int>{0, 1, 2, 3};
      // On demand, again: new rates, the same on every rank.
      const std::vector<double> again = c.measure_links();
      EXPECT_EQ(again, shoal::detail::Internals::of(c).links->bandwidth);
    });
    EXPECT_EQ(err, "") << transport;
    EXPECT_EQ(agreed.load(), 4) << transport;
  }
}

// Links where regions alternate: the planner prices the rows on them and takes link_ring for
// large all_reduce and reduce_scatter calls, which goes around the measured order (each region's
// ranks in a row) and gives the reference result.
TEST(MeasuredLinks, TheRingFollowsThemAndMatchesReference) {
  ScopedEnv no_flat("SHOAL_FLAT_MAX_BYTES", "0"), no_direct("SHOAL_FLAT_DIRECT_BYTES", "0");
  ScopedEnv on("SHOAL_DISPATCH", "on"), no_hierarchy("SHOAL_HIERARCHICAL", "off");
  // Six ranks: on four, halving and doubling send less through the slow pipes than any ring
  // (tests/unit/test_links.cpp).
  const int p = 6;
  const std::string err = run_ranks(p, [&](Communicator& c) {
    const int r = c.rank();
    const uint64_t count = 300001;  // MBs: bandwidth decides
    auto run_all = [&](const std::string& want) {
      const DataType t = DataType::float32;
      const ReduceOp op = ReduceOp::sum;
      auto in = bytes_for(count, t), out = bytes_for(count, t);
      for (uint64_t i = 0; i < count; ++i) store(in.data(), i, t, value(r, i, t, op));
      EXPECT_EQ(ran(c, [&] { c.all_reduce(in.data(), out.data(), count, t, op); }),
                "all_reduce:" + want);
      EXPECT_EQ(wrong(out.data(), 0, count, t, [&](uint64_t i) { return expected(p, i, t, op); }),
                0u);
      const uint64_t block = count / p;
      auto rs_out = bytes_for(block, t);
      EXPECT_EQ(ran(c, [&] { c.reduce_scatter(in.data(), rs_out.data(), block, t, op); }),
                "reduce_scatter:" + want);
      EXPECT_EQ(wrong(rs_out.data(), 0, block, t,
                      [&](uint64_t j) { return expected(p, r * block + j, t, op); }),
                0u);
      // all_gather: Bruck sends less through the slow pipes than any ring: the ring is forced.
      auto gathered = bytes_for(block * p, t);
      EXPECT_EQ(ran(c,
                    [&] {
                      c.all_gather(in.data(), gathered.data(), block, t,
                                   CallOptions{.algorithm = want});
                    }),
                "all_gather:" + want);
      EXPECT_EQ(wrong(gathered.data(), 0, block * p, t,
                      [&](uint64_t i) {
                        return as_stored(value(static_cast<int>(i / block), i % block, t, op), t);
                      }),
                0u);
    };
    // Equal links: the plain ring, in rank order.
    std::vector<double> equal(p * p, 125e6);
    for (int i = 0; i < p; ++i) equal[i * p + i] = 0;
    c.use_links(equal);
    EXPECT_EQ(c.ring_order(), (std::vector<int>{0, 1, 2, 3, 4, 5}));
    run_all("ring");
    c.use_links(alternating_regions(p));
    const std::vector<int> order = c.ring_order();
    int crossings = 0;
    for (int k = 0; k < p; ++k) crossings += order[k] % 2 != order[(k + 1) % p] % 2;
    EXPECT_EQ(crossings, 2);
    run_all("link_ring");
    // Bad rates: a clear error, and the links in use stay.
    std::vector<double> bad = alternating_regions(p);
    bad[1] = -1;
    EXPECT_THROW(c.use_links(bad), InvalidArgumentError);
    EXPECT_THROW(c.use_links(std::vector<double>(3, 1.0)), InvalidArgumentError);
    EXPECT_EQ(c.ring_order(), order);
  });
  EXPECT_EQ(err, "");
}

// Ranks that hold different rates order their rings differently: the first link_ring call fails
// with MismatchError on every rank instead of exchanging the wrong blocks or hanging.
TEST(MeasuredLinks, DifferentRatesOnOneRankAreAMismatch) {
  ScopedEnv no_flat("SHOAL_FLAT_MAX_BYTES", "0"), no_direct("SHOAL_FLAT_DIRECT_BYTES", "0");
  ScopedEnv timeout("SHOAL_TIMEOUT", "20");
  std::atomic<int> mismatches{0}, failed{0};
  run_ranks(4, [&](Communicator& c) {
    std::vector<double> rates = alternating_regions(4);
    if (c.rank() == 0)  // regions {0, 1} and {2, 3} instead
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
          if (i != j) rates[i * 4 + j] = i / 2 == j / 2 ? 125e6 : 12.5e6;
    c.use_links(rates);
    std::vector<float> v(1 << 16, 1.0f);
    try {
      c.all_reduce(v.data(), v.data(), v.size(), DataType::float32, ReduceOp::sum,
                   CallOptions{.algorithm = "link_ring"});
    } catch (const MismatchError&) {
      ++mismatches;
      ++failed;
    } catch (const Error&) {  // a rank whose peer found the mismatch first: aborted by it
      ++failed;
    }
  });
  EXPECT_EQ(failed.load(), 4);
  EXPECT_GE(mismatches.load(), 1);
}

// ---- learning on the job (tune/learner.hpp) ----

// One call of `collective` on `count` elements per rank (float32, sum), its result checked
// against the reference; returns what ran (ran()).
std::string checked_call(Communicator& c, Collective collective, uint64_t count) {
  const int p = c.size(), r = c.rank();
  const DataType t = DataType::float32;
  const ReduceOp op = ReduceOp::sum;
  const uint64_t in_count = collective == Collective::reduce_scatter ? count * p : count;
  const uint64_t out_count = collective == Collective::all_gather ? count * p : count;
  auto in = bytes_for(in_count, t), out = bytes_for(out_count, t);
  for (uint64_t i = 0; i < in_count; ++i) store(in.data(), i, t, value(r, i, t, op));
  const std::string what = ran(c, [&] {
    if (collective == Collective::all_reduce)
      c.all_reduce(in.data(), out.data(), count, t, op);
    else if (collective == Collective::reduce_scatter)
      c.reduce_scatter(in.data(), out.data(), count, t, op);
    else
      c.all_gather(in.data(), out.data(), count, t);
  });
  const uint64_t bad =
      collective == Collective::all_reduce
          ? wrong(out.data(), 0, count, t, [&](uint64_t i) { return expected(p, i, t, op); })
      : collective == Collective::reduce_scatter
          ? wrong(out.data(), 0, count, t,
                  [&](uint64_t j) { return expected(p, r * count + j, t, op); })
          : wrong(out.data(), 0, count * p, t,
                  [&](uint64_t i) { return value(static_cast<int>(i / count), i % count, t, op); });
  EXPECT_EQ(bad, 0u) << algorithms::to_string(collective) << " count=" << count << " rank=" << r
                     << " ran " << what;
  return what;
}

// The rows the first calls of a bucket run, in turn: the pick, `ring`, and the runner-up the
// dispatcher names (where it names one), twice each.
std::vector<std::string> explored_rows(Communicator& c, Collective collective, uint64_t bytes,
                                       const algorithms::AlgorithmInfo* pick, const char* ring) {
  const tune::Dispatcher& d = shoal::detail::Internals::of(c).planner->dispatcher();
  const auto* ring_row = algorithms::find_algorithm(collective, ring);
  const auto* runner_up = d.runner_up(collective, bytes, pick, ring_row);
  std::vector<std::string> names = {std::string(pick->name), ring};
  if (runner_up) names.push_back(std::string(runner_up->name));
  const std::string prefix = std::string(algorithms::to_string(collective)) + ":";
  std::vector<std::string> rows;
  for (int i = 0; i < tune::Learner::kSamples * static_cast<int>(names.size()); ++i)
    rows.push_back(prefix + names[static_cast<size_t>(i) % names.size()]);
  return rows;
}

// The bucket's winner, checked to be one of the explored rows and the same on every rank.
std::string agreed_winner(Communicator& c, Collective collective, uint64_t bytes,
                          const std::vector<std::string>& explored) {
  std::string winner;
  for (const auto& l : shoal::detail::Internals::of(c).planner->learner().learned())
    if (l.key == tune::Learner::key_of(collective, bytes) && l.winner) winner = l.winner->name;
  const std::string ran = std::string(algorithms::to_string(collective)) + ":" + winner;
  const auto at = std::find(explored.begin(), explored.end(), ran);
  EXPECT_NE(at, explored.end()) << winner;
  const int32_t mine = static_cast<int32_t>(at - explored.begin());
  std::vector<int32_t> all(static_cast<size_t>(c.size()));
  c.all_gather(&mine, all.data(), 1, DataType::int32);
  EXPECT_EQ(std::count(all.begin(), all.end(), mine), c.size()) << winner;
  return winner;
}

// Four ranks on four emulated hosts (TCP), a model that picks the rows of fewest steps
// (SHOAL_TUNE_ALPHA 1 ms): the first calls of a size bucket run the pick, the ring and the
// runner-up the model prices close to its pick (where there is one) in turn, twice each, the
// next settles it (with an all_reduce of the times, which runs on the ring too), and from then
// on every call runs the one row every rank settled on.
TEST(Learning, ExploresInTurnThenEveryRankKeepsOneRow) {
  ScopedEnv on("SHOAL_DISPATCH", "on"), learn("SHOAL_TUNE_LEARN", "on"),
      alpha("SHOAL_TUNE_ALPHA", "1e-3"), min("SHOAL_TUNE_LEARN_MIN_BYTES", "64K"),
      flat_hierarchy("SHOAL_HIERARCHICAL", "off");
  const std::string err = run_on_hosts({0, 1, 2, 3}, [&](Communicator& c) {
    auto& impl = shoal::detail::Internals::of(c);
    for (Collective collective :
         {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter}) {
      const uint64_t count = 40000;  // 160 KB a rank
      const uint64_t bytes = collective == Collective::all_reduce ? count * 4 : count * 4 * 4;
      const auto* pick = impl.planner->dispatcher().choose(collective, bytes).algorithm;
      const std::string name = std::string(algorithms::to_string(collective)) + ":";
      ASSERT_NE(std::string(pick->name), "ring") << name;
      const auto explored = explored_rows(c, collective, bytes, pick, "ring");
      for (const auto& row : explored) EXPECT_EQ(checked_call(c, collective, count), row);
      // The settling call: the agreement's ring all_reduce beside the winner.
      const std::string settled = checked_call(c, collective, count);
      EXPECT_NE(settled.find("2 rows ran"), std::string::npos) << settled;
      const std::string winner = agreed_winner(c, collective, bytes, explored);
      for (int i = 0; i < 5; ++i) EXPECT_EQ(checked_call(c, collective, count), name + winner);
    }
  });
  EXPECT_EQ(err, "");
}

// On measured links the pick is priced on them, and it overruns queues the same way: learning
// explores it against the ring in the links' order (link_ring), settles at the 5th call, and
// every rank then runs the one row; every result right.
TEST(Learning, OnMeasuredLinksThePickMeetsTheRingInTheirOrder) {
  ScopedEnv on("SHOAL_DISPATCH", "on"), learn("SHOAL_TUNE_LEARN", "on"),
      alpha("SHOAL_TUNE_ALPHA", "1e-3"), min("SHOAL_TUNE_LEARN_MIN_BYTES", "64K"),
      flat_hierarchy("SHOAL_HIERARCHICAL", "off");
  const std::string err = run_on_hosts({0, 1, 2, 3}, [&](Communicator& c) {
    c.use_links(std::vector<double>(16, 12.5e6));  // uniform 100 Mbit/s
    auto& impl = shoal::detail::Internals::of(c);
    for (Collective collective :
         {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter}) {
      const uint64_t count = 40000;
      const uint64_t bytes = collective == Collective::all_reduce ? count * 4 : count * 4 * 4;
      const tune::Choice choice = impl.planner->dispatcher().choose(collective, bytes);
      const std::string name = std::string(algorithms::to_string(collective)) + ":";
      ASSERT_EQ(choice.source, tune::Choice::Source::links) << name;
      ASSERT_NE(std::string(choice.algorithm->name), "link_ring") << name;
      const auto explored = explored_rows(c, collective, bytes, choice.algorithm, "link_ring");
      for (const auto& row : explored) EXPECT_EQ(checked_call(c, collective, count), row);
      checked_call(c, collective, count);  // settles
      const std::string winner = agreed_winner(c, collective, bytes, explored);
      for (int i = 0; i < 3; ++i) EXPECT_EQ(checked_call(c, collective, count), name + winner);
    }
  });
  EXPECT_EQ(err, "");
}

// A thousand calls of the three collectives at sizes drawn across five buckets (the same draw
// on every rank): every result right, and every rank ends with the same learned table.
TEST(Learning, AThousandCallsAgreeAndMatchReference) {
  ScopedEnv on("SHOAL_DISPATCH", "on"), learn("SHOAL_TUNE_LEARN", "on"),
      alpha("SHOAL_TUNE_ALPHA", "1e-3"), min("SHOAL_TUNE_LEARN_MIN_BYTES", "16K"),
      flat_hierarchy("SHOAL_HIERARCHICAL", "off");
  const std::string err = run_on_hosts({0, 1, 2, 3}, [&](Communicator& c) {
    std::mt19937 draw(53);
    constexpr Collective kCollectives[] = {Collective::all_reduce, Collective::all_gather,
                                           Collective::reduce_scatter};
    for (int call = 0; call < 1000; ++call) {
      const Collective collective = kCollectives[draw() % 3];
      const uint64_t count = (uint64_t{1024} << (draw() % 5)) + draw() % 1000;
      checked_call(c, collective, count);
    }
    // Every rank's table, folded into one number per bucket, the same everywhere.
    const auto learned = shoal::detail::Internals::of(c).planner->learner().learned();
    EXPECT_GE(learned.size(), 10u);
    int64_t fold = 0;  // wraps alike on every rank
    for (const auto& l : learned) {
      EXPECT_TRUE(l.winner) << "a bucket of many calls never settled";
      const int64_t winner = l.winner ? l.winner - algorithms::registry().data() : -1;
      fold = static_cast<int64_t>(
          static_cast<uint64_t>(fold) * 1000003u +
          static_cast<uint64_t>(static_cast<int>(l.key.first) * 4096 + l.key.second * 64 + winner));
    }
    int64_t lowest = fold, highest = fold;
    c.all_reduce(&fold, &lowest, 1, DataType::int64, ReduceOp::min);
    c.all_reduce(&fold, &highest, 1, DataType::int64, ReduceOp::max);
    EXPECT_EQ(lowest, highest);
  });
  EXPECT_EQ(err, "");
}

// SHOAL_TUNE_SAVE: a job learns a bucket and rank 0 writes it when the communicator goes; the
// next job, every rank reading the same file, runs the winner from its first call (after one
// agreement); a file only some ranks read settles nothing, and that job explores again.
TEST(Learning, WhatAJobLearnedIsSavedAndTheNextStartsFromIt) {
  char dir[] = "/tmp/shoal-save-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/learned.json";
  ScopedEnv on("SHOAL_DISPATCH", "on"), learn("SHOAL_TUNE_LEARN", "on"),
      alpha("SHOAL_TUNE_ALPHA", "1e-3"), min("SHOAL_TUNE_LEARN_MIN_BYTES", "64K"),
      flat_hierarchy("SHOAL_HIERARCHICAL", "off"), save("SHOAL_TUNE_SAVE", path);
  const uint64_t count = 40000;
  std::string winner;
  std::string err = run_on_hosts({0, 1, 2, 3}, [&](Communicator& c) {
    // Explored (2 or 3 candidates, twice each), settled, run.
    for (int i = 0; i < tune::Learner::kMaxExplored + 2; ++i)
      checked_call(c, Collective::all_reduce, count);
    for (const auto& l : shoal::detail::Internals::of(c).planner->learner().learned())
      if (l.winner && c.rank() == 0) winner = l.winner->name;
  });
  ASSERT_EQ(err, "");
  ASSERT_FALSE(winner.empty());
  const auto saved = tune::read_learned_file(path);
  ASSERT_EQ(saved.size(), 1u);
  EXPECT_EQ(saved[0].collective, Collective::all_reduce);
  EXPECT_EQ(saved[0].world, 4);
  EXPECT_EQ(saved[0].transport, tune::Transport::tcp);
  EXPECT_EQ(saved[0].log2_bytes, tune::Learner::key_of(Collective::all_reduce, count * 4).second);
  EXPECT_EQ(std::string(saved[0].winner->name), winner);
  EXPECT_GT(saved[0].pick_s, 0);
  EXPECT_GT(saved[0].alternative_s, 0);
  if (saved[0].runner_up) {
    EXPECT_GT(saved[0].runner_up_s, 0);
  }

  // The next job: the first call runs the winner (beside the agreement's ring all_reduce).
  err = run_on_hosts({0, 1, 2, 3}, [&](Communicator& c) {
    const std::string first = checked_call(c, Collective::all_reduce, count);
    EXPECT_NE(first.find("all_reduce:" + winner), std::string::npos) << first;
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(checked_call(c, Collective::all_reduce, count), "all_reduce:" + winner);
    const auto learned = shoal::detail::Internals::of(c).planner->learner().learned();
    ASSERT_EQ(learned.size(), 1u);
    EXPECT_TRUE(learned[0].from_file);
  });
  EXPECT_EQ(err, "");

  // A file whose entry another model pick made (the links or the calibration changed since)
  // settles nothing: the job explores again.
  auto stale = saved;
  stale[0].pick = algorithms::find_algorithm(
      Collective::all_reduce,
      saved[0].pick->name == "recursive_doubling" ? "rabenseifner" : "recursive_doubling");
  stale[0].winner = stale[0].pick;
  std::ofstream(path) << tune::learned_to_json(stale);
  err = run_on_hosts({0, 1, 2, 3}, [&](Communicator& c) {
    const auto* pick = shoal::detail::Internals::of(c)
                           .planner->dispatcher()
                           .choose(Collective::all_reduce, count * 4)
                           .algorithm;
    ASSERT_NE(pick, stale[0].pick);
    EXPECT_NE(checked_call(c, Collective::all_reduce, count)
                  .find("all_reduce:" + std::string(pick->name)),
              std::string::npos);
    EXPECT_EQ(checked_call(c, Collective::all_reduce, count), "all_reduce:ring");
  });
  EXPECT_EQ(err, "");
  std::remove(path.c_str());
  std::remove((path + ".lock").c_str());
  rmdir(dir);
}

// Off: the model's pick on every call; a bad value is refused by name.
TEST(Learning, OffRunsThePickAndBadValuesAreRefused) {
  ScopedEnv on("SHOAL_DISPATCH", "on"), learn("SHOAL_TUNE_LEARN", "off"),
      alpha("SHOAL_TUNE_ALPHA", "1e-3"), flat_hierarchy("SHOAL_HIERARCHICAL", "off");
  std::string err = run_on_hosts({0, 1}, [&](Communicator& c) {
    const uint64_t count = 1 << 18;  // 1 MiB
    const auto* pick = shoal::detail::Internals::of(c)
                           .planner->dispatcher()
                           .choose(Collective::all_reduce, count * 4)
                           .algorithm;
    for (int i = 0; i < 6; ++i)
      EXPECT_EQ(checked_call(c, Collective::all_reduce, count),
                "all_reduce:" + std::string(pick->name));
  });
  EXPECT_EQ(err, "");
  ScopedEnv bad("SHOAL_TUNE_LEARN", "sometimes");
  err = run_on_hosts({0, 1}, [&](Communicator& c) {
    std::vector<float> v(1 << 18, 1.0f);
    c.all_reduce(v.data(), v.data(), v.size(), DataType::float32, ReduceOp::sum);
  });
  EXPECT_NE(err.find("SHOAL_TUNE_LEARN='sometimes'"), std::string::npos) << err;
}

}  // namespace
}  // namespace shoal::testing
