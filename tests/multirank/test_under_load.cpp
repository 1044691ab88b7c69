// Waiting under load (comm/spin.hpp, comm/flat.cpp): collectives keep going while other
// processes hold the cores, and a rank that waits long still gives its core back. Ranks are
// forked processes, each bound to a core of its own as shoal-run binds them, beside one busy
// process per core (the case where a rank that sleeps or yields loses its core for a whole
// time slice). No timing is asserted: the figures belong to bench/compare.sh --load.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm_impl.hpp"
#include "comm/spin.hpp"
#include "comm/topology.hpp"
#include "support/processes.hpp"

namespace shoal::testing {
namespace {

using namespace std::chrono_literals;

// One busy loop per online core, killed when this goes out of scope.
class BusyProcesses {
 public:
  BusyProcesses() {
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    for (long i = 0; i < cores; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        alarm(300);  // never outlives a crashed test
        for (;;) __asm__ volatile("");
      }
      pids_.push_back(pid);
    }
  }
  ~BusyProcesses() {
    for (pid_t p : pids_) kill(p, SIGKILL);
    for (pid_t p : pids_) waitpid(p, nullptr, 0);
  }

 private:
  std::vector<pid_t> pids_;
};

// Every rank exited 0; each failure names its rank and what it reported.
void expect_every_rank_passed(const std::vector<RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + results[r].report);
    EXPECT_EQ(results[r].exit_code, 0);
  }
}

void bind_to_core(int rank) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(rank % static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)), &set);
  sched_setaffinity(0, sizeof set, &set);
}

// 10,000 small all_reduces (through the shared slots, on the calling thread) and 50 of 1 MiB
// (direct), every result checked, while a busy process holds every core.
TEST(UnderLoad, TenThousandAllReducesFinishBesideBusyProcesses) {
  BusyProcesses busy;
  ProcessJob job(2);
  auto results = job.run(
      [&](int rank, const ProcessJob& j) {
        bind_to_core(rank);
        Communicator comm = Communicator::create(j.store(), rank, 2);
        std::ostringstream errors;
        for (int i = 0; i < 10000 && errors.str().empty(); ++i) {
          int64_t v[2] = {rank + i, 3 * rank - i};
          comm.all_reduce(v, 2, DataType::int64, ReduceOp::sum);
          if (v[0] != 1 + 2 * i || v[1] != 3 - 2 * i)
            errors << "8 B all_reduce #" << i << " wrong; ";
        }
        std::vector<float> big(1 << 18);
        for (int i = 0; i < 50 && errors.str().empty(); ++i) {
          for (size_t k = 0; k < big.size(); ++k)
            big[k] = static_cast<float>((k + i + rank) % 1024);
          comm.all_reduce(std::span<float>(big), ReduceOp::sum);
          for (size_t k = 0; k < big.size(); ++k)
            if (big[k] != static_cast<float>((k + i) % 1024 + (k + i + 1) % 1024)) {
              errors << "1 MiB all_reduce #" << i << " wrong at " << k << "; ";
              break;
            }
        }
        j.report(rank, errors.str());
        return errors.str().empty() ? 0 : 1;
      },
      120s);
  expect_every_rank_passed(results);
}

// After a loop under load has raised the measured wake-up cost (and so the budget, where the
// cores are free), a rank that waits a second for its peer — a small all_reduce on its own thread,
// a large one, and an asynchronous one on the progress thread — burns a small fraction of that
// second: it polls for the budget (at most comm::kMaxSpin) and then sleeps.
TEST(UnderLoad, AWaitingRankUsesNoCpuAfterItsSpinBudget) {
  ProcessJob job(2);
  auto results = job.run(
      [&](int rank, const ProcessJob& j) {
        bind_to_core(rank);
        Communicator comm = Communicator::create(j.store(), rank, 2);
        {
          BusyProcesses busy;  // each rank has its own: their wake-ups are what is measured
          int64_t x = 1;
          for (int i = 0; i < 3000; ++i) comm.all_reduce(&x, 1, DataType::int64, ReduceOp::max);
        }
        std::ostringstream out;
        out << "spin budget " << comm::spin_budget().count() / 1000
            << " us after the loop (wake-up cost " << comm::measured_wake_cost().count() / 1000
            << " us); ";
        for (size_t count : {size_t{2}, size_t{1} << 20}) {
          for (bool async : {false, true}) {
            std::vector<float> buf(count, 1.0f);
            comm.barrier();
            if (rank == 1) {
              std::this_thread::sleep_for(1s);
              comm.all_reduce(std::span<float>(buf), ReduceOp::sum);
              continue;
            }
            const double start = process_cpu_seconds();
            if (async)
              comm.all_reduce_async(std::span<float>(buf), ReduceOp::sum).wait();
            else
              comm.all_reduce(std::span<float>(buf), ReduceOp::sum);
            const double used = process_cpu_seconds() - start;
            if (buf.front() != 2.0f || buf.back() != 2.0f)
              out << count << " floats: wrong result; ";
            // 1 MiB costs some CPU to reduce and copy; the wait itself is what this bounds.
            if (used > 0.1)
              out << count << " floats" << (async ? " (async)" : "") << ": " << used
                  << " CPU seconds while waiting about 1 s; ";
          }
        }
        j.report(rank, out.str());
        return out.str().find("floats") == std::string::npos ? 0 : 1;
      },
      120s);
  std::cout << "[   info   ] rank 0: " << results[0].report << "\n";
  expect_every_rank_passed(results);
}

