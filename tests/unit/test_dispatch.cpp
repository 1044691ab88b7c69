// The dispatcher (src/tune): the cost model's picks, SHOAL_ALGO's priority, SHOAL_DISPATCH=off,
// tuning files (picks, interpolation, nearest world, fallbacks) and malformed files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "algorithms/registry.hpp"
#include "shoal/error.hpp"
#include "support/env.hpp"
#include "support/temp_file.hpp"
#include "tune/calibration.hpp"
#include "tune/dispatcher.hpp"
#include "tune/learned_file.hpp"
#include "tune/learner.hpp"

namespace shoal {
namespace {

using shoal::testing::ScopedEnv;
using shoal::testing::TempFile;

using algorithms::Collective;
using tune::Choice;
using tune::Context;
using tune::Dispatcher;
using tune::Transport;

std::string pick(const Dispatcher& d, Collective c, uint64_t bytes) {
  return std::string(d.choose(c, bytes).algorithm->name);
}

// The reading that goes through the two measured neighbours: the tests of exact times at and
// between measured sizes use it (the default smooths them: TuningFile.Smoothed*).
const tune::Reading kLogLinear{tune::Interpolation::log_linear, 0};

Dispatcher model_only(int world, Transport t) {
  return Dispatcher(Context{world, world, t}, tune::default_cost_params(t), nullptr);
}

// ---- the cost model ----

TEST(CostModel, SmallMessagesAtSixteenRanksAndMoreTakeLogLatencyAlgorithms) {
  for (Transport t : {Transport::shm, Transport::tcp})
    for (int p : {16, 24, 32, 64, 1024})
      for (uint64_t bytes : {uint64_t{8}, uint64_t{256}, uint64_t{4096}}) {
        const Dispatcher d = model_only(p, t);
        const std::string why = "p=" + std::to_string(p) + " bytes=" + std::to_string(bytes);
        // all_gather and reduce_scatter need at least a byte per rank
        const uint64_t per_rank_bytes = bytes * static_cast<uint64_t>(p);
        EXPECT_NE(pick(d, Collective::all_reduce, bytes), "ring") << why;
        EXPECT_NE(pick(d, Collective::all_gather, per_rank_bytes), "ring") << why;
        EXPECT_NE(pick(d, Collective::reduce_scatter, per_rank_bytes), "ring") << why;
        EXPECT_EQ(d.choose(Collective::all_reduce, bytes).source, Choice::Source::cost_model);
      }
  // the latency-optimal one for the smallest vectors
  EXPECT_EQ(pick(model_only(16, Transport::tcp), Collective::all_reduce, 8), "recursive_doubling");
  EXPECT_EQ(pick(model_only(24, Transport::tcp), Collective::all_gather, 24 * 8), "bruck");
}

TEST(CostModel, LargeMessagesTakeBandwidthOptimalAlgorithms) {
  const std::set<std::string> bandwidth_optimal = {"ring", "rabenseifner", "swing"};
  for (Transport t : {Transport::shm, Transport::tcp})
    for (int p : {2, 3, 4, 8, 16, 24, 64})
      for (uint64_t bytes : {uint64_t{64} << 20, uint64_t{1} << 30}) {
        const Dispatcher d = model_only(p, t);
        EXPECT_TRUE(bandwidth_optimal.count(pick(d, Collective::all_reduce, bytes)))
            << "p=" << p << ": " << pick(d, Collective::all_reduce, bytes);
      }
  // Without a power of two the butterflies pay the fold (the whole vector twice more): ring.
  for (int p : {3, 24, 100}) {
    EXPECT_EQ(pick(model_only(p, Transport::tcp), Collective::all_reduce, uint64_t{1} << 30),
              "ring")
        << p;
    EXPECT_EQ(pick(model_only(p, Transport::tcp), Collective::reduce_scatter, uint64_t{1} << 30),
              "ring")
        << p;
  }
}

TEST(CostModel, SingleRowCollectivesAndOneRankGiveTheirRow) {
  const Dispatcher d = model_only(16, Transport::tcp);
  EXPECT_EQ(pick(d, Collective::broadcast, 1 << 20), "binomial");
  EXPECT_EQ(pick(d, Collective::barrier, 0), "dissemination");
  EXPECT_EQ(pick(d, Collective::send, 8), "direct");
  EXPECT_NO_THROW(model_only(1, Transport::shm).choose(Collective::all_reduce, 0));
}

TEST(CostModel, SettingsOverrideTheConstants) {
  {
    ScopedEnv a("SHOAL_TUNE_ALPHA", "1e-3"), b("SHOAL_TUNE_BETA", std::nullopt),
        g("SHOAL_TUNE_GAMMA", "0"), bg("SHOAL_TUNE_BUSY_GAMMA", "3e-9");
    const auto c = tune::cost_params(Transport::shm);
    EXPECT_EQ(c.alpha, 1e-3);
    EXPECT_EQ(c.beta, tune::default_cost_params(Transport::shm).beta);
    EXPECT_EQ(c.gamma, 0.0);
    EXPECT_EQ(c.busy_gamma, 3e-9);
  }
  ScopedEnv a("SHOAL_TUNE_ALPHA", "fast");
  try {
    tune::cost_params(Transport::tcp);
    FAIL() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("SHOAL_TUNE_ALPHA"), std::string::npos) << e.what();
  }
}

// Calibration at creation: times that the ring's own model produces from known constants give
// those constants back, at every world (the fit inverts the model, it does not assume one).
// Across a WAN each timed call is round trips of tens of milliseconds: fewer repetitions, the
// same calls otherwise.
TEST(Calibration, LongRoundTripsTimeEachCallFewerTimes) {
  for (Transport t : {Transport::shm, Transport::tcp}) {
    const tune::CalibrationPlan lan = tune::calibration_plan(8, t, 0.0002);
    const tune::CalibrationPlan wan = tune::calibration_plan(8, t, 0.08);
    EXPECT_EQ(lan.small_calls, tune::calibration_plan(8, t).small_calls);
    EXPECT_GE(lan.small_calls, 3);
    EXPECT_EQ(wan.small_calls, 2);
    EXPECT_EQ(wan.large_calls, 1);
    EXPECT_EQ(wan.swing_calls, 1);
    EXPECT_EQ(wan.reduce_calls, lan.reduce_calls);  // local work: no round trip in it
    EXPECT_EQ(wan.large_block, lan.large_block);
    EXPECT_EQ(wan.swing_block, lan.swing_block);
    EXPECT_EQ(tune::calibration_plan(8, t, tune::kLongRoundTripS).large_calls, 1);
  }
}

TEST(Calibration, FitRecoversTheConstantsThatProducedTheTimes) {
  const auto* ring = algorithms::find_algorithm(Collective::all_gather, "ring");
  ASSERT_NE(ring, nullptr);
  const algorithms::CostParams truth{7.5e-6, 3.1e-10, 4.2e-11, 9.7e-10};
  for (int p : {2, 3, 4, 7, 8, 16, 100}) {
    EXPECT_LE(tune::calibration_plan(p, Transport::shm).large_block * p, uint64_t{4} << 20)
        << "creation must stay cheap";
    // Over TCP a step carries a whole chunk of the ring, enough to stripe over every NIC.
    EXPECT_GE(tune::calibration_plan(p, Transport::tcp).large_block,
              algorithms::CollectiveArgs{}.chunk_bytes);
    for (Transport t : {Transport::shm, Transport::tcp}) {
      const tune::CalibrationPlan plan = tune::calibration_plan(p, t);
      EXPECT_GT(plan.large_block, plan.small_block);
      // Across hosts of 2 ranks (tcp, an even world of several hosts) the Swing all_gather is
      // timed too: its modelled time across hosts.
      const bool across = t == Transport::tcp && p % 2 == 0 && p > 2;
      double swing_s = 0;
      if (across) {
        const auto* swing = algorithms::find_algorithm(Collective::all_gather, "swing");
        const auto traffic = tune::host_traffic(*swing, p, 2);
        const double n = static_cast<double>(plan.swing_block * p);
        swing_s = swing->cost(p, plan.swing_block * p, {truth.alpha, 0, 0, 0}) +
                  truth.beta * traffic.nic * n + truth.busy_gamma * traffic.memory * n;
      }
      const tune::CalibrationTimes times{
          ring->cost(p, plan.small_block * p, truth), ring->cost(p, plan.large_block * p, truth),
          truth.gamma * static_cast<double>(plan.reduce_bytes), swing_s};
      const auto floor = tune::default_cost_params(t);
      const auto c = tune::fit_cost_params(p, plan, times, floor, across ? 2 : 1);
      EXPECT_NEAR(c.alpha / truth.alpha, 1.0, 1e-9) << p;
      EXPECT_NEAR(c.beta / truth.beta, 1.0, 1e-9) << p;
      EXPECT_NEAR(c.gamma / truth.gamma, 1.0, 1e-9) << p;
      EXPECT_NEAR(c.busy_gamma / (across ? truth.busy_gamma : floor.busy_gamma), 1.0, 1e-9) << p;
    }
  }
}

// With more ranks than cores the fit reads the ring through the shared-cores model too: times
// written by hand from that model ((p-1) steps on the critical path, p(p-1) messages and
// (p-1) x n bytes sent by the host's ranks, over its cores) give the constants back.
TEST(Calibration, FitOnSharedCoresInvertsTheSharedCoresModel) {
  const algorithms::CostParams truth{7.5e-6, 3.1e-10, 4.2e-11, 2e-10};
  for (int p : {4, 8, 16}) {
    const int cores = 2;
    const tune::CalibrationPlan plan = tune::calibration_plan(p, Transport::shm);
    auto ring_time = [&](uint64_t block) {
      const double n = static_cast<double>(block * p), steps = p - 1.0;
      return steps * truth.alpha + steps / p * n * truth.beta +
             (p * steps * truth.alpha + steps * n * truth.beta) / cores;
    };
    const tune::CalibrationTimes times{ring_time(plan.small_block), ring_time(plan.large_block),
                                       truth.gamma * static_cast<double>(plan.reduce_bytes), 0};
    const auto c =
        tune::fit_cost_params(p, plan, times, tune::default_cost_params(Transport::shm), p, cores);
    EXPECT_NEAR(c.alpha / truth.alpha, 1.0, 1e-9) << p;
    EXPECT_NEAR(c.beta / truth.beta, 1.0, 1e-9) << p;
    // As many cores as ranks: the plain ring model, whose fit of these times is not the truth.
    const auto flat =
        tune::fit_cost_params(p, plan, times, tune::default_cost_params(Transport::shm), p, p);
    EXPECT_GT(flat.alpha / truth.alpha, 1.5) << p;
  }
}

// Noise can make the large call no slower per byte than the small one: the fit still gives
// finite positive constants (alpha from the small call, beta at its floor), never a negative
// or infinite one that would make every pick absurd.
TEST(Calibration, NoisyOrZeroTimesGiveFinitePositiveConstants) {
  const auto floor = tune::default_cost_params(Transport::tcp);
  const tune::CalibrationPlan plan = tune::calibration_plan(4, Transport::tcp);
  const auto noisy =
      tune::fit_cost_params(4, plan, {1e-3, 1e-4, 1e-5, 1e-3}, floor);  // large faster than small
  // A Swing call faster than its wire alone: the memory work was hidden, busy_gamma at its floor.
  EXPECT_EQ(tune::fit_cost_params(4, plan, {1e-5, 1e-2, 1e-5, 1e-6}, floor, 2).busy_gamma,
            floor.busy_gamma / 100);
  EXPECT_NEAR(noisy.alpha, 1e-3 / 3, 1e-12);  // 3 ring steps
  EXPECT_EQ(noisy.beta, floor.beta / 100);
  // On long paths the calls time less than a flight (ranks leave at different times and find
  // their peers' messages arrived): the round trip the handshakes measured floors alpha, and
  // beta is what the large call leaves beyond it. 4 ranks, 40 ms one way, the large call
  // 3 x 40 ms + 1.5 MiB at 10 MB/s.
  const double large = 3 * 0.04 + 3 * static_cast<double>(plan.large_block) / 10e6;
  const auto wan = tune::fit_cost_params(4, plan, {1.7e-4, large, 1e-5, 0, 0.04}, floor);
  EXPECT_DOUBLE_EQ(wan.alpha, 0.04);
  EXPECT_NEAR(1 / wan.beta, 10e6, 1e3);
  const auto zero = tune::fit_cost_params(4, plan, {0, 0, 0, 0}, floor);
  EXPECT_EQ(zero.alpha, floor.alpha);
  EXPECT_EQ(zero.beta, floor.beta / 100);
  EXPECT_EQ(zero.gamma, floor.gamma);
  EXPECT_EQ(zero.busy_gamma, floor.busy_gamma);
  for (const auto& c : {noisy, zero})
    for (double x : {c.alpha, c.beta, c.gamma, c.busy_gamma})
      EXPECT_TRUE(std::isfinite(x) && x > 0);
}

// The measured constants replace the defaults; SHOAL_TUNE_* still replaces each of them.
TEST(Calibration, MeasuredConstantsFeedTheCostModelAndSettingsStillWin) {
  const algorithms::CostParams measured{1e-6, 1e-9, 1e-10};
  ScopedEnv a("SHOAL_TUNE_ALPHA", std::nullopt), b("SHOAL_TUNE_BETA", "2e-9"),
      g("SHOAL_TUNE_GAMMA", std::nullopt);
  const auto c = tune::cost_params(Transport::shm, &measured);
  EXPECT_EQ(c.alpha, 1e-6);
  EXPECT_EQ(c.beta, 2e-9);
  EXPECT_EQ(c.gamma, 1e-10);
  // And they change the pick: with a huge per-message cost, 1 MiB all_reduce at 16 ranks goes
  // to the fewest messages (not the ring, which sends 2(p-1)).
  const algorithms::CostParams latency_bound{1.0, 1e-12, 1e-12};
  const Dispatcher d(Context{16, 16, Transport::shm}, latency_bound, nullptr);
  EXPECT_NE(d.choose(Collective::all_reduce, 1 << 20).algorithm->name, "ring");
}

// Across hosts the bandwidth term counts the bytes a host sends through its NICs, from the
// rows' own schedules: the ring crosses each host boundary once ((p-1)/p of the bytes, as its
// flat model says), recursive doubling and halving send every rank's share across; on one host
// (or one rank per host) there is nothing to count.
TEST(CostModel, AcrossHostsTheBandwidthTermIsWhatAHostSendsToOthers) {
  auto row = [](Collective c, const char* name) { return *algorithms::find_algorithm(c, name); };
  for (int p : {8, 16}) {
    EXPECT_NEAR(tune::host_traffic(row(Collective::all_gather, "ring"), p, 2).nic, (p - 1.0) / p,
                1e-9)
        << p;
    EXPECT_NEAR(tune::host_traffic(row(Collective::reduce_scatter, "ring"), p, 2).nic,
                (p - 1.0) / p, 1e-9)
        << p;
    EXPECT_NEAR(tune::host_traffic(row(Collective::all_reduce, "ring"), p, 2).nic,
                2 * (p - 1.0) / p, 1e-9)
        << p;
    EXPECT_GT(tune::host_traffic(row(Collective::all_gather, "recursive_doubling"), p, 2).nic, 1.4)
        << p;
    EXPECT_GT(tune::host_traffic(row(Collective::reduce_scatter, "recursive_halving"), p, 2).nic,
              1.4)
        << p;
  }
  EXPECT_EQ(tune::host_traffic(row(Collective::all_gather, "ring"), 8, 8).nic, 0.0);
  // The flat model picks recursive halving for a large reduce_scatter at 8 ranks (same bytes as
  // the ring, fewer steps); across 4 hosts of 2 it must not: it sends 1.5 n through a host's NICs.
  const algorithms::CostParams tcp{3.5e-5, 8e-9, 2e-11, 2e-11};
  const Dispatcher one_host(Context{8, 8, Transport::tcp}, tcp, nullptr);
  const Dispatcher four_hosts(Context{8, 2, Transport::tcp}, tcp, nullptr);
  EXPECT_EQ(one_host.choose(Collective::reduce_scatter, 16 << 20).algorithm->name,
            "recursive_halving");
  EXPECT_NE(four_hosts.choose(Collective::reduce_scatter, 16 << 20).algorithm->name,
            "recursive_halving");
}

// The memory work a row does besides its NIC bytes, counted from its schedule at 4 hosts of 2:
// Swing's reduce_scatter reduces (p-1)/p of the input and sends its first half to its partner
// on the same host; the ring reduces as much and passes all it reduces to its neighbour, which
// for rank 0 is on its own host.
TEST(CostModel, HostTrafficCountsEachRowsMemoryWork) {
  auto traffic = [](Collective c, const char* name) {
    return tune::host_traffic(*algorithms::find_algorithm(c, name), 8, 2);
  };
  const auto swing = traffic(Collective::reduce_scatter, "swing");
  EXPECT_NEAR(swing.nic, 2 * (1 / 4.0 + 1 / 8.0), 1e-9);  // steps 2 and 3 cross, both ranks
  // reduces 1/2 + 1/4 + 1/8, sends 1/2 on its host, copies its last block (1/8) out
  EXPECT_NEAR(swing.memory, 7 / 8.0 + 1 / 2.0 + 1 / 8.0, 1e-9);
  const auto ring = traffic(Collective::reduce_scatter, "ring");
  EXPECT_NEAR(ring.memory, 2 * 7 / 8.0, 1e-9);  // rank 0 reduces 7 blocks and sends them to rank 1
  // all_gather reduces nothing: Swing's memory work is its last (host-local) step, half the
  // output, and at most the copy of its own block.
  const auto swing_ag = traffic(Collective::all_gather, "swing");
  EXPECT_NEAR(swing_ag.nic, 2 * (1 / 8.0 + 1 / 4.0), 1e-9);
  EXPECT_GE(swing_ag.memory, 1 / 2.0 - 1e-9);
  EXPECT_LE(swing_ag.memory, 1 / 2.0 + 1 / 8.0 + 1e-9);
}

// Across hosts a pipelined row hides its memory work behind the NICs and a step-synchronous one
// adds it: the predicted time is alpha's term + max(wire, memory) for the ring and + wire +
// memory for Swing. On the emulated cluster's constants (4 hosts of 2, 8 ranks on 2 cores) that
// makes the ring the pick for 16 MiB, where Swing's fewer NIC bytes alone would win (the
// measured times: docs/algorithms.md); with memory work that costs nothing, Swing wins.
TEST(CostModel, APipelinedRowHidesItsMemoryWorkBehindTheNicsAndOthersAddIt) {
  const Context cluster{8, 2, Transport::tcp};
  const algorithms::CostParams busy{6.5e-5, 4.3e-9, 2e-11, 1e-9},
      idle{6.5e-5, 4.3e-9, 2e-11, 1e-13};
  const auto* ring = algorithms::find_algorithm(Collective::reduce_scatter, "ring");
  const auto* swing = algorithms::find_algorithm(Collective::reduce_scatter, "swing");
  ASSERT_TRUE(ring && swing && ring->pipelined && !swing->pipelined);
  const uint64_t n = 16 << 20;
  // Worked out by hand for rank 0 (host 0 holds ranks 0 and 1), in fractions of n:
  //  ring: 7 steps; rank 1 sends its 7 blocks to rank 2 across (nic 7/8); rank 0 reduces 7
  //    blocks and sends 7 to rank 1 on its host (memory 7/8 + 7/8).
  //  swing: 3 steps; the first (half the input) goes to rank 1 on its host, the second (1/4)
  //    and third (1/8) across, from both ranks (nic 2 x 3/8); rank 0 sends 1/2 on its host,
  //    reduces 1/2 + 1/4 + 1/8 and copies its last block out (memory 1/2 + 7/8 + 1/8).
  struct Row {
    const algorithms::AlgorithmInfo* row;
    double steps, nic, memory;
  };
  const Row ring_by_hand{ring, 7, 7 / 8.0, 7 / 8.0 + 7 / 8.0},
      swing_by_hand{swing, 3, 3 / 4.0, 1 / 2.0 + 1.0};
  for (const auto* params : {&busy, &idle}) {
    auto expected = [&](const Row& r) {
      const double wire = params->beta * r.nic * n, memory = params->busy_gamma * r.memory * n;
      return r.steps * params->alpha + (r.row->pipelined ? std::max(wire, memory) : wire + memory);
    };
    // The pick is the cheaper of the two (no other row comes close at 16 MiB), and its
    // prediction is that row's time.
    const auto pick = Dispatcher(cluster, *params, nullptr).choose(Collective::reduce_scatter, n);
    const Row& cheaper =
        expected(ring_by_hand) < expected(swing_by_hand) ? ring_by_hand : swing_by_hand;
    EXPECT_EQ(pick.algorithm, cheaper.row);
    EXPECT_NEAR(pick.predicted_s, expected(cheaper), expected(cheaper) * 1e-12);
  }
  // With these constants the reduce_scatter takes, busy: 63.58 ms (ring: its NIC term hides its
  // memory work) against 79.47 ms (swing: 54.11 + 25.17 + 0.2); idle: 63.58 against 54.30.
  for (Collective c : {Collective::reduce_scatter, Collective::all_reduce}) {
    EXPECT_EQ(Dispatcher(cluster, busy, nullptr).choose(c, n).algorithm->name, "ring")
        << algorithms::to_string(c);
    EXPECT_EQ(Dispatcher(cluster, idle, nullptr).choose(c, n).algorithm->name, "swing")
        << algorithms::to_string(c);
  }
  // Small messages stay with the fewer steps.
  EXPECT_NE(Dispatcher(cluster, busy, nullptr)
                .choose(Collective::reduce_scatter, 64 << 10)
                .algorithm->name,
            "ring");
}

TEST(Context, FromTopology) {
  const Context c = tune::make_context({0, 0, 0, 1, 1, 2}, false);
  EXPECT_EQ(c.world, 6);
  EXPECT_EQ(c.ranks_per_host, 3);
  EXPECT_EQ(c.transport, Transport::tcp);
  EXPECT_EQ(tune::make_context({0, 0}, true).transport, Transport::shm);
}

TEST(Context, CoresPerHostIsTheFewestAnyHostGives) {
  const Context c = tune::make_context({0, 0, 0, 1, 1, 1}, false, {4, 2});
  EXPECT_EQ(c.cores_per_host, 2);
  EXPECT_TRUE(tune::ranks_share_cores(c));
  EXPECT_FALSE(tune::ranks_share_cores(tune::make_context({0, 0, 1, 1}, false, {4, 2})));
  EXPECT_FALSE(
      tune::ranks_share_cores(tune::make_context({0, 0, 0}, true)));  // unknown: a core per rank
  EXPECT_EQ(tune::make_context({0, 0}, true, {0}).cores_per_host, 0);
}

// What a call makes a host's ranks do in all, against each schedule's closed form (bytes as
// fractions of the call's, model_bytes): the tree sends 2(p-1) messages, recursive doubling
// p log2 p, the ring all_reduce 2p(p-1), the ring all_gather p(p-1).
TEST(SharedCores, HostWorkCountsEveryRanksMessagesAndBytes) {
  auto row = [](Collective c, const char* name) { return *algorithms::find_algorithm(c, name); };
  for (int p : {4, 8, 16}) {
    const double lg = std::log2(p);
    const auto tree = tune::host_work(row(Collective::all_reduce, "binomial"), p, p);
    EXPECT_EQ(tree.messages, 2.0 * (p - 1)) << p;
    EXPECT_NEAR(tree.sent, 2.0 * (p - 1), 1e-9) << p;  // the whole vector up and down each edge
    EXPECT_NEAR(tree.reduced, p - 1.0, 1e-9) << p;     // one reduction per edge
    const auto doubling = tune::host_work(row(Collective::all_reduce, "recursive_doubling"), p, p);
    EXPECT_EQ(doubling.messages, p * lg) << p;
    EXPECT_NEAR(doubling.sent, p * lg, 1e-9) << p;
    const auto ring = tune::host_work(row(Collective::all_reduce, "ring"), p, p);
    EXPECT_EQ(ring.messages, 2.0 * p * (p - 1)) << p;
    EXPECT_NEAR(ring.sent, 2.0 * (p - 1), 1e-9) << p;
    EXPECT_NEAR(ring.reduced, p - 1.0, 1e-9) << p;
    EXPECT_EQ(tune::host_work(row(Collective::all_gather, "ring"), p, p).messages, p * (p - 1.0))
        << p;
    // Across hosts, host 0's ranks only.
    EXPECT_EQ(tune::host_work(row(Collective::all_gather, "ring"), p, 2).messages, 2.0 * (p - 1))
        << p;
  }
  const algorithms::CostParams c{1e-5, 1e-10, 1e-11, 0};
  EXPECT_NEAR(tune::shared_cores_cost({10, 2, 1}, 1000, c, 2),
              (10 * 1e-5 + 1000 * (2e-10 + 1e-11)) / 2, 1e-15);
  EXPECT_EQ(tune::shared_cores_cost({10, 2, 1}, 1000, c, 0), 0.0);
}

// With 8 or 16 ranks on 2 cores small all_reduces go to the binomial tree, whose leaves wait
// asleep (measured fastest there up to 128-512 KiB, docs/algorithms.md); with a core per rank
// the model keeps its picks; large calls stay with the bandwidth-optimal rows either way.
TEST(SharedCores, TheTreeTakesSmallAllReducesWhenRanksShareCores) {
  const auto params = tune::default_cost_params(Transport::shm);
  for (int p : {8, 16}) {
    const Dispatcher shared(Context{p, p, Transport::shm, 2}, params, nullptr);
    const Dispatcher own(Context{p, p, Transport::shm, p}, params, nullptr);
    const Dispatcher unknown(Context{p, p, Transport::shm}, params, nullptr);
    for (uint64_t bytes : {uint64_t{1} << 10, uint64_t{16} << 10}) {
      EXPECT_EQ(pick(shared, Collective::all_reduce, bytes), "binomial") << p << " " << bytes;
      EXPECT_NE(pick(own, Collective::all_reduce, bytes), "binomial") << p << " " << bytes;
      EXPECT_EQ(pick(own, Collective::all_reduce, bytes),
                pick(unknown, Collective::all_reduce, bytes));
      // The predicted time counts the queue: more than the same row's on a core per rank.
      EXPECT_GT(
          shared.choose(Collective::all_reduce, bytes).predicted_s,
          algorithms::find_algorithm(Collective::all_reduce, "binomial")->cost(p, bytes, params));
    }
    EXPECT_NE(pick(shared, Collective::all_reduce, 16u << 20), "binomial") << p;
    EXPECT_NE(pick(shared, Collective::all_gather, 1u << 10), "ring") << p;  // p(p-1) messages
  }
}

// ---- wiring: CollectiveArgs::algorithm, SHOAL_ALGO's priority, SHOAL_DISPATCH=off ----

algorithms::CollectiveArgs args_for(Collective c, uint64_t count, int p) {
  algorithms::CollectiveArgs a;
  a.collective = c;
  a.count = count;
  a.size = p;
  return a;
}

TEST(Wiring, ArgsAlgorithmIsBuiltAndSigned) {
  auto a = args_for(Collective::all_reduce, 1000, 8);
  std::string name;
  algorithms::build_schedule(a, &name);
  EXPECT_EQ(name, "ring");  // null: the first row
  const uint32_t ring_sig = algorithms::signature(a);
  a.algorithm = algorithms::find_algorithm(Collective::all_reduce, "swing");
  algorithms::build_schedule(a, &name);
  EXPECT_EQ(name, "swing");
  EXPECT_NE(algorithms::signature(a), ring_sig);  // ranks that chose differently mismatch
}

TEST(Wiring, OverrideBeatsTheDispatcher) {
  auto a = args_for(Collective::all_reduce, 1000, 8);
  a.algorithm = algorithms::find_algorithm(Collective::all_reduce, "swing");
  algorithms::detail::set_algorithm_override("all_reduce:binomial;all_gather:bruck");
  EXPECT_EQ(algorithms::choose(a).name, "binomial");
  a.collective = Collective::reduce_scatter;  // no rule for it: the args' row
  a.algorithm = algorithms::find_algorithm(Collective::reduce_scatter, "recursive_halving");
  EXPECT_EQ(algorithms::choose(a).name, "recursive_halving");
  algorithms::detail::set_thread_algorithm_override("reduce_scatter:swing");
  EXPECT_EQ(algorithms::choose(a).name, "swing");
  algorithms::detail::set_thread_algorithm_override("");
  algorithms::detail::set_algorithm_override("");
  EXPECT_EQ(algorithms::choose(a).name, "recursive_halving");
}

TEST(Wiring, DispatchOffGivesTheFirstRow) {
  const std::string text = R"({"format": "shoal-tune 1", "tables": [
    {"collective": "all_reduce", "world": 16, "ranks_per_host": 16, "transport": "shm",
     "sizes": [8, 1048576], "times_us": {"ring": [9, 9], "swing": [1, 1]}}]})";
  TempFile f(text);
  ScopedEnv file("SHOAL_TUNE_FILE", f.path);
  const Context ctx{16, 16, Transport::shm};
  {
    ScopedEnv off("SHOAL_DISPATCH", "off");
    const Dispatcher d = Dispatcher::from_environment(ctx);
    EXPECT_FALSE(d.enabled());
    for (uint64_t bytes : {uint64_t{8}, uint64_t{1} << 20, uint64_t{1} << 30}) {
      EXPECT_EQ(pick(d, Collective::all_reduce, bytes), "ring");
      EXPECT_EQ(d.choose(Collective::all_reduce, bytes).source, Choice::Source::first_row);
      EXPECT_EQ(pick(d, Collective::all_gather, bytes), "ring");
    }
  }
  ScopedEnv on("SHOAL_DISPATCH", std::nullopt);  // default: on
  EXPECT_EQ(pick(Dispatcher::from_environment(ctx), Collective::all_reduce, 1024), "swing");
  ScopedEnv bad("SHOAL_DISPATCH", "maybe");
  EXPECT_THROW(Dispatcher::from_environment(ctx), InvalidArgumentError);
}

