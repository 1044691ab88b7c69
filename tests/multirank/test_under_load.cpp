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

#include <atomic>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm_impl.hpp"
#include "comm/spin.hpp"
#include "comm/topology.hpp"
#include "support/deaths.hpp"
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
          const auto ctx = shoal::detail::Internals::of(comm).tune_context();
          std::ostringstream out;
          const int want = bound ? 1 : CPU_COUNT(&mine);
          if (ctx.cores_per_host != want)
            out << "cores_per_host " << ctx.cores_per_host << ", not " << want << "; ";
          if (shoal::detail::Internals::of(comm).topology.cores_of_host != std::vector<int>{want})
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

// SHOAL_BIND=auto binds a rank nobody bound (torchrun's) to a CPU of its own: the i-th of the
// machine's common mask, only when every rank there has that mask, is its own process, and
// there are CPUs enough.
TEST(Binding, ChoosesTheRanksOwnCpuOnlyWhenNobodyBoundTheRanks) {
  EXPECT_EQ(comm::choose_bind_cpu({"f", "f"}, {10, 11}, 0), 0);
  EXPECT_EQ(comm::choose_bind_cpu({"f", "f"}, {10, 11}, 1), 1);
  EXPECT_EQ(comm::choose_bind_cpu({"0f", "0f"}, {10, 11}, 1), 5);   // CPUs 4-7
  EXPECT_EQ(comm::choose_bind_cpu({"a", "a"}, {10, 11}, 1), 3);     // CPUs 1 and 3
  EXPECT_EQ(comm::choose_bind_cpu({"01", "01"}, {10, 11}, 1), -1);  // CPU 4 alone: too few
  EXPECT_EQ(comm::choose_bind_cpu({"3", "3", "3"}, {1, 2, 3}, 2), -1);
  EXPECT_EQ(comm::choose_bind_cpu({"1", "2"}, {10, 11}, 0), -1);  // a launcher bound them
  EXPECT_EQ(comm::choose_bind_cpu({"f", "f"}, {10, 10}, 1), -1);  // ranks as threads
  EXPECT_EQ(comm::choose_bind_cpu({"f"}, {10}, 0), 0);
}

// Unbound ranks that are all the launcher started on the node (LOCAL_WORLD_SIZE, as torchrun
// says) end each on its own CPU, every thread of the process with it (SHOAL_BIND=auto, the
// default); with none, or without the launcher's count, they keep the affinity they had.
TEST(Binding, UnboundRanksBindTheirWholeProcessToACpuEach) {
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
  if (CPU_COUNT(&mine) < 2) GTEST_SKIP() << "one CPU: two ranks cannot have one each";
  struct Case {
    const char* policy;
    const char* local_world_size;  // nullptr: unset
    bool binds;
  };
  for (const Case k : {Case{"auto", "2", true}, Case{"none", "2", false},
                       Case{"auto", nullptr, false}, Case{"auto", "3", false}}) {
    const char* policy = k.policy;
    SCOPED_TRACE(std::string("SHOAL_BIND=") + policy +
                 " LOCAL_WORLD_SIZE=" + (k.local_world_size ? k.local_world_size : "unset"));
    ProcessJob job(2);
    auto results = job.run(
        [&](int rank, const ProcessJob& j) {
          setenv("SHOAL_BIND", policy, 1);
          if (k.local_world_size)
            setenv("LOCAL_WORLD_SIZE", k.local_world_size, 1);
          else
            unsetenv("LOCAL_WORLD_SIZE");
          std::atomic<bool> seen{false};
          std::thread before([&] {  // a thread of the user's, started before the communicator
            while (!seen) std::this_thread::sleep_for(1ms);
          });
          Communicator comm = Communicator::create(j.store(), rank, 2);
          std::ostringstream out;
          std::vector<int> cpus;  // every thread's
          for (const auto& tid : std::filesystem::directory_iterator("/proc/self/task")) {
            cpu_set_t set;
            const pid_t t = std::stoi(tid.path().filename().string());
            if (sched_getaffinity(t, sizeof set, &set) != 0) continue;
            int first = 0;
            while (!CPU_ISSET(first, &set)) ++first;
            cpus.push_back(CPU_COUNT(&set) == 1 ? first : -CPU_COUNT(&set));
          }
          seen = true;
          before.join();
          const int want =
              k.binds ? shoal::detail::Internals::of(comm).topology.bind_cpu : -CPU_COUNT(&mine);
          if (k.binds && want < 0) out << "not bound; ";
          for (int c : cpus)
            if (c != want) out << "a thread on " << c << ", not " << want << "; ";
          int64_t x = 1;
          comm.all_reduce(&x, 1, DataType::int64, ReduceOp::sum);
          if (x != 2) out << "all_reduce gave " << x << "; ";
          j.report(rank, out.str().empty() ? std::to_string(want) : out.str());
          return out.str().empty() ? 0 : 1;
        },
        60s);
    expect_every_rank_passed(results);
    if (k.binds) {
      EXPECT_NE(results[0].report, results[1].report) << "both ranks on one CPU";
    }
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

// A thread that shares its core with another runnable thread queues for it about half the time
// it wants it: thread_queues_for_cpu says so within a few of its 10 ms windows, and then the auto
// spin budget is the minimum. Both threads are bound to the same CPU and keep running.
TEST(SpinBudget, IsTheMinimumWhileTheThreadQueuesForItsCpu) {
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &mine)) ++cpu;
  std::atomic<bool> stop{false};
  auto pin = [cpu] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    return sched_setaffinity(0, sizeof one, &one) == 0;
  };
  std::thread hog([&] {
    if (!pin()) return;
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  bool queued = false, minimum = false;
  std::thread waiter([&] {
    if (!pin()) return;
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (!queued && std::chrono::steady_clock::now() < until)
      queued = comm::thread_queues_for_cpu();
    minimum = comm::spin_budget() == comm::kMinSpin;
  });
  waiter.join();
  stop = true;
  hog.join();
  EXPECT_TRUE(queued) << "a thread beside a busy one on its CPU did not queue for it in 5 s";
  EXPECT_TRUE(minimum) << "the auto spin budget is not the minimum while the thread queues";
}

}  // namespace
}  // namespace shoal::testing
