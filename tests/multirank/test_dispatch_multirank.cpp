// The dispatcher on a running communicator: a tuning file that picks non-ring algorithms at
// worlds 3, 4 and 8, all_reduce / all_gather / reduce_scatter checked against the reference;
// and proof that the pick reaches the wire (the frame signature).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "algorithms/registry.hpp"
#include "comm/comm_impl.hpp"
#include "support/ranks.hpp"
#include "support/values.hpp"
#include "tune/dispatcher.hpp"
#include "support/env.hpp"
#include "support/temp_file.hpp"

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
        os << (first ? "" : ",") << R"({"collective": ")" << p.collective << R"(", "world": )" << world
           << R"(, "ranks_per_host": )" << world << R"(, "transport": ")" << transport
           << R"(", "sizes": [1, )" << kSwitch << R"(, 1099511627776], "times_us": {"ring": [10, 10, 10], ")"
           << p.small << R"(": [1, 1, 1e12], ")" << p.large << R"(": [2, 2, 2]}})";
        first = false;
      }
  os << "]}";
  return os.str();
}

class DispatchedCollectives : public ::testing::TestWithParam<int> {};

TEST_P(DispatchedCollectives, TuningFilePicksRunAndMatchReference) {
  TempFile file(tuning_file_text());
  ScopedEnv tune_file("SHOAL_TUNE_FILE", file.path.c_str());
  ScopedEnv as_measured("SHOAL_TUNE_SMOOTHING", "0");  // the tables are steps, read between neighbours
  ScopedEnv no_flat("SHOAL_FLAT_MAX_BYTES", "0");  // small calls would skip the schedule
  ScopedEnv on("SHOAL_DISPATCH", "on");
  std::string err = run_ranks(GetParam(), [&](Communicator& c) {
    const int p = c.size(), r = c.rank();
    const tune::Dispatcher d = tune::Dispatcher::from_environment(c.impl().tune_context());
    // counts per rank: both sides of the switch for every collective
    for (uint64_t count : {uint64_t{1}, uint64_t{7}, uint64_t{1000}, uint64_t{20003}, uint64_t{70001}}) {
      for (DataType t : {DataType::float32, DataType::int32, DataType::bfloat16}) {
        const uint64_t es = size_of(t);
        // the dispatcher's picks for this call are the plan's, never ring
        const uint64_t ar_bytes = count * es, ag_bytes = count * es * p;
        const auto ar = d.choose(Collective::all_reduce, ar_bytes), ag = d.choose(Collective::all_gather, ag_bytes),
                   rs = d.choose(Collective::reduce_scatter, ag_bytes);
        EXPECT_EQ(ar.source, tune::Choice::Source::tuning_file);
        EXPECT_EQ(ar.algorithm->name, ar_bytes <= kSwitch ? kPlans[0].small : kPlans[0].large) << ar_bytes;
        EXPECT_EQ(ag.algorithm->name, ag_bytes <= kSwitch ? kPlans[1].small : kPlans[1].large) << ag_bytes;
        EXPECT_EQ(rs.algorithm->name, ag_bytes <= kSwitch ? kPlans[2].small : kPlans[2].large) << ag_bytes;
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::avg}) {
          auto in = bytes_for(count, t), out = bytes_for(count, t);
          for (uint64_t i = 0; i < count; ++i) store(in.data(), i, t, value(r, i, t, op));
          c.all_reduce(in.data(), out.data(), count, t, op);
          EXPECT_EQ(wrong(out.data(), 0, count, t, [&](uint64_t i) { return expected(p, i, t, op); }), 0u)
              << "all_reduce " << to_string(t) << " " << to_string(op) << " count=" << count << " rank=" << r;
          auto rs_in = bytes_for(count * p, t), rs_out = bytes_for(count, t);
          for (uint64_t i = 0; i < count * p; ++i) store(rs_in.data(), i, t, value(r, i, t, op));
          c.reduce_scatter(rs_in.data(), rs_out.data(), count, t, op);
          EXPECT_EQ(wrong(rs_out.data(), 0, count, t, [&](uint64_t j) { return expected(p, r * count + j, t, op); }), 0u)
              << "reduce_scatter " << to_string(t) << " " << to_string(op) << " count=" << count << " rank=" << r;
        }
        auto mine = bytes_for(count, t), gathered = bytes_for(count * p, t);
        for (uint64_t i = 0; i < count; ++i) store(mine.data(), i, t, value(r, i, t, ReduceOp::sum));
        c.all_gather(mine.data(), gathered.data(), count, t);
        EXPECT_EQ(wrong(gathered.data(), 0, count * p, t,
                        [&](uint64_t i) { return as_stored(value(static_cast<int>(i / count), i % count, t, ReduceOp::sum), t); }),
                  0u)
            << "all_gather " << to_string(t) << " count=" << count << " rank=" << r;
      }
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
  ScopedEnv as_measured("SHOAL_TUNE_SMOOTHING", "0");  // the tables are steps, read between neighbours
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
  ScopedEnv as_measured("SHOAL_TUNE_SMOOTHING", "0");  // the tables are steps, read between neighbours
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
      const auto& params = c.impl().calibrated_params;
      ASSERT_TRUE(params.has_value());
      double mine[3] = {params->alpha, params->beta, params->gamma};
      for (double x : mine) EXPECT_TRUE(std::isfinite(x) && x > 0) << x;
      std::vector<double> all(3 * static_cast<size_t>(world));
      c.all_gather(mine, all.data(), 3, DataType::float64);
      bool same = true;
      for (int r = 0; r < world; ++r) same &= std::memcmp(all.data() + 3 * r, mine, sizeof mine) == 0;
      // The dispatcher takes them (no SHOAL_TUNE_* set here).
      const tune::Dispatcher d = tune::Dispatcher::from_environment(c.impl().tune_context(), &*params);
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
    EXPECT_EQ(run_ranks(2, [&](Communicator& c) { none += !c.impl().calibrated_params.has_value(); }), "");
    EXPECT_EQ(none.load(), 2) << setting;
  }
  ScopedEnv bad("SHOAL_TUNE_CALIBRATE", "sometimes");
  std::atomic<int> called{0};
  const std::string err = run_ranks(2, [&](Communicator&) { ++called; });
  EXPECT_NE(err.find("SHOAL_TUNE_CALIBRATE='sometimes'"), std::string::npos) << err;
  EXPECT_EQ(called.load(), 0);
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

}  // namespace
}  // namespace shoal::testing