// ---- tuning files ----

// all_reduce at 4 ranks on shm: recursive_doubling up to 4K, then rabenseifner, ring from 16M;
// at 8 ranks: binomial everywhere; one tcp table at 4 ranks: swing.
const char* kGoodFile = R"({
  "format": "shoal-tune 1", "host": "test", "command": "by hand",
  "tables": [
    {"collective": "all_reduce", "world": 4, "ranks_per_host": 4, "transport": "shm",
     "sizes": [1024, 4096, 65536, 16777216],
     "times_us": {"ring": [50, 60, 100, 1000], "rabenseifner": [40, 45, 80, 1100],
                  "recursive_doubling": [10, 20, 400, 9000], "swing": [41, 46, 81, 1101],
                  "binomial": [30, 60, 900, 20000]}},
    {"collective": "all_reduce", "world": 8, "ranks_per_host": 8, "transport": "shm",
     "sizes": [1024, 1048576], "times_us": {"ring": [50, 500], "binomial": [5, 50]}},
    {"collective": "all_reduce", "world": 4, "ranks_per_host": 4, "transport": "tcp",
     "sizes": [1024, 1048576], "times_us": {"ring": [50, 500], "swing": [5, 50]}},
    {"collective": "all_gather", "world": 4, "ranks_per_host": 4, "transport": "shm",
     "sizes": [1024, 1048576], "times_us": {"ring": [50, 500], "bruck": [5, 600]}}
  ]})";

