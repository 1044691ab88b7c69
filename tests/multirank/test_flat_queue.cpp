// Queued broadcasts (comm/flat.hpp): among ranks of one host a broadcast of up to 4 KiB goes
// through its root's queue, which the root fills and leaves; only the root and each receiver
// wait for each other. Ranks here are forked processes: every byte crosses address spaces as
// in a real job and is compared with a reference built independently; a root must get ahead
// of receivers that have not even started, the calls after a queued one must still find the
// slots free, mismatched calls must still fail, and a dead root must still be reported. A
// barrier is a flat call there too, and must hold every rank until the last has entered; every
// region's pages must be in memory before the first call.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm_impl.hpp"
#include "comm/flat_memory.hpp"
#include "comm/spin.hpp"
#include "support/deaths.hpp"
#include "support/processes.hpp"

namespace shoal::testing {
namespace {

using namespace std::chrono_literals;

// Byte j of what rank `root` broadcasts in call i: distinct per call, root and offset.
uint8_t byte_of(int root, uint64_t i, uint64_t j) {
  uint64_t x = (static_cast<uint64_t>(root) << 48) ^ (i << 20) ^ j ^ 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return static_cast<uint8_t>(x ^ (x >> 31));
}

std::vector<uint8_t> payload(int root, uint64_t i, uint64_t bytes) {
  std::vector<uint8_t> v(bytes);
  for (uint64_t j = 0; j < bytes; ++j) v[j] = byte_of(root, i, j);
  return v;
}

// 3000 broadcasts of 1 B to 4 KiB from rotating roots, some out of place, interleaved with
// flat all_reduces (slots), direct all_gathers (read in place), barriers and 8 MiB all_reduces
// (direct), while one rank now and then sleeps so that the others run ahead: every result
// must be exact, and every broadcast must be flat.
TEST(FlatQueue, BroadcastsAmongOtherCallsMatchTheReference) {
  for (int ranks : {2, 3, 4}) {
    ProcessJob job(ranks);
    auto results = job.run(
        [&](int rank, const ProcessJob& j) {
          Communicator comm = Communicator::create(j.store(), rank, ranks);
          const uint64_t flat_before =
              shoal::detail::Internals::of(comm).planner->planned(comm::Path::flat);
          std::ostringstream errors;
          uint32_t flat_expected = 0;
          std::vector<float> small(16), big(2 << 20);
          std::vector<uint8_t> gathered(64 * 1024 * ranks);
          for (uint64_t i = 0; i < 3000 && errors.str().empty(); ++i) {
            const int root = static_cast<int>(i % ranks);
            const uint64_t bytes = 1 + (i * 389) % 4096;
            const auto want = payload(root, i, bytes);
            std::vector<uint8_t> buf = rank == root ? want : std::vector<uint8_t>(bytes, 0);
            if (i % 5 == 0) {
              std::vector<uint8_t> out(bytes, 0);
              comm.broadcast(buf.data(), out.data(), bytes, DataType::uint8, root);
              buf = out;
            } else {
              comm.broadcast(buf.data(), bytes, DataType::uint8, root);
            }
            ++flat_expected;
            if (buf != want)
              errors << "broadcast #" << i << " of " << bytes << " B from " << root << " wrong; ";
            if (rank == 1 && i % 97 == 0)
              std::this_thread::sleep_for(std::chrono::microseconds(200 + i % 700));
            if (i % 7 == 3) {
              for (size_t k = 0; k < small.size(); ++k)
                small[k] = static_cast<float>(rank + k + i % 11);
              comm.all_reduce(small.data(), small.size(), DataType::float32, ReduceOp::sum);
              ++flat_expected;
              for (size_t k = 0; k < small.size(); ++k)
                if (small[k] != static_cast<float>(ranks * (k + i % 11) + ranks * (ranks - 1) / 2))
                  errors << "all_reduce after broadcast #" << i << " wrong; ";
            }
            if (i % 211 == 5) {
              const auto mine = payload(rank, i, 64 * 1024);
              comm.all_gather(mine.data(), gathered.data(), mine.size(), DataType::uint8);
              for (int q = 0; q < ranks; ++q)
                if (!std::equal(gathered.begin() + q * mine.size(),
                                gathered.begin() + (q + 1) * mine.size(),
                                payload(q, i, mine.size()).begin()))
                  errors << "all_gather after broadcast #" << i << " wrong; ";
            }
            if (i % 331 == 7) comm.barrier();
            if (i % 997 == 11) {
              std::fill(big.begin(), big.end(), static_cast<float>(rank + 1));
              comm.all_reduce(big.data(), big.size(), DataType::float32, ReduceOp::sum);
              for (float v : big)
                if (v != static_cast<float>(ranks * (ranks + 1) / 2)) {
                  errors << "8 MiB all_reduce after broadcast #" << i << " wrong; ";
                  break;
                }
            }
          }
          comm.barrier();
          const uint64_t flat =
              shoal::detail::Internals::of(comm).planner->planned(comm::Path::flat) - flat_before;
          if (flat < flat_expected)
            errors << "only " << flat << " flat calls of at least " << flat_expected << "; ";
          j.report(rank, errors.str());
          return errors.str().empty() ? 0 : 1;
        },
        120s);
    for (int r = 0; r < ranks; ++r) {
      SCOPED_TRACE(std::to_string(ranks) + " ranks, rank " + std::to_string(r) + ": " +
                   results[r].report);
      EXPECT_EQ(results[r].exit_code, 0);
    }
  }
}

// The root returns from its broadcasts before any receiver has entered one: 15 of them (one
// less than the queue holds) while the receivers wait for a file it writes only afterwards.
// A broadcast that waited for its receivers would never let it write the file.
TEST(FlatQueue, ARootRunsAheadOfReceiversThatHaveNotStarted) {
  constexpr int kRanks = 3, kCalls = 15;
  char tmpl[] = "/tmp/shoal-queue-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string flag = dir + "/root-done";
  ProcessJob job(kRanks);
  auto results = job.run(
      [&](int rank, const ProcessJob& j) {
        Options o;
        o.timeout = 20s;
        Communicator comm = Communicator::create(j.store(), rank, kRanks, o);
        std::vector<std::vector<uint8_t>> got(kCalls);
        if (rank == 0) {
          for (int i = 0; i < kCalls; ++i) {
            auto data = payload(0, i, 100 + i);
            comm.broadcast(data.data(), data.size(), DataType::uint8, 0);
          }
          std::ofstream(flag) << "done";
        } else {
          const auto until = std::chrono::steady_clock::now() + 10s;
          while (!std::filesystem::exists(flag)) {
            if (std::chrono::steady_clock::now() > until) {
              j.report(rank,
                       "the root did not get through its broadcasts before any receiver started");
              return 1;
            }
            std::this_thread::sleep_for(1ms);
          }
          for (int i = 0; i < kCalls; ++i) {
            got[i].assign(100 + i, 0);
            comm.broadcast(got[i].data(), got[i].size(), DataType::uint8, 0);
            if (got[i] != payload(0, i, 100 + i)) {
              j.report(rank, "broadcast " + std::to_string(i) + " wrong");
              return 1;
            }
          }
        }
        comm.barrier();
        return 0;
      },
      60s);
  std::filesystem::remove_all(dir);
  for (int r = 0; r < kRanks; ++r)
    EXPECT_EQ(results[r].exit_code, 0) << "rank " << r << ": " << results[r].report;
}

// On one host's shared memory a barrier is a flat call, blocking in the caller's thread and
// through the engine alike (barrier_async), and it holds every rank until the last has
// entered: each round another rank enters 50 ms late, and no rank may leave before it entered
// (CLOCK_MONOTONIC: one clock for every process of the host).
TEST(FlatBarrier, NoRankLeavesBeforeTheLastHasEntered) {
  constexpr int kRanks = 3, kRounds = 3;
  ProcessJob job(kRanks);
  auto results = job.run(
      [&](int rank, const ProcessJob& j) {
        Communicator comm = Communicator::create(j.store(), rank, kRanks);
        const auto& planner = *shoal::detail::Internals::of(comm).planner;
        std::ostringstream times;
        for (bool async : {false, true})
          for (int round = 0; round < kRounds; ++round) {
            if (rank == round % kRanks) std::this_thread::sleep_for(50ms);
            const uint64_t flat_before = planner.planned(comm::Path::flat);
            const int64_t entered = comm::monotonic_ns();
            if (async)
              comm.barrier_async().wait();
            else
              comm.barrier();
            const int64_t left = comm::monotonic_ns();
            times << entered << ' ' << left << ' '
                  << planner.planned(comm::Path::flat) - flat_before << '\n';
          }
        j.report(rank, times.str());
        return 0;
      },
      60s);
  std::vector<std::vector<std::array<int64_t, 3>>> barriers(2 * kRounds);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(results[r].exit_code, 0) << "rank " << r << ": " << results[r].report;
    std::istringstream in(results[r].report);
    for (auto& b : barriers) {
      std::array<int64_t, 3> t{};
      ASSERT_TRUE(in >> t[0] >> t[1] >> t[2]) << "rank " << r << ": " << results[r].report;
      b.push_back(t);
    }
  }
  for (size_t i = 0; i < barriers.size(); ++i) {
    int64_t last_entered = 0;
    for (const auto& t : barriers[i]) last_entered = std::max(last_entered, t[0]);
    for (int r = 0; r < kRanks; ++r) {
      SCOPED_TRACE("barrier " + std::to_string(i) + ", rank " + std::to_string(r));
      EXPECT_GE(barriers[i][r][1], last_entered) << "left before the last rank entered";
      EXPECT_EQ(barriers[i][r][2], 1) << "not a flat call";
    }
  }
}

// Every page of every rank's flat region is in memory once the communicator exists (mincore:
// resident pages of the shared-memory file), so that no call of a new size pays the first
// touch of its slots and result areas inside the collective.
TEST(FlatMemory, EveryRegionIsResidentBeforeTheFirstCall) {
  constexpr int kRanks = 3;
  ProcessJob job(kRanks);
  auto results = job.run(
      [&](int rank, const ProcessJob& j) {
        Communicator comm = Communicator::create(j.store(), rank, kRanks);
        const comm::FlatMemory* flat = shoal::detail::Internals::of(comm).engine->flat();
        if (!flat) {
          j.report(rank, "no flat memory");
          return 1;
        }
        const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
        std::ostringstream missing;
        for (int r = 0; r < kRanks; ++r) {
          const auto base = reinterpret_cast<uintptr_t>(&flat->of(r).words());
          const uintptr_t first = base / page * page,
                          end = base + comm::FlatRegion::bytes_for(flat->slot_bytes());
          std::vector<unsigned char> in_core((end - first + page - 1) / page);
          if (mincore(reinterpret_cast<void*>(first), end - first, in_core.data()) != 0) {
            j.report(rank, std::string("mincore: ") + strerror(errno));
            return 1;
          }
          const auto absent = std::count_if(in_core.begin(), in_core.end(),
                                            [](unsigned char c) { return (c & 1) == 0; });
          if (absent > 0)
            missing << "rank " << r << "'s region: " << absent << " of " << in_core.size()
                    << " pages not in memory; ";
        }
        comm.barrier();
        j.report(rank, missing.str());
        return missing.str().empty() ? 0 : 1;
      },
      60s);
  for (int r = 0; r < kRanks; ++r)
    EXPECT_EQ(results[r].exit_code, 0) << "rank " << r << ": " << results[r].report;
}

// A receiver that asks for a different size is told so at that call; the root, which checks
// nobody, fails at its next call instead of waiting for ever.
TEST(FlatQueue, AReceiverWithAnotherCountFailsAndSoDoesTheRootNext) {
  constexpr int kRanks = 3;
  ProcessJob job(kRanks);
  auto results = job.run(
      [&](int rank, const ProcessJob& j) {
        Options o;
        o.timeout = 20s;
        Communicator comm = Communicator::create(j.store(), rank, kRanks, o);
        std::vector<uint8_t> buf(rank == 2 ? 200 : 100, 1);
        try {
          comm.broadcast(buf.data(), buf.size(), DataType::uint8, 0);
          if (rank == 2) {
            j.report(rank, "no error at the broadcast");
            return 2;
          }
          comm.barrier();
          j.report(rank, "no error");
          return 2;
        } catch (const MismatchError& e) {
          j.report(rank, std::string("mismatch: ") + e.what());
          return 0;
        } catch (const Error& e) {
          j.report(rank, std::string("error: ") + e.what());
          return rank == 2 ? 1 : 0;  // the others learn of it from rank 2's break: any error
        }
      },
      60s);
  for (int r = 0; r < kRanks; ++r)
    EXPECT_EQ(results[r].exit_code, 0) << "rank " << r << ": " << results[r].report;
}

// A root killed while its receivers wait for its next entries: each gets PeerFailureError
// naming it within seconds, and nothing is left in /dev/shm.
TEST(FlatQueue, AKilledRootRaisesPeerFailureOnItsReceivers) {
  constexpr int kRanks = 3, kRoot = 1;
  ProcessJob job(kRanks);
  auto results = job.run(
      [&](int rank, const ProcessJob& j) {
        Options o;
        o.timeout = 60s;  // detection must come far sooner than this
        Communicator comm = Communicator::create(j.store(), rank, kRanks, o);
        std::vector<uint8_t> buf(512, static_cast<uint8_t>(rank));
        comm.barrier();
        if (rank == kRoot) {
          std::thread killer([&] {
            std::this_thread::sleep_for(300ms);
            report_and_die(j, rank, shoal::detail::Internals::of(comm).comm_id);
          });
          for (;;) comm.broadcast(buf.data(), buf.size(), DataType::uint8, kRoot);
        }
        return expect_error<PeerFailureError>(rank, j, [&] {
          for (int i = 0; i < 100000000; ++i)
            comm.broadcast(buf.data(), buf.size(), DataType::uint8, kRoot);
        });
      },
      90s);
  expect_every_survivor_saw_the_death(results, kRoot);
}

}  // namespace
}  // namespace shoal::testing