// A host's cores are the union of its ranks' affinity masks, as a launcher's binding leaves
// them: three ranks bound to one core share it (every rank says so alike, and the dispatcher's
// context and the spin budget follow); unbound, they have every CPU this process may use.
TEST(SharedCores, TheHostsCoresAreTheUnionOfItsRanksAffinity) {
  EXPECT_EQ(comm::cores_in_union({"3", "c"}), 4);
  EXPECT_EQ(comm::cores_in_union({"1", "1", "1"}), 1);
  EXPECT_EQ(comm::cores_in_union({"f0", "01"}), 5);
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
  EXPECT_EQ(comm::cores_in_union({comm::affinity_mask()}), CPU_COUNT(&mine));
  for (bool bound : {true, false}) {
    SCOPED_TRACE(bound ? "bound to one core" : "unbound");
    ProcessJob job(3);
    auto results = job.run(
        [&](int rank, const ProcessJob& j) {
          if (bound) bind_to_core(0);
          Communicator comm = Communicator::create(j.store(), rank, 3);
          const auto ctx = comm.impl().tune_context();
          std::ostringstream out;
          const int want = bound ? 1 : CPU_COUNT(&mine);
          if (ctx.cores_per_host != want)
            out << "cores_per_host " << ctx.cores_per_host << ", not " << want << "; ";
          if (comm.impl().topology.cores_of_host != std::vector<int>{want})
            out << "cores_of_host wrong; ";
          if (tune::ranks_share_cores(ctx) != (3 > want)) out << "ranks_share_cores wrong; ";
          if (bound && comm::spin_budget() != comm::kMinSpin)
            out << "spin budget not the minimum; ";
          int64_t x = rank;
          comm.all_reduce(&x, 1, DataType::int64, ReduceOp::sum);
          if (x != 3) out << "all_reduce gave " << x << "; ";
          j.report(rank, out.str());
          return out.str().empty() ? 0 : 1;
        },
        60s);
    expect_every_rank_passed(results);
  }
}

// The auto budget follows the samples: twice their smoothed value, within its bounds; a sample
// beyond the cap (a preempted sleeper) counts as the cap.
TEST(SpinBudget, FollowsTheMeasuredWakeUpCostWithinItsBounds) {
  using std::chrono::nanoseconds;
  EXPECT_EQ(comm::budget_for_wake_cost(nanoseconds(1000)), nanoseconds(comm::kMinSpin));
  EXPECT_EQ(comm::budget_for_wake_cost(nanoseconds(300'000)), nanoseconds(600'000));
  EXPECT_EQ(comm::budget_for_wake_cost(nanoseconds(50'000'000)), nanoseconds(comm::kMaxSpin));
  for (int i = 0; i < 200; ++i) comm::note_wake_latency(300'000);
  EXPECT_NEAR(static_cast<double>(comm::measured_wake_cost().count()), 300e3, 3e3);
  for (int i = 0; i < 200; ++i) comm::note_wake_latency(50'000'000);
  EXPECT_NEAR(static_cast<double>(comm::measured_wake_cost().count()),
              static_cast<double>(nanoseconds(comm::kMaxSpin).count()), 3e3);
}

}  // namespace
}  // namespace shoal::testing