TEST(TuningFile, PicksAreHonoured) {
  TempFile f(kGoodFile);
  ScopedEnv file("SHOAL_TUNE_FILE", f.path);
  ScopedEnv reading("SHOAL_TUNE_SMOOTHING", "0");
  const Dispatcher d = Dispatcher::from_environment(Context{4, 4, Transport::shm});
  ASSERT_NE(d.table_for(Collective::all_reduce), nullptr);
  EXPECT_EQ(d.table_for(Collective::all_reduce)->world, 4);
  EXPECT_EQ(pick(d, Collective::all_reduce, 1024), "recursive_doubling");
  EXPECT_EQ(pick(d, Collective::all_reduce, 4096), "recursive_doubling");
  EXPECT_EQ(pick(d, Collective::all_reduce, 65536), "rabenseifner");
  EXPECT_EQ(pick(d, Collective::all_reduce, 16 << 20), "ring");
  const Choice c = d.choose(Collective::all_reduce, 1024);
  EXPECT_EQ(c.source, Choice::Source::tuning_file);
  EXPECT_DOUBLE_EQ(c.predicted_s, 10e-6);
  // all_gather: bruck for small, ring for large; a collective without a table: the cost model
  EXPECT_EQ(pick(d, Collective::all_gather, 1024), "bruck");
  EXPECT_EQ(pick(d, Collective::all_gather, 1 << 20), "ring");
  EXPECT_EQ(d.choose(Collective::reduce_scatter, 1 << 20).source, Choice::Source::cost_model);
}

TEST(TuningFile, InterpolatesInLogSize) {
  TempFile f(kGoodFile);
  ScopedEnv file("SHOAL_TUNE_FILE", f.path);
  ScopedEnv reading("SHOAL_TUNE_SMOOTHING", "0");
  const Dispatcher d = Dispatcher::from_environment(Context{4, 4, Transport::shm});
  // Between 4K and 64K (16K is the log-midpoint): recursive_doubling 20 -> 400 (210 at 16K),
  // rabenseifner 45 -> 80 (62.5 at 16K): rabenseifner. Just above 4K recursive_doubling still wins.
  EXPECT_EQ(pick(d, Collective::all_reduce, 16384), "rabenseifner");
  EXPECT_EQ(pick(d, Collective::all_reduce, 4200),
            "recursive_doubling");  // w = 0.0088: 23.3 < 45.3
  const Choice mid = d.choose(Collective::all_reduce, 16384);
  EXPECT_NEAR(mid.predicted_s, 62.5e-6, 1e-9);
  // the nearest measured size (in log) instead: 5000 reads 4K's times, 30000 64K's
  const Dispatcher n(Context{4, 4, Transport::shm}, tune::default_cost_params(Transport::shm),
                     std::make_shared<const tune::TuningFile>(tune::load_tuning_file(f.path)), true,
                     tune::Reading{tune::Interpolation::nearest, 0});
  EXPECT_EQ(pick(n, Collective::all_reduce, 5000), "recursive_doubling");
  EXPECT_EQ(pick(n, Collective::all_reduce, 30000), "rabenseifner");
}

// ---- the smoothed reading (the default) ----

// A table of two rows at 15 sizes, 1 KiB to 16 MiB by x2, from `time_of(row, bytes)` seconds.
std::shared_ptr<const tune::TuningFile> two_row_table(
    const std::function<double(int, double)>& time_of, bool simulated = false) {
  auto file = std::make_shared<tune::TuningFile>();
  tune::Measurements m;
  m.collective = Collective::all_reduce;
  m.world = 4;
  m.ranks_per_host = 4;
  m.simulated = simulated;
  for (uint64_t s = 1024; s <= (16u << 20); s *= 2) m.sizes.push_back(s);
  for (const char* name : {"ring", "rabenseifner"}) {
    std::vector<double> t;
    for (uint64_t s : m.sizes)
      t.push_back(time_of(static_cast<int>(m.times.size()), static_cast<double>(s)));
    m.times.emplace_back(algorithms::find_algorithm(Collective::all_reduce, name), t);
  }
  file->tables.push_back(m);
  return file;
}

// The reference, written apart from src/tune/curves.cpp: the weighted least-squares line of
// log(time) over log2(size) in centred form (slope from the weighted covariance), read at x.
double reference_fit(const std::vector<uint64_t>& sizes, const std::vector<double>& seconds,
                     double x, double h) {
  double sw = 0, mean_d = 0, mean_y = 0;
  std::vector<double> w, d, y;
  for (size_t i = 0; i < sizes.size(); ++i) {
    d.push_back(std::log2(static_cast<double>(sizes[i])) - x);
    y.push_back(std::log(seconds[i]));
    w.push_back(std::exp(-d.back() * d.back() / (2 * h * h)));
    sw += w.back();
    mean_d += w.back() * d.back();
    mean_y += w.back() * y.back();
  }
  mean_d /= sw;
  mean_y /= sw;
  double cov = 0, var = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    cov += w[i] * (d[i] - mean_d) * (y[i] - mean_y);
    var += w[i] * (d[i] - mean_d) * (d[i] - mean_d);
  }
  return std::exp(mean_y - cov / var * mean_d);  // the line at d = 0
}

TEST(TuningFile, SmoothedReadingMatchesAWeightedFitThroughEveryMeasuredSize) {
  // Noisy times: a latency term, a bandwidth term and +-15% that changes from size to size.
  auto noisy = [](int row, double s) {
    const double noise = 1 + 0.15 * std::sin(3.7 * std::log2(s) + row);
    return (5e-6 * (row + 1) + s * (row ? 0.9e-10 : 1e-10)) * noise;
  };
  const auto file = two_row_table(noisy);
  const tune::Measurements& m = file->tables[0];
  for (double h : {0.5, 1.0, 2.0, 3.0}) {
    const Dispatcher d(Context{4, 4, Transport::shm}, tune::default_cost_params(Transport::shm),
                       file, true, tune::Reading{tune::Interpolation::smoothed, h});
    // measured sizes, sizes between them and off the 1/8-octave grid the curves are kept at
    for (double x = 10; x <= 24; x += 0.37) {
      const auto bytes = static_cast<uint64_t>(std::llround(std::exp2(x)));
      const double bx = std::log2(static_cast<double>(bytes));
      const double ring = reference_fit(m.sizes, m.times[0].second, bx, h);
      const double rab = reference_fit(m.sizes, m.times[1].second, bx, h);
      const Choice c = d.choose(Collective::all_reduce, bytes);
      // between two points 1/8 octave apart the curve is read linearly in log(time)
      EXPECT_NEAR(c.predicted_s / std::min(ring, rab), 1, 2e-3) << "h=" << h << " bytes=" << bytes;
      if (std::abs(ring / rab - 1) > 0.01) {
        EXPECT_EQ(c.algorithm->name, ring < rab ? "ring" : "rabenseifner")
            << "h=" << h << " bytes=" << bytes;
      }
    }
  }
}

TEST(TuningFile, SmoothedReadingIsExactForPowerLaws) {
  // time = a x size^b, per row: the local-linear fit in log-log reproduces it at every size
  const auto file = two_row_table(
      [](int row, double s) { return row ? 2e-9 * std::pow(s, 0.8) : 3e-8 * std::pow(s, 0.5); });
  const Dispatcher d(Context{4, 4, Transport::shm}, tune::default_cost_params(Transport::shm),
                     file);
  for (uint64_t bytes :
       {uint64_t{1024}, uint64_t{3000}, uint64_t{65536}, uint64_t{1234567}, uint64_t{16} << 20}) {
    const double b = static_cast<double>(bytes);
    const double expect = std::min(3e-8 * std::pow(b, 0.5), 2e-9 * std::pow(b, 0.8));
    EXPECT_NEAR(d.choose(Collective::all_reduce, bytes).predicted_s / expect, 1, 1e-9) << bytes;
  }
}

TEST(TuningFile, OneNoisyPointDoesNotFlipTheSmoothedPick) {
  // rabenseifner 5% slower than the ring everywhere but at 256 KiB, where one measurement came
  // out 10% faster: the neighbours' reading takes it there, the smoothed one does not (at 2
  // octaves the point carries a fifth of the weight at its own size: it pulls the curve down
  // by about 3%, not 15%).
  const uint64_t noisy_size = 256 << 10;
  const auto file = two_row_table([&](int row, double s) {
    const double ring = 4e-6 + s * 1e-10;
    if (!row) return ring;
    return ring * (s == static_cast<double>(noisy_size) ? 0.9 : 1.05);
  });
  const Dispatcher raw(Context{4, 4, Transport::shm}, tune::default_cost_params(Transport::shm),
                       file, true, kLogLinear);
  const Dispatcher smoothed(Context{4, 4, Transport::shm},
                            tune::default_cost_params(Transport::shm), file);
  EXPECT_EQ(pick(raw, Collective::all_reduce, noisy_size), "rabenseifner");
  EXPECT_EQ(pick(raw, Collective::all_reduce, noisy_size + noisy_size / 4), "rabenseifner");
  for (uint64_t bytes = 1024; bytes <= (16u << 20); bytes = bytes * 3 / 2)
    EXPECT_EQ(pick(smoothed, Collective::all_reduce, bytes), "ring") << bytes;
}

TEST(TuningFile, SimulatedTablesAreNotSmoothed) {
  // The simulator has no noise: its times are read as they are, between neighbours.
  const auto file =
      two_row_table([](int row, double s) { return (row + 1) * (1e-6 + s * s * 1e-18); }, true);
  const Dispatcher d(Context{64, 4, Transport::shm}, tune::default_cost_params(Transport::shm),
                     file);
  ASSERT_TRUE(d.table_for(Collective::all_reduce)->simulated);
  for (uint64_t s : d.table_for(Collective::all_reduce)->sizes)
    EXPECT_DOUBLE_EQ(d.choose(Collective::all_reduce, s).predicted_s,
                     1e-6 + static_cast<double>(s) * s * 1e-18)
        << s;
}

TEST(TuningFile, SmoothingSetting) {
  TempFile f(kGoodFile);
  ScopedEnv file("SHOAL_TUNE_FILE", f.path);
  const Context ctx{4, 4, Transport::shm};
  const auto table = std::make_shared<const tune::TuningFile>(tune::load_tuning_file(f.path));
  const Dispatcher raw(ctx, tune::default_cost_params(Transport::shm), table, true, kLogLinear);
  const Dispatcher wide(ctx, tune::default_cost_params(Transport::shm), table, true,
                        tune::Reading{tune::Interpolation::smoothed, 3});
  {
    ScopedEnv reading("SHOAL_TUNE_SMOOTHING", std::nullopt);  // default: 2 octaves
    EXPECT_EQ(tune::Reading::from_environment().interpolation, tune::Interpolation::smoothed);
    EXPECT_EQ(tune::Reading::from_environment().octaves, 2);
  }
  for (uint64_t bytes : {uint64_t{2000}, uint64_t{16384}, uint64_t{1} << 22}) {
    ScopedEnv zero("SHOAL_TUNE_SMOOTHING", "0");
    EXPECT_EQ(Dispatcher::from_environment(ctx).choose(Collective::all_reduce, bytes).predicted_s,
              raw.choose(Collective::all_reduce, bytes).predicted_s)
        << bytes;
    ScopedEnv three("SHOAL_TUNE_SMOOTHING", "3");
    EXPECT_EQ(Dispatcher::from_environment(ctx).choose(Collective::all_reduce, bytes).predicted_s,
              wide.choose(Collective::all_reduce, bytes).predicted_s)
        << bytes;
  }
  for (const char* bad : {"-1", "two", "2x", "65", "nan", "inf"}) {
    ScopedEnv reading("SHOAL_TUNE_SMOOTHING", bad);
    try {
      Dispatcher::from_environment(ctx);
      ADD_FAILURE() << "accepted SHOAL_TUNE_SMOOTHING='" << bad << "'";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("SHOAL_TUNE_SMOOTHING"), std::string::npos) << e.what();
    }
  }
}

// Outside the measured sizes the ranking at the nearest measured size decides, not the cost
// model; where the file has no table for the collective, the cost model does.
TEST(TuningFile, OutsideTheMeasuredSizesTheNearestMeasuredSizeDecides) {
  TempFile f(kGoodFile);
  ScopedEnv file("SHOAL_TUNE_FILE", f.path);
  const Dispatcher d = Dispatcher::from_environment(Context{4, 4, Transport::shm});
  const tune::Measurements& m = *d.table_for(Collective::all_reduce);
  for (uint64_t bytes : {uint64_t{0}, uint64_t{8}, uint64_t{1023}}) {
    EXPECT_EQ(d.choose(Collective::all_reduce, bytes).source, Choice::Source::tuning_file) << bytes;
    EXPECT_EQ(pick(d, Collective::all_reduce, bytes),
              pick(d, Collective::all_reduce, m.sizes.front()))
        << bytes;
  }
  for (uint64_t bytes : {m.sizes.back() + 1, uint64_t{1} << 34}) {
    EXPECT_EQ(d.choose(Collective::all_reduce, bytes).source, Choice::Source::tuning_file) << bytes;
    EXPECT_EQ(pick(d, Collective::all_reduce, bytes),
              pick(d, Collective::all_reduce, m.sizes.back()))
        << bytes;
  }
  EXPECT_EQ(d.choose(Collective::reduce_scatter, 1 << 20).source,
            Choice::Source::cost_model);  // no table
}

TEST(TuningFile, NearestWorldOnTheSameTransport) {
  TempFile f(kGoodFile);
  ScopedEnv file("SHOAL_TUNE_FILE", f.path);
  // 6 and 16 ranks are nearer (in log2) to the 8-rank table, 3 and 2 to the 4-rank one
  for (int p : {6, 16}) {
    const Dispatcher d = Dispatcher::from_environment(Context{p, p, Transport::shm});
    EXPECT_EQ(d.table_for(Collective::all_reduce)->world, 8) << p;
    EXPECT_EQ(pick(d, Collective::all_reduce, 4096), "binomial") << p;
  }
  for (int p : {2, 3}) {
    const Dispatcher d = Dispatcher::from_environment(Context{p, p, Transport::shm});
    EXPECT_EQ(d.table_for(Collective::all_reduce)->world, 4) << p;
  }
  // tcp has only the 4-rank all_reduce table; nothing for all_gather over tcp
  const Dispatcher t = Dispatcher::from_environment(Context{8, 4, Transport::tcp});
  EXPECT_EQ(pick(t, Collective::all_reduce, 4096), "swing");
  EXPECT_EQ(t.table_for(Collective::all_gather), nullptr);
  EXPECT_EQ(t.choose(Collective::all_gather, 4096).source, Choice::Source::cost_model);
}

TEST(TuningFile, CalibrationConstantsAreReadAndWritten) {
  const std::string text = R"({"format": "shoal-tune 1", "tables": [
      {"collective": "all_reduce", "world": 4, "ranks_per_host": 4, "transport": "shm",
       "calibration": {"alpha_us": 5.5, "beta_ns_per_byte": 0.25, "gamma_ns_per_byte": 0.02},
       "sizes": [8], "times_us": {"ring": [1]}}]})";
  const tune::TuningFile a = tune::parse_tuning_file(text, "mem");
  ASSERT_TRUE(a.tables[0].calibration.has_value());
  EXPECT_DOUBLE_EQ(a.tables[0].calibration->alpha, 5.5e-6);
  EXPECT_DOUBLE_EQ(a.tables[0].calibration->beta, 0.25e-9);
  EXPECT_DOUBLE_EQ(a.tables[0].calibration->gamma, 0.02e-9);
  // A file from before busy_gamma was calibrated keeps the default; a newer one has it.
  EXPECT_DOUBLE_EQ(a.tables[0].calibration->busy_gamma, algorithms::CostParams{}.busy_gamma);
  tune::TuningFile with_busy = a;
  with_busy.tables[0].calibration->busy_gamma = 1.5e-9;
  const tune::TuningFile b = tune::parse_tuning_file(tune::to_json(with_busy), "mem2");
  ASSERT_TRUE(b.tables[0].calibration.has_value());
  EXPECT_DOUBLE_EQ(b.tables[0].calibration->alpha, 5.5e-6);
  EXPECT_DOUBLE_EQ(b.tables[0].calibration->busy_gamma, 1.5e-9);
  EXPECT_FALSE(tune::parse_tuning_file(kGoodFile, "mem").tables[0].calibration.has_value());
}

// "hierarchical" times across hosts: read, written back, and compared with every row at the
// call's size (interpolated as the rows are; outside the sizes, at the nearest); a tie stays
// flat; no opinion without hierarchical times or with the dispatcher off.
TEST(TuningFile, HierarchicalTimesDecideWhereTheyCoverTheCall) {
  const std::string text = R"({"format": "shoal-tune 1", "tables": [
      {"collective": "all_gather", "world": 8, "ranks_per_host": 2, "transport": "tcp",
       "sizes": [1024, 1048576, 16777216],
       "times_us": {"ring": [50, 500, 8000], "bruck": [20, 600, 9000], "hierarchical": [60, 300, 8000]}},
      {"collective": "all_reduce", "world": 8, "ranks_per_host": 2, "transport": "tcp",
       "sizes": [1024], "times_us": {"ring": [50]}}]})";
  auto file = std::make_shared<const tune::TuningFile>(tune::parse_tuning_file(text, "mem"));
  ASSERT_EQ(file->tables[0].hierarchical.size(), 3u);
  EXPECT_TRUE(file->tables[1].hierarchical.empty());
  const tune::TuningFile again = tune::parse_tuning_file(tune::to_json(*file), "mem2");
  EXPECT_EQ(again.tables[0].hierarchical, file->tables[0].hierarchical);

  const Dispatcher d(Context{8, 2, Transport::tcp}, tune::default_cost_params(Transport::tcp), file,
                     true, kLogLinear);
  EXPECT_EQ(d.hierarchical_is_faster(Collective::all_gather, 1024), false);         // bruck 20 < 60
  EXPECT_EQ(d.hierarchical_is_faster(Collective::all_gather, 1048576), true);       // 300 < 500
  EXPECT_EQ(d.hierarchical_is_faster(Collective::all_gather, 4194304), true);       // interpolated
  EXPECT_EQ(d.hierarchical_is_faster(Collective::all_gather, 16777216), false);     // tie with ring
  EXPECT_EQ(d.hierarchical_is_faster(Collective::all_gather, 512), false);          // as at 1024
  EXPECT_EQ(d.hierarchical_is_faster(Collective::all_gather, 1ull << 30), false);   // as at 16M
  EXPECT_EQ(d.hierarchical_is_faster(Collective::all_reduce, 1024), std::nullopt);  // not timed
  const Dispatcher off(Context{8, 2, Transport::tcp}, tune::default_cost_params(Transport::tcp),
                       file, false);
  EXPECT_EQ(off.hierarchical_is_faster(Collective::all_gather, 1048576), std::nullopt);
  // The flat pick ignores the hierarchical column.
  EXPECT_EQ(d.choose(Collective::all_gather, 1048576).algorithm->name, "ring");
}

// Without hierarchical times the cost model decides: the hierarchy's inter-host phase sends
// what a ring of one rank per host sends, 2(H-1)/H of its slice per rank, and every rank of a
// host sends its own slice at once: 1.5 n through a host's NICs at 4 hosts, against the flat
// ring's 2(p-1)/p = 1.875 n at 16 ranks. With slow NICs and free memory work the model takes
// it; with costly messages and fast NICs (more steps: 2(l-1) local + the inter phase) it stays
// flat; outside SHOAL_HIERARCHICAL_MIN/MAX_BYTES it stays flat; on one host there is none.
TEST(HierarchyModel, TheCostModelDecidesWhereNoTableTimesTheHierarchy) {
  const Context four_hosts{16, 4, Transport::tcp};
  const algorithms::CostParams slow_nics{1e-9, 1e-6, 1e-12, 1e-12},
      costly_messages{1e-3, 1e-12, 1e-12, 1e-12};
  const uint64_t n = 4 << 20;
  const Dispatcher slow(four_hosts, slow_nics, nullptr);
  ASSERT_TRUE(slow.hierarchy_cost(Collective::all_reduce, n).has_value());
  EXPECT_NEAR(*slow.hierarchy_cost(Collective::all_reduce, n), 1e-6 * 1.5 * n,
              1e-6 * 1.5 * n * 1e-3);
  EXPECT_NEAR(*slow.flat_cost(Collective::all_reduce, n), 1e-6 * 1.875 * n,
              1e-6 * 1.875 * n * 1e-3);  // the ring
  const Dispatcher::SizeRange any{};
  for (Collective c :
       {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter}) {
    const auto verdict = slow.auto_hierarchy(c, n, any);
    EXPECT_TRUE(verdict.take) << algorithms::to_string(c);
    EXPECT_EQ(verdict.from, "cost model");
    EXPECT_FALSE(slow.auto_hierarchy(c, n, {0, 1 << 20}).take)
        << "beyond SHOAL_HIERARCHICAL_MAX_BYTES";
    EXPECT_EQ(slow.auto_hierarchy(c, n, {0, 1 << 20}).from, "size range");
    EXPECT_FALSE(slow.auto_hierarchy(c, n, {8 << 20, 0}).take)
        << "below SHOAL_HIERARCHICAL_MIN_BYTES";
  }
  const Dispatcher costly(four_hosts, costly_messages, nullptr);
  EXPECT_FALSE(costly.auto_hierarchy(Collective::all_reduce, 4096, any).take);
  EXPECT_GT(*costly.hierarchy_cost(Collective::all_reduce, 4096),
            *costly.flat_cost(Collective::all_reduce, 4096));
  // One host: no hierarchy to cost.
  const Dispatcher one_host(Context{16, 16, Transport::shm}, slow_nics, nullptr);
  EXPECT_FALSE(one_host.hierarchy_cost(Collective::all_reduce, n).has_value());
  EXPECT_FALSE(one_host.auto_hierarchy(Collective::all_reduce, n, any).take);
  // Uneven hosts (no hierarchy runs there): no cost either.
  EXPECT_FALSE(Dispatcher(Context{10, 4, Transport::tcp}, slow_nics, nullptr)
                   .hierarchy_cost(Collective::all_reduce, n));
}

TEST(TuningFile, RoundTripsThroughJson) {
  const tune::TuningFile a = tune::parse_tuning_file(kGoodFile, "mem");
  const tune::TuningFile b = tune::parse_tuning_file(tune::to_json(a, R"({"host": "x"})"), "mem2");
  ASSERT_EQ(a.tables.size(), b.tables.size());
  for (size_t i = 0; i < a.tables.size(); ++i) {
    EXPECT_EQ(a.tables[i].sizes, b.tables[i].sizes);
    ASSERT_EQ(a.tables[i].times.size(), b.tables[i].times.size());
    for (size_t j = 0; j < a.tables[i].times.size(); ++j) {
      EXPECT_EQ(a.tables[i].times[j].first, b.tables[i].times[j].first);
      for (size_t k = 0; k < a.tables[i].sizes.size(); ++k)
        EXPECT_NEAR(a.tables[i].times[j].second[k], b.tables[i].times[j].second[k], 1e-12);
    }
  }
}

// The cores per host a table was measured on: read, written, optional (0), and positive.
TEST(TuningFile, CoresPerHostIsReadAndWritten) {
  const std::string table = R"({"format": "shoal-tune 1", "tables": [
    {"collective": "all_reduce", "world": 8, "ranks_per_host": 8, "transport": "shm", CORES
     "sizes": [1024], "times_us": {"ring": [5]}}]})";
  auto with = [&](const std::string& cores) {
    std::string t = table;
    return t.replace(t.find("CORES"), 5, cores);
  };
  const tune::TuningFile a = tune::parse_tuning_file(with(R"("cores_per_host": 2,)"), "mem");
  EXPECT_EQ(a.tables.at(0).cores_per_host, 2);
  EXPECT_EQ(tune::parse_tuning_file(tune::to_json(a, ""), "mem2").tables.at(0).cores_per_host, 2);
  const tune::TuningFile none = tune::parse_tuning_file(with(""), "mem");
  EXPECT_EQ(none.tables.at(0).cores_per_host, 0);
  EXPECT_EQ(tune::to_json(none, "").find("cores_per_host"), std::string::npos);
  EXPECT_THROW(tune::parse_tuning_file(with(R"("cores_per_host": 0,)"), "mem"),
               InvalidArgumentError);
  EXPECT_THROW(tune::parse_tuning_file(with(R"("cores_per_host": "two",)"), "mem"),
               InvalidArgumentError);
}

// Measured tables at 4 and 16 ranks over tcp (ring everywhere); simulated ones at 64 and 1,024
// ranks (recursive_doubling at 64, swing at 1,024) and one at 8 ranks that a measured table
// covers (rabenseifner: must never be read).
const char* kSimulatedFile = R"({
  "format": "shoal-tune 1",
  "tables": [
    {"collective": "all_reduce", "world": 4, "ranks_per_host": 2, "transport": "tcp",
     "sizes": [1024, 1048576], "times_us": {"ring": [5, 50], "swing": [50, 500]}},
    {"collective": "all_reduce", "world": 16, "ranks_per_host": 2, "transport": "tcp",
     "sizes": [1024, 1048576], "times_us": {"ring": [5, 50], "swing": [50, 500]}},
    {"collective": "all_reduce", "world": 8, "ranks_per_host": 2, "transport": "tcp", "source": "simulated",
     "sizes": [1024, 1048576], "times_us": {"ring": [50, 500], "rabenseifner": [5, 50]}},
    {"collective": "all_reduce", "world": 64, "ranks_per_host": 2, "transport": "tcp", "source": "simulated",
     "sizes": [1024, 1048576], "times_us": {"ring": [50, 500], "recursive_doubling": [5, 50]}},
    {"collective": "all_reduce", "world": 1024, "ranks_per_host": 2, "transport": "tcp", "source": "simulated",
     "sizes": [1024, 1048576], "times_us": {"ring": [50, 500], "swing": [5, 50]}}
  ]})";

TEST(TuningFile, SimulatedTablesServeOnlyWorldsLargerThanAnyMeasured) {
  TempFile f(kSimulatedFile);
  ScopedEnv file("SHOAL_TUNE_FILE", f.path);
  ScopedEnv sim("SHOAL_TUNE_SIM", std::nullopt);  // default: on
  // up to the largest measured world (16) the measured tables decide, even where a simulated
  // table is nearer (8 ranks)
  for (int p : {4, 8, 12, 16}) {
    const Dispatcher d = Dispatcher::from_environment(Context{p, 2, Transport::tcp});
    EXPECT_FALSE(d.table_for(Collective::all_reduce)->simulated) << p;
    EXPECT_EQ(pick(d, Collective::all_reduce, 4096), "ring") << p;
    EXPECT_EQ(d.choose(Collective::all_reduce, 4096).source, Choice::Source::tuning_file) << p;
  }
  // beyond it, the nearest simulated world
  for (auto [p, algo] :
       {std::pair{17, "recursive_doubling"}, std::pair{64, "recursive_doubling"},
        std::pair{200, "recursive_doubling"}, std::pair{300, "swing"}, std::pair{4096, "swing"}}) {
    const Dispatcher d = Dispatcher::from_environment(Context{p, 2, Transport::tcp});
    ASSERT_NE(d.table_for(Collective::all_reduce), nullptr) << p;
    EXPECT_TRUE(d.table_for(Collective::all_reduce)->simulated) << p;
    EXPECT_EQ(pick(d, Collective::all_reduce, 4096), algo) << p;
    const Choice c = d.choose(Collective::all_reduce, 1024);
    EXPECT_EQ(c.source, Choice::Source::simulation) << p;
    EXPECT_DOUBLE_EQ(c.predicted_s, 5e-6) << p;
  }
  // outside the simulated sizes: the nearest simulated size's ranking
  const Dispatcher big = Dispatcher::from_environment(Context{1024, 2, Transport::tcp});
  EXPECT_EQ(big.choose(Collective::all_reduce, uint64_t{1} << 30).source,
            Choice::Source::simulation);
  EXPECT_EQ(pick(big, Collective::all_reduce, uint64_t{1} << 30),
            pick(big, Collective::all_reduce, 1048576));
  // another transport sees none of them
  EXPECT_EQ(Dispatcher::from_environment(Context{1024, 1024, Transport::shm})
                .table_for(Collective::all_reduce),
            nullptr);
}

TEST(TuningFile, SimulatedTablesHaveAnOffSwitch) {
  TempFile f(kSimulatedFile);
  ScopedEnv file("SHOAL_TUNE_FILE", f.path);
  ScopedEnv off("SHOAL_TUNE_SIM", "off");
  // 1,024 ranks: the measured 16-rank table is then the nearest
  const Dispatcher d = Dispatcher::from_environment(Context{1024, 2, Transport::tcp});
  EXPECT_EQ(d.table_for(Collective::all_reduce)->world, 16);
  EXPECT_EQ(pick(d, Collective::all_reduce, 4096), "ring");
  EXPECT_EQ(d.choose(Collective::all_reduce, 4096).source, Choice::Source::tuning_file);
  ScopedEnv bad("SHOAL_TUNE_SIM", "sometimes");
  EXPECT_THROW(Dispatcher::from_environment(Context{1024, 2, Transport::tcp}),
               InvalidArgumentError);
}

TEST(TuningFile, OnlySimulatedTablesServeEveryWorld) {
  // no measured table at all: the simulated one nearest in world size
  const std::string text = R"({"format": "shoal-tune 1", "tables": [
    {"collective": "all_gather", "world": 32, "ranks_per_host": 8, "transport": "tcp", "source": "simulated",
     "sizes": [1024, 1048576], "times_us": {"ring": [50, 500], "bruck": [5, 50]}}]})";
  TempFile f(text);
  ScopedEnv file("SHOAL_TUNE_FILE", f.path);
  const Dispatcher d = Dispatcher::from_environment(Context{8, 4, Transport::tcp});
  EXPECT_EQ(pick(d, Collective::all_gather, 4096), "bruck");
  EXPECT_EQ(d.choose(Collective::all_gather, 4096).source, Choice::Source::simulation);
  // the "source" survives a round trip; "measured" is the default
  const tune::TuningFile a = tune::load_tuning_file(f.path);
  EXPECT_TRUE(tune::parse_tuning_file(tune::to_json(a), "mem").tables.at(0).simulated);
  EXPECT_FALSE(tune::parse_tuning_file(kGoodFile, "mem").tables.at(0).simulated);
}

// Each malformed file raises InvalidArgumentError naming the file and the problem.
void expect_rejected(const std::string& text, const std::string& problem) {
  TempFile f(text);
  ScopedEnv file("SHOAL_TUNE_FILE", f.path);
  try {
    Dispatcher::from_environment(Context{4, 4, Transport::shm});
    ADD_FAILURE() << "accepted: " << text;
  } catch (const InvalidArgumentError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(f.path), std::string::npos) << what;
    EXPECT_NE(what.find(problem), std::string::npos) << "expected '" << problem << "' in: " << what;
  }
}

std::string table(const std::string& body) {
  return R"({"format": "shoal-tune 1", "tables": [)" + body + "]}";
}

TEST(TuningFile, MalformedFilesAreRejectedWithTheProblem) {
  expect_rejected("{\"format\": \"shoal-tune 1\", \"tables\": [", "not valid JSON");
  expect_rejected("[1, 2]", "must be an object");
  expect_rejected(R"({"tables": []})", "missing field 'format'");
  expect_rejected(R"({"format": "shoal-tune 9", "tables": []})", "expected \"shoal-tune 1\"");
  expect_rejected(R"({"format": "shoal-tune 1"})", "missing field 'tables'");
  expect_rejected(
      table(R"({"collective": "all_reduce", "world": 4, "ranks_per_host": 4, "transport": "shm",
                            "times_us": {"ring": [1]}})"),
      "tables[0]: missing field 'sizes'");
  expect_rejected(table(R"({"world": 4, "ranks_per_host": 4, "transport": "shm", "sizes": [8],
                            "times_us": {"ring": [1]}})"),
                  "missing field 'collective'");
  expect_rejected(
      table(R"({"collective": "all_smash", "world": 4, "ranks_per_host": 4, "transport": "shm",
                            "sizes": [8], "times_us": {"ring": [1]}})"),
      "unknown collective 'all_smash'");
  expect_rejected(
      table(R"({"collective": "all_reduce", "world": 4, "ranks_per_host": 4, "transport": "shm",
                            "sizes": [8], "times_us": {"ringg": [1]}})"),
      "unknown algorithm 'ringg' for all_reduce (it has: ring, two_shot, rabenseifner");
  expect_rejected(
      table(R"({"collective": "all_gather", "world": 4, "ranks_per_host": 4, "transport": "shm",
                            "sizes": [8], "times_us": {"rabenseifner": [1]}})"),
      "unknown algorithm 'rabenseifner' for all_gather");
  expect_rejected(
      table(R"({"collective": "all_reduce", "world": 4, "ranks_per_host": 4, "transport": "shm",
                            "sizes": [8, 16], "times_us": {"ring": [1]}})"),
      "times_us.ring: must be an array of 2 times");
  expect_rejected(
      table(R"({"collective": "all_reduce", "world": 4, "ranks_per_host": 4, "transport": "shm",
                            "sizes": [16, 8], "times_us": {"ring": [1, 2]}})"),
      "sizes must increase strictly");
  expect_rejected(
      table(R"({"collective": "all_reduce", "world": 4, "ranks_per_host": 4, "transport": "shm",
                            "sizes": [8], "times_us": {"ring": [-1]}})"),
      "must be a positive number of microseconds");
  expect_rejected(
      table(R"({"collective": "all_reduce", "world": 0, "ranks_per_host": 4, "transport": "shm",
                            "sizes": [8], "times_us": {"ring": [1]}})"),
      "world: must be a positive integer");
  expect_rejected(
      table(R"({"collective": "all_reduce", "world": 4, "ranks_per_host": 8, "transport": "shm",
                            "sizes": [8], "times_us": {"ring": [1]}})"),
      "more than the world size");
  expect_rejected(
      table(R"({"collective": "all_reduce", "world": 4, "ranks_per_host": 4, "transport": "ib",
                            "sizes": [8], "times_us": {"ring": [1]}})"),
      "must be \"shm\" or \"tcp\"");
  const std::string t =
      R"({"collective": "all_reduce", "world": 4, "ranks_per_host": 4, "transport": "shm",
                            "sizes": [8], "times_us": {"ring": [1]}})";
  expect_rejected(table(t + "," + t), "tables[1]: a second table for all_reduce world 4");
  expect_rejected(
      table(R"({"collective": "all_reduce", "world": 4, "ranks_per_host": 4, "transport": "shm",
                            "source": "guessed", "sizes": [8], "times_us": {"ring": [1]}})"),
      "source: must be \"measured\" or \"simulated\"");
  expect_rejected(
      table(R"({"collective": "all_reduce", "world": 4, "ranks_per_host": 4, "transport": "shm",
                            "calibration": {"alpha_us": 5, "beta_ns_per_byte": -1, "gamma_ns_per_byte": 1},
                            "sizes": [8], "times_us": {"ring": [1]}})"),
      "calibration.beta_ns_per_byte: must be a positive number");
  expect_rejected(
      table(R"({"collective": "all_reduce", "world": 4, "ranks_per_host": 4, "transport": "shm",
                            "calibration": {"alpha_us": 5}, "sizes": [8], "times_us": {"ring": [1]}})"),
      "calibration: missing field 'beta_ns_per_byte'");
  expect_rejected(
      table(R"({"collective": "all_reduce", "world": 4, "ranks_per_host": 4, "transport": "shm",
                            "sizes": [8], "times_us": {"ring": [1], "hierarchical": [1]}})"),
      "times_us.hierarchical: needs several hosts of several ranks");
  expect_rejected(
      table(R"({"collective": "broadcast", "world": 4, "ranks_per_host": 2, "transport": "tcp",
                            "sizes": [8], "times_us": {"hierarchical": [1]}})"),
      "only all_reduce, all_gather and reduce_scatter have a hierarchical composition");
  expect_rejected(
      table(R"({"collective": "all_gather", "world": 4, "ranks_per_host": 2, "transport": "tcp",
                            "sizes": [8], "times_us": {"hierarchical": [1]}})"),
      "must time at least one algorithm besides hierarchical");
}

TEST(TuningFile, AMissingFileIsNamed) {
  ScopedEnv file("SHOAL_TUNE_FILE", "/nonexistent/tune.json");
  try {
    Dispatcher::from_environment(Context{4, 4, Transport::shm});
    FAIL() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tune.json' cannot be read"),
              std::string::npos)
        << e.what();
  }
}

// ---- measured links ----

// Two regions, ranks alternating: 1 Gbit/s inside, 100 Mbit/s between.
tune::MeasuredLinks alternating_links(int p) {
  auto links = std::make_shared<tune::Links>();
  links->world = p;
  links->bandwidth.assign(static_cast<size_t>(p * p), 0);
  for (int i = 0; i < p; ++i)
    for (int j = 0; j < p; ++j)
      if (i != j) links->bandwidth[i * p + j] = i % 2 == j % 2 ? 125e6 : 12.5e6;
  return {links, std::make_shared<const std::vector<int>>(tune::ring_order(*links))};
}

TEST(Links, LargeCallsArePricedOnTheLinks) {
  const auto params = tune::default_cost_params(Transport::tcp);
  // Six ranks: link_ring crosses each pipe once, 5/3 n through it; rank order's ring 5 n; the
  // butterflies fold and cross more (tests/unit/test_links.cpp).
  const Dispatcher six(Context{6, 1, Transport::tcp}, params, nullptr, true, {},
                       alternating_links(6));
  EXPECT_EQ(pick(six, Collective::all_reduce, 64 << 20), "link_ring");
  EXPECT_EQ(six.choose(Collective::all_reduce, 64 << 20).source, Choice::Source::links);
  EXPECT_EQ(pick(six, Collective::reduce_scatter, 64 << 20), "link_ring");
  // Four ranks: halving and doubling sends n through a pipe, where any ring sends 1.5 n.
  const Dispatcher four(Context{4, 1, Transport::tcp}, params, nullptr, true, {},
                        alternating_links(4));
  EXPECT_EQ(pick(four, Collective::all_reduce, 64 << 20), "rabenseifner");
  // Small calls: latency decides, on the links too.
  EXPECT_NE(pick(six, Collective::all_reduce, 8), "link_ring");
  // SHOAL_DISPATCH=off: the first row, links or not.
  const Dispatcher off(Context{6, 1, Transport::tcp}, params, nullptr, false, {},
                       alternating_links(6));
  EXPECT_EQ(pick(off, Collective::all_reduce, 64 << 20), "ring");
}

// Four ranks on 200 Mbit/s links 40 ms apart (one way), as measure_links finds them: every call
// pays its chain of flights (ring 6, halving and doubling 4, recursive doubling 2), so a small
// call takes the row of fewest dependent steps and is priced at no less than its flights.
TEST(Links, MeasuredLatencyPricesEachRowsFlights) {
  auto links = std::make_shared<tune::Links>();
  links->world = 4;
  links->bandwidth.assign(16, 25e6);
  links->latency.assign(16, 0.04);
  for (int i = 0; i < 4; ++i) links->bandwidth[i * 5] = links->latency[i * 5] = 0;
  const tune::MeasuredLinks measured{
      links, std::make_shared<const std::vector<int>>(tune::ring_order(*links))};
  const Dispatcher d(Context{4, 1, Transport::tcp}, tune::default_cost_params(Transport::tcp),
                     nullptr, true, {}, measured);
  const Choice small = d.choose(Collective::all_reduce, 1024);
  EXPECT_EQ(small.source, Choice::Source::links);
  EXPECT_EQ(std::string(small.algorithm->name), "recursive_doubling");
  EXPECT_GE(small.predicted_s, 2 * 0.04);
  EXPECT_LT(small.predicted_s, 2 * 0.04 + 0.01);
  // Without latencies the same rates price a small ring call at its 6 steps of the default alpha.
  auto flat = std::make_shared<tune::Links>(*links);
  flat->latency.clear();
  const Dispatcher no_latency(Context{4, 1, Transport::tcp},
                              tune::default_cost_params(Transport::tcp), nullptr, true, {},
                              {flat, measured.ring_order});
  EXPECT_LT(no_latency.choose(Collective::all_reduce, 1024).predicted_s, 0.01);
}

// The direct rows (two_shot, direct) overlap the flights of the p-1 messages of a phase: where
// a flight is what a step costs they win, since the ring pays it 2(p-1) times; without a known
// flight they tie with the ring, which comes first, so no pick on a LAN changes.
TEST(DirectRows, LongFlightsTakeThemAndWithoutAFlightTheRingKeepsItsPlace) {
  auto is_direct = [](const Choice& c) {
    const std::string_view name = c.algorithm->name;
    return name == "two_shot" || name == "direct";
  };
  for (int world : {2, 3, 4, 8, 16, 64})
    for (Transport t : {Transport::shm, Transport::tcp}) {
      const Dispatcher d = model_only(world, t);
      for (Collective c :
           {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter})
        for (uint64_t bytes = 1; bytes <= (uint64_t{1} << 32); bytes *= 4)
          EXPECT_FALSE(is_direct(d.choose(c, bytes)))
              << algorithms::to_string(c) << " world " << world << " bytes " << bytes;
    }
  // 4 hosts 80 ms apart: alpha is the flight and 0.2 ms of overhead.
  algorithms::CostParams wan = tune::default_cost_params(Transport::tcp);
  wan.alpha = 0.0402;
  wan.beta = 1 / 25e6;
  wan.flight = 0.04;
  const Dispatcher d(Context{4, 1, Transport::tcp}, wan, nullptr);
  const uint64_t mib8 = 8 << 20;
  EXPECT_EQ(std::string(d.choose(Collective::all_reduce, mib8).algorithm->name), "two_shot");
  EXPECT_EQ(std::string(d.choose(Collective::all_gather, mib8).algorithm->name), "direct");
  EXPECT_EQ(std::string(d.choose(Collective::reduce_scatter, mib8).algorithm->name), "direct");
  // Two flights and 6 overheads beside the ring's bytes.
  const auto* ring = algorithms::find_algorithm(Collective::all_reduce, "ring");
  EXPECT_NEAR(ring->cost(4, mib8, wan) - d.choose(Collective::all_reduce, mib8).predicted_s,
              6 * 0.0402 - (2 * 0.04 + 6 * 0.0002), 1e-9);
  // A LAN's flight, however much of alpha it is: alpha there is mostly per-message overhead,
  // and the p-1 flows of a direct phase meet in each receiver's queue.
  algorithms::CostParams lan = wan;
  lan.alpha = 1.2e-3;
  lan.flight = 1e-3;
  for (Collective c : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter})
    EXPECT_FALSE(is_direct(Dispatcher(Context{4, 1, Transport::tcp}, lan, nullptr).choose(c, mib8)))
        << algorithms::to_string(c);
  // The fit keeps the flight it was given, never above alpha.
  const tune::CalibrationPlan plan = tune::calibration_plan(4, Transport::tcp, 0.08);
  const auto* ag_ring = algorithms::find_algorithm(Collective::all_gather, "ring");
  const algorithms::CostParams truth{0.0402, 1 / 25e6, 4e-11, 2e-10};
  tune::CalibrationTimes times{ag_ring->cost(4, plan.small_block * 4, truth),
                               ag_ring->cost(4, plan.large_block * 4, truth),
                               truth.gamma * static_cast<double>(plan.reduce_bytes), 0, 0.04};
  const auto floor = tune::default_cost_params(Transport::tcp);
  EXPECT_DOUBLE_EQ(tune::fit_cost_params(4, plan, times, floor).flight, 0.04);
  times.latency_s = 0.05;  // a flight longer than the calls: alpha rises to it
  const auto raised = tune::fit_cost_params(4, plan, times, floor);
  EXPECT_DOUBLE_EQ(raised.flight, raised.alpha);
  times.latency_s = 0;
  EXPECT_EQ(tune::fit_cost_params(4, plan, times, floor).flight, 0);
  // On measured links of 40 ms each way the flights come from the links.
  auto links = std::make_shared<tune::Links>();
  links->world = 4;
  links->bandwidth.assign(16, 25e6);
  links->latency.assign(16, 0.04);
  for (int i = 0; i < 4; ++i) links->bandwidth[i * 5] = links->latency[i * 5] = 0;
  const Dispatcher on_links(
      Context{4, 1, Transport::tcp}, tune::default_cost_params(Transport::tcp), nullptr, true, {},
      {links, std::make_shared<const std::vector<int>>(tune::ring_order(*links))});
  EXPECT_EQ(std::string(on_links.choose(Collective::all_reduce, mib8).algorithm->name), "two_shot");
  links->latency.assign(16, 1e-4);
  for (int i = 0; i < 4; ++i) links->latency[i * 5] = 0;
  const Dispatcher on_a_lan(
      Context{4, 1, Transport::tcp}, tune::default_cost_params(Transport::tcp), nullptr, true, {},
      {links, std::make_shared<const std::vector<int>>(tune::ring_order(*links))});
  EXPECT_FALSE(is_direct(on_a_lan.choose(Collective::all_reduce, mib8)));
}

// Calibration without timed calls (SHOAL_TUNE_CALIBRATE=latency): the defaults, alpha raised to
// the handshakes' flight, which the dispatcher then prices as it does a calibrated one.
TEST(Calibration, LatencyOnlyKeepsTheDefaultsWithTheFlight) {
  const algorithms::CostParams defaults = tune::default_cost_params(Transport::tcp);
  for (double none : {0.0, -1.0, std::nan("")}) {
    const algorithms::CostParams c = tune::latency_cost_params(Transport::tcp, none);
    EXPECT_EQ(c.alpha, defaults.alpha) << none;
    EXPECT_EQ(c.beta, defaults.beta) << none;
    EXPECT_EQ(c.flight, 0) << none;
  }
  const algorithms::CostParams wan = tune::latency_cost_params(Transport::tcp, 0.04);
  EXPECT_EQ(wan.alpha, 0.04);
  EXPECT_EQ(wan.flight, 0.04);
  EXPECT_EQ(wan.beta, defaults.beta);
  EXPECT_EQ(wan.gamma, defaults.gamma);
  EXPECT_EQ(wan.busy_gamma, defaults.busy_gamma);
  const Dispatcher d(Context{4, 1, Transport::tcp}, wan, nullptr);
  EXPECT_EQ(std::string(d.choose(Collective::all_reduce, 1 << 20).algorithm->name), "two_shot");
  // A flight below alpha leaves alpha alone.
  const double small = defaults.alpha / 2;
  EXPECT_EQ(tune::latency_cost_params(Transport::tcp, small).alpha, defaults.alpha);
  EXPECT_EQ(tune::latency_cost_params(Transport::tcp, small).flight, small);
}

TEST(Links, WithoutThemNoCallTakesTheRowsThatFollowThem) {
  for (int world : {2, 3, 4, 6, 8, 16, 64})
    for (Transport t : {Transport::shm, Transport::tcp}) {
      const Dispatcher d = model_only(world, t);
      for (Collective c :
           {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter})
        for (uint64_t bytes = 1; bytes <= (uint64_t{1} << 32); bytes *= 4)
          EXPECT_FALSE(d.choose(c, bytes).algorithm->follows_links)
              << algorithms::to_string(c) << " world " << world << " bytes " << bytes;
    }
  // A tuning file does not time them.
  TempFile file(R"({"format": "shoal-tune 1", "tables": [{"collective": "all_reduce", "world": 4,
      "ranks_per_host": 4, "transport": "shm", "sizes": [1024], "times_us": {"link_ring": [1]}}]})");
  try {
    tune::load_tuning_file(file.path);
    FAIL() << "accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("link_ring follows measured links"), std::string::npos)
        << e.what();
  }
}

// ---- learning on the job ----

TEST(Learner, ExploresInTurnThenKeepsTheFasterByTheAgreedTimes) {
  const auto* pick = algorithms::find_algorithm(Collective::all_reduce, "rabenseifner");
  const auto* ring = algorithms::find_algorithm(Collective::all_reduce, "ring");
  ASSERT_TRUE(pick && ring);
  tune::Learner l;
  const auto key = tune::Learner::key_of(Collective::all_reduce, 64 << 20);
  EXPECT_EQ(key, tune::Learner::key_of(Collective::all_reduce, (64 << 20) + 12345));
  EXPECT_NE(key, tune::Learner::key_of(Collective::all_reduce, 128 << 20));
  EXPECT_NE(key, tune::Learner::key_of(Collective::all_gather, 64 << 20));
  const double mine[] = {9.0, 4.5, 9.3, 4.6};        // rabenseifner and ring at 80 ms (cluster.md)
  constexpr int kTwo = 2 * tune::Learner::kSamples;  // two candidates, each kSamples times
  for (int i = 0; i < kTwo; ++i) {
    const auto turn = l.next(key, pick, ring);
    EXPECT_EQ(turn.row, i % 2 == 0 ? pick : ring) << i;
    EXPECT_EQ(turn.sample, i);
    EXPECT_FALSE(turn.decide);
    l.record(key, turn.sample, mine[i]);
  }
  EXPECT_EQ(l.samples(key), std::vector<double>(std::begin(mine), std::end(mine)));
  const auto settle = l.next(key, pick, ring);
  EXPECT_TRUE(settle.decide);
  EXPECT_EQ(settle.sample, -1);
  // The agreed times (each the slowest rank's) decide, not this rank's own.
  EXPECT_EQ(l.decide(key, {9.1, 4.7, 9.4, 4.8}), ring);
  for (int i = 0; i < 3; ++i) {
    const auto after = l.next(key, pick, ring);
    EXPECT_EQ(after.row, ring);
    EXPECT_EQ(after.sample, -1);
    EXPECT_FALSE(after.decide);
  }
  // The fastest call of each counts (one slow outlier does not sink a row); a tie keeps the pick.
  const auto small = tune::Learner::key_of(Collective::all_reduce, 1 << 20);
  for (int i = 0; i <= kTwo; ++i) l.next(small, pick, ring);
  EXPECT_EQ(l.decide(small, {5.0, 1.1, 1.0, 1.2}), pick);
  const auto tie = tune::Learner::key_of(Collective::all_reduce, 8 << 20);
  for (int i = 0; i <= kTwo; ++i) l.next(tie, pick, ring);
  EXPECT_EQ(l.decide(tie, {1.0, 1.0, 1.0, 1.0}), pick);
  const auto learned = l.learned();
  ASSERT_EQ(learned.size(), 3u);
  for (const auto& b : learned) EXPECT_TRUE(b.winner);
  EXPECT_THROW(l.decide(key, {1.0}), InternalError);
  // What exploring cost: each explored call's time beyond the winner's fastest.
  for (const auto& b : learned) {
    if (b.key != key) continue;
    EXPECT_NEAR(b.exploration_s, (9.1 - 4.7) + 0 + (9.4 - 4.7) + (4.8 - 4.7), 1e-9);
  }
  // A bucket an earlier job settled starts from its winner.
  const auto saved = tune::Learner::key_of(Collective::all_gather, 64 << 20);
  EXPECT_TRUE(l.fresh(saved));
  l.settle(saved, pick, ring, nullptr, ring);
  EXPECT_FALSE(l.fresh(saved));
  const auto first = l.next(saved, pick, ring);
  EXPECT_EQ(first.row, ring);
  EXPECT_EQ(first.sample, -1);
  EXPECT_FALSE(first.decide);
}

// A runner-up makes three candidates: explored in turn, twice each; the fastest wins, a tie
// keeps the earlier; the candidates are the bucket's first call's.
TEST(Learner, ARunnerUpIsExploredInTurnAndCanWin) {
  const auto* pick = algorithms::find_algorithm(Collective::all_reduce, "rabenseifner");
  const auto* ring = algorithms::find_algorithm(Collective::all_reduce, "ring");
  const auto* third = algorithms::find_algorithm(Collective::all_reduce, "recursive_doubling");
  ASSERT_TRUE(pick && ring && third);
  tune::Learner l;
  const auto key = tune::Learner::key_of(Collective::all_reduce, 1 << 20);
  const double mine[] = {3.0, 2.0, 1.0, 3.1, 2.1, 1.1};
  for (int i = 0; i < tune::Learner::kMaxExplored; ++i) {
    // Later calls name no runner-up: the first call's candidates stay.
    const auto turn = l.next(key, pick, ring, i == 0 ? third : nullptr);
    EXPECT_EQ(turn.row, i % 3 == 0 ? pick : i % 3 == 1 ? ring : third) << i;
    EXPECT_EQ(turn.sample, i);
    l.record(key, turn.sample, mine[i]);
  }
  EXPECT_EQ(l.samples(key), std::vector<double>(std::begin(mine), std::end(mine)));
  EXPECT_TRUE(l.next(key, pick, ring).decide);
  EXPECT_THROW(l.decide(key, {1.0, 2.0, 3.0, 4.0}), InternalError);  // two candidates' worth
  EXPECT_EQ(l.decide(key, {3.0, 2.0, 1.2, 3.1, 2.1, 1.0}), third);
  const auto b = l.learned(key);
  EXPECT_EQ(b.runner_up, third);
  EXPECT_EQ(b.best[0], 3.0);
  EXPECT_EQ(b.best[1], 2.0);
  EXPECT_EQ(b.best[2], 1.0);
  EXPECT_NEAR(b.exploration_s, 2.0 + 1.0 + 0.2 + 2.1 + 1.1 + 0, 1e-9);
  EXPECT_EQ(l.next(key, pick, ring).row, third);
  const auto tie = tune::Learner::key_of(Collective::all_reduce, 4 << 20);
  for (int i = 0; i <= tune::Learner::kMaxExplored; ++i) l.next(tie, pick, ring, third);
  EXPECT_EQ(l.decide(tie, {2.0, 1.0, 1.0, 2.0, 1.0, 1.0}), ring);
}

// The runner-up is the row priced cheapest after the pick and the alternative, offered only
// within kCloseCost of the model's best; never the pick or the alternative. The prices here
// are the rows' own cost formulas (4 hosts of one rank: no host traffic, no shared cores),
// the direct rows left out as the dispatcher leaves them out on short paths.
TEST(Dispatcher, TheRunnerUpIsTheNextCheapestRowWithinTheCloseFactor) {
  int named = 0, none = 0;
  for (double alpha : {3e-5, 1e-3})
    for (Collective c :
         {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter})
      for (uint64_t bytes = 1024; bytes <= (uint64_t{1} << 30); bytes *= 8) {
        algorithms::CostParams params = tune::default_cost_params(Transport::tcp);
        params.alpha = alpha;
        const Dispatcher d(Context{4, 1, Transport::tcp}, params, nullptr);
        const auto* pick = d.choose(c, bytes).algorithm;
        const auto* ring = algorithms::find_algorithm(c, "ring");
        double best = std::numeric_limits<double>::infinity(), second = best;
        const algorithms::AlgorithmInfo* want = nullptr;
        for (const auto& row : algorithms::registry()) {
          if (row.collective != c || row.overlaps_flights || row.follows_links) continue;
          const double t = row.cost(4, bytes, params);
          best = std::min(best, t);
          if (&row != pick && &row != ring && t < second) second = t, want = &row;
        }
        if (second > tune::Dispatcher::kCloseCost * best) want = nullptr;
        const auto* got = d.runner_up(c, bytes, pick, ring);
        EXPECT_EQ(got, want) << algorithms::to_string(c) << " " << bytes << " alpha " << alpha;
        (got ? named : none) += 1;
      }
  // Both outcomes occur over these sizes.
  EXPECT_GT(named, 0);
  EXPECT_GT(none, 0);
  // Disabled: none.
  const Dispatcher off(Context{4, 1, Transport::tcp}, tune::default_cost_params(Transport::tcp),
                       nullptr, false);
  EXPECT_EQ(off.runner_up(Collective::all_reduce, 1 << 20,
                          algorithms::find_algorithm(Collective::all_reduce, "rabenseifner"),
                          algorithms::find_algorithm(Collective::all_reduce, "ring")),
            nullptr);
}

// SHOAL_TUNE_SAVE's file: a round trip, a merge that replaces a bucket's entry and keeps the
// others, a missing file read as empty, and what is malformed named with where it is.
TEST(LearnedFile, RoundTripMergeAndErrors) {
  using tune::LearnedBucket;
  const auto* ring = algorithms::find_algorithm(Collective::all_reduce, "ring");
  const auto* raben = algorithms::find_algorithm(Collective::all_reduce, "rabenseifner");
  const auto* ag_ring = algorithms::find_algorithm(Collective::all_gather, "ring");
  const auto* ag_rd = algorithms::find_algorithm(Collective::all_gather, "recursive_doubling");
  ASSERT_TRUE(ring && raben && ag_ring && ag_rd);
  LearnedBucket a{
      Collective::all_reduce, 4, 1, tune::Transport::tcp, 26, raben, ring, nullptr, ring};
  a.pick_s = 9.0, a.alternative_s = 4.5, a.exploration_s = 9.3;
  LearnedBucket b{
      Collective::all_gather, 4, 1, tune::Transport::tcp, 23, ag_rd, ag_ring, nullptr, ag_rd};
  b.pick_s = 0.5, b.alternative_s = 0.6, b.exploration_s = 0.1;
  // A third candidate (the model's runner-up) that won.
  const auto* rd = algorithms::find_algorithm(Collective::all_reduce, "recursive_doubling");
  LearnedBucket c3{Collective::all_reduce, 4, 1, tune::Transport::tcp, 20, raben, ring, rd, rd};
  c3.pick_s = 0.3, c3.alternative_s = 0.4, c3.runner_up_s = 0.2, c3.exploration_s = 0.3;
  const auto back = tune::parse_learned_file(tune::learned_to_json({a, b, c3}), "x");
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back[0].runner_up, nullptr);
  EXPECT_EQ(back[2].runner_up, rd);
  EXPECT_EQ(back[2].winner, rd);
  EXPECT_NEAR(back[2].runner_up_s, 0.2, 1e-9);
  EXPECT_TRUE(tune::same_bucket(back[0], a));
  EXPECT_EQ(back[0].winner, ring);
  EXPECT_EQ(back[1].winner, ag_rd);
  EXPECT_NEAR(back[0].pick_s, 9.0, 1e-9);
  EXPECT_NEAR(back[1].exploration_s, 0.1, 1e-9);

  char dir[] = "/tmp/shoal-learned-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/learned.json";
  EXPECT_TRUE(tune::read_learned_file(path).empty());  // none yet
  tune::save_learned_file(path, {a});
  LearnedBucket a2 = a;
  a2.winner = raben;  // the network changed: the same bucket learned again
  tune::save_learned_file(path, {b, a2});
  const auto merged = tune::read_learned_file(path);
  ASSERT_EQ(merged.size(), 2u);
  EXPECT_EQ(merged[0].winner, raben);
  EXPECT_TRUE(tune::same_bucket(merged[1], b));

  auto fails = [](const std::string& text, const std::string& part) {
    try {
      tune::parse_learned_file(text, "bad.json");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
    }
  };
  const std::string good = tune::learned_to_json({a});
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  fails("{", "not JSON");
  fails(with("shoal-learned 1", "shoal-learned 9"), "format");
  fails(with("\"winner\": \"ring\"", "\"winner\": \"bruck\""), "buckets[0].winner");
  fails(with("\"winner\": \"ring\"", "\"winner\": \"recursive_doubling\""),
        "none of the candidates");
  fails(with("\"transport\": \"tcp\"", "\"transport\": \"udp\""), "buckets[0].transport");
  fails(with("\"collective\": \"all_reduce\"", "\"collective\": \"gather\""), "collective");
  fails(tune::learned_to_json({a, a}), "same bucket");
  // A file that cannot be parsed is left as it is.
  std::ofstream(path) << "{";
  EXPECT_THROW(tune::save_learned_file(path, {a}), InvalidArgumentError);
  std::ifstream kept(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "{");
  std::remove(path.c_str());
  std::remove((path + ".lock").c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace shoal
