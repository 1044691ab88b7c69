// The API surface: async Work (test, wait with a timeout, errors), typed spans, issue order,
// several communicators over one store, topology, unaligned buffers.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <ctime>
#include <numeric>
#include <thread>

#include "algorithms/registry.hpp"
#include "support/ranks.hpp"

namespace shoal::testing {
namespace {

using namespace std::chrono_literals;

TEST(Api, AsyncWorkCompletesInIssueOrderAndReportsState) {
  std::string err = run_ranks(3, [](Communicator& c) {
    const int p = c.size();
    std::vector<std::vector<int32_t>> bufs(8, std::vector<int32_t>(4096));
    std::vector<Work> works;
    for (int k = 0; k < 8; ++k) {
      std::fill(bufs[k].begin(), bufs[k].end(), c.rank() + k);
      works.push_back(c.all_reduce_async(std::span<int32_t>(bufs[k]), ReduceOp::sum));
    }
    // Completion is signalled in issue order: when the last is done, all are.
    works.back().wait();
    for (auto& w : works) EXPECT_TRUE(w.test());
    for (int k = 0; k < 8; ++k) {
      EXPECT_TRUE(works[k].succeeded());
      EXPECT_EQ(bufs[k][4095], p * (p - 1) / 2 + p * k);
    }
  });
  EXPECT_EQ(err, "");
}

// Rank 1 joins only once rank 0 has seen its wait time out (an event, not a head start that a
// loaded machine can eat).
TEST(Api, WaitWithTimeoutReturnsFalseUntilThePeerJoins) {
  std::atomic<bool> timed_out{false};
  std::string err = run_ranks(2, [&](Communicator& c) {
    float x = 1;
    if (c.rank() == 0) {
      Work w = c.all_reduce_async(&x, 1, DataType::float32, ReduceOp::sum);
      EXPECT_FALSE(w.wait(100ms));
      EXPECT_FALSE(w.test());
      EXPECT_EQ(w.error(), nullptr);
      timed_out = true;
      EXPECT_TRUE(w.wait(20s));
      EXPECT_EQ(x, 2.0f);
    } else {
      for (int i = 0; i < 20000 && !timed_out; ++i)
        std::this_thread::sleep_for(1ms);  // bounded: 20 s
      EXPECT_TRUE(timed_out) << "rank 0 never got past its timed wait";
      c.all_reduce(&x, 1, DataType::float32, ReduceOp::sum);
    }
  });
  EXPECT_EQ(err, "");
}

TEST(Api, TypedSpansInferTypeAndCount) {
  std::string err = run_ranks(2, [](Communicator& c) {
    std::vector<double> send(5, c.rank() + 1.0), recv(10);
    c.all_gather(std::span<const double>(send), std::span<double>(recv));
    EXPECT_EQ(recv[0], 1.0);
    EXPECT_EQ(recv[9], 2.0);
    std::vector<bfloat16_t> h(3, bfloat16_t(1.5f));
    c.all_reduce(std::span<bfloat16_t>(h), ReduceOp::sum);
    EXPECT_EQ(static_cast<float>(h[2]), 3.0f);
    std::vector<int64_t> rs_in(4, 10), rs_out(2);
    c.reduce_scatter(std::span<const int64_t>(rs_in), std::span<int64_t>(rs_out), ReduceOp::max);
    EXPECT_EQ(rs_out[1], 10);
    EXPECT_THROW(c.all_gather(std::span<const double>(send), std::span<double>(recv).first(9)),
                 InvalidArgumentError);
  });
  EXPECT_EQ(err, "");
}

TEST(Api, UnalignedBuffersReduceCorrectly) {
  std::string err = run_ranks(3, [](Communicator& c) {
    std::vector<uint8_t> raw(8 * 1001 + 3);
    auto* p = raw.data() + 3;  // float64 at an odd address
    for (int i = 0; i < 1001; ++i) {
      double v = i + c.rank();
      std::memcpy(p + 8 * i, &v, 8);
    }
    c.all_reduce(p, 1001, DataType::float64, ReduceOp::sum);
    double last;
    std::memcpy(&last, p + 8 * 1000, 8);
    EXPECT_EQ(last, 3 * 1000.0 + 3);
  });
  EXPECT_EQ(err, "");
}

TEST(Api, SeveralCommunicatorsOverOneStoreStayApart) {
  auto server = make_server_store();
  std::vector<std::thread> ts;
  std::atomic<int> ok{0};
  for (int r = 0; r < 2; ++r)
    ts.emplace_back([&, r] {
      auto store = std::make_shared<TcpStore>("127.0.0.1", server->port(), TcpStore::Options{});
      Communicator a = Communicator::create(store, r, 2);
      Communicator b = Communicator::create(store, r, 2);
      int x = 1, y = 10;
      Work wa = a.all_reduce_async(&x, 1, DataType::int32, ReduceOp::sum);
      b.all_reduce(&y, 1, DataType::int32, ReduceOp::sum);
      wa.wait();
      if (x == 2 && y == 20 && a.local_size() == 2 && a.num_hosts() == 1) ++ok;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok.load(), 2);
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Waiting respects the cores: a rank that waits a second for a late peer — in a small
// all_reduce on its own thread (futex), and in a large one on the progress thread (epoll or
// doorbell) — burns far less than a second of CPU.
TEST(Api, WaitingForALatePeerUsesLittleCpu) {
  for (size_t count : {size_t{4}, size_t{1} << 20}) {
    SCOPED_TRACE(std::to_string(count) + " floats");
    double used = 0;
    std::string err = run_ranks(2, [&](Communicator& c) {
      std::vector<float> buf(count, 1.0f);
      c.barrier();
      if (c.rank() == 1) {
        std::this_thread::sleep_for(1s);
      } else {
        const double start = process_cpu_seconds();
        std::this_thread::sleep_for(50ms);  // let rank 1 fall asleep first
        c.all_reduce(std::span<float>(buf), ReduceOp::sum);
        used = process_cpu_seconds() - start;  // both ranks' threads: rank 1 only sleeps
        return;
      }
      c.all_reduce(std::span<float>(buf), ReduceOp::sum);
    });
    EXPECT_EQ(err, "");
    EXPECT_LT(used, 0.3) << "CPU seconds burnt while waiting about 1 s";
  }
}

TEST(Api, DestroyingWaitsForPendingWork) {
  auto server = make_server_store();
  std::vector<std::thread> ts;
  std::atomic<int> ok{0};
  for (int r = 0; r < 2; ++r)
    ts.emplace_back([&, r] {
      std::vector<float> big(1 << 20, 1.0f);  // outlives the communicator, as the API requires
      {
        auto store = std::make_shared<TcpStore>("127.0.0.1", server->port(), TcpStore::Options{});
        Communicator c = Communicator::create(store, r, 2);
        Work w = c.all_reduce_async(std::span<float>(big), ReduceOp::sum);
        (void)w;  // not waited: destroying the communicator must finish it cleanly
      }
      if (big.front() == 2.0f && big.back() == 2.0f) ++ok;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok.load(), 2);
}

// ---- Communicator::split ----

TEST(Split, EvenAndOddRanksFormTwoCommunicatorsThatRunAtOnce) {
  std::string err = run_ranks(5, [](Communicator& c) {
    Communicator half = c.split(c.rank() % 2, c.rank());
    ASSERT_TRUE(half.valid());
    EXPECT_EQ(half.size(), c.rank() % 2 == 0 ? 3 : 2);
    EXPECT_EQ(half.rank(), c.rank() / 2);
    // Both children and the parent busy at the same time.
    std::vector<int32_t> big(1 << 18, c.rank());
    Work w = half.all_reduce_async(std::span<int32_t>(big), ReduceOp::sum);
    int32_t x = 1;
    c.all_reduce(&x, 1, DataType::int32, ReduceOp::sum);
    w.wait();
    EXPECT_EQ(x, 5);
    EXPECT_EQ(big.back(), c.rank() % 2 == 0 ? 0 + 2 + 4 : 1 + 3);
  });
  EXPECT_EQ(err, "");
}

TEST(Split, KeysOrderTheNewRanks) {
  std::string err = run_ranks(4, [](Communicator& c) {
    Communicator reversed = c.split(7, -c.rank());
    EXPECT_EQ(reversed.rank(), 3 - c.rank());
    int32_t mine = c.rank(), all[4];
    reversed.all_gather(&mine, all, 1, DataType::int32);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(all[i], 3 - i);
    // Equal keys: the parent's order decides.
    Communicator same = c.split(0, 0);
    EXPECT_EQ(same.rank(), c.rank());
  });
  EXPECT_EQ(err, "");
}

TEST(Split, NoColorGivesAnEmptyCommunicator) {
  std::string err = run_ranks(3, [](Communicator& c) {
    Communicator sub = c.split(c.rank() == 1 ? Communicator::kNoColor : 0, 0);
    if (c.rank() == 1) {
      EXPECT_FALSE(sub.valid());
    } else {
      ASSERT_TRUE(sub.valid());
      EXPECT_EQ(sub.size(), 2);
      EXPECT_EQ(sub.rank(), c.rank() / 2);
      float v = 1;
      sub.all_reduce(&v, 1, DataType::float32, ReduceOp::sum);
      EXPECT_EQ(v, 2.0f);
    }
    c.barrier();  // the parent still works for everyone
  });
  EXPECT_EQ(err, "");
}

TEST(Split, NestedSplitsAndRepeatedSplitsStayApart) {
  std::string err = run_ranks(6, [](Communicator& c) {
    Communicator half = c.split(c.rank() / 3, c.rank());          // {0,1,2} {3,4,5}
    Communicator pair = half.split(half.rank() == 2 ? 1 : 0, 0);  // {0,1} {2} in each half
    Communicator again = c.split(c.rank() / 3, c.rank());         // a second split, same colors
    EXPECT_EQ(pair.size(), half.rank() == 2 ? 1 : 2);
    int32_t v = c.rank(), w = c.rank();
    pair.all_reduce(&v, 1, DataType::int32, ReduceOp::sum);
    again.all_reduce(&w, 1, DataType::int32, ReduceOp::max);
    const int base = c.rank() / 3 * 3;
    EXPECT_EQ(v, half.rank() == 2 ? c.rank() : 2 * base + 1);
    EXPECT_EQ(w, base + 2);
  });
  EXPECT_EQ(err, "");
}

TEST(Split, AMismatchedCallFailsInsteadOfHanging) {
  Options options;
  options.timeout = 20s;
  const auto start = std::chrono::steady_clock::now();
  std::string err = run_ranks(2, [](Communicator& c) {
    int32_t x[4] = {1, 2, 3, 4};
    if (c.rank() == 0) EXPECT_THROW(c.split(0, 0), Error);
    else EXPECT_THROW(c.all_reduce(x, 4, DataType::int32, ReduceOp::sum), Error);
  }, options);
  EXPECT_EQ(err, "");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 15s) << "the mismatch was found by the timeout";
  // A rank that gathers four integers where its peer splits: the split names the difference.
  err = run_ranks(2, [](Communicator& c) {
    int32_t x[4] = {1, 2, 3, 4}, all[8];
    if (c.rank() == 0) EXPECT_THROW(c.split(0, 0), MismatchError);
    else c.all_gather(x, all, 4, DataType::int32);
  }, options);
  EXPECT_EQ(err, "");
}

// CallOptions::algorithm runs the named registry row for one call: every row of the three
// collectives gives the reference result (small sizes that would otherwise take the flat path
// included), ranks naming different rows get MismatchError, an unknown name InvalidArgumentError.
TEST(CallOptions, EveryNamedAlgorithmRunsTheCallCorrectly) {
  std::string err = run_ranks(3, [](Communicator& c) {
    const int p = c.size(), r = c.rank();
    int forced_calls = 0;
    for (const auto& row : algorithms::registry()) {
      CallOptions call;
      call.algorithm = std::string(row.name);
      for (size_t n : {size_t{7}, size_t{50000}}) {
        SCOPED_TRACE(std::string(algorithms::to_string(row.collective)) + ":" + call.algorithm + " n=" +
                     std::to_string(n));
        if (row.collective == algorithms::Collective::all_reduce) {
          std::vector<int32_t> in(n), out(n);
          for (size_t i = 0; i < n; ++i) in[i] = static_cast<int32_t>(i) * (r + 1);
          c.all_reduce(in.data(), out.data(), n, DataType::int32, ReduceOp::sum, call);
          for (size_t i = 0; i < n; i += 997) EXPECT_EQ(out[i], static_cast<int32_t>(i) * p * (p + 1) / 2);
        } else if (row.collective == algorithms::Collective::all_gather) {
          std::vector<int32_t> in(n, r + 10), out(n * p);
          c.all_gather_async(in.data(), out.data(), n, DataType::int32, call).wait();
          for (int q = 0; q < p; ++q) EXPECT_EQ(out[q * n + n - 1], q + 10);
        } else if (row.collective == algorithms::Collective::reduce_scatter) {
          std::vector<int32_t> in(n * p), out(n);
          for (size_t i = 0; i < n * p; ++i) in[i] = static_cast<int32_t>(i % 1000) + r;
          c.reduce_scatter(in.data(), out.data(), n, DataType::int32, ReduceOp::sum, call);
          for (size_t i = 0; i < n; i += 991)
            EXPECT_EQ(out[i], p * static_cast<int32_t>((r * n + i) % 1000) + p * (p - 1) / 2);
        } else {
          continue;
        }
        ++forced_calls;
      }
    }
    EXPECT_GE(forced_calls, 2 * 10) << "ring, recursive, Rabenseifner, Bruck, Swing, binomial... for three collectives";
  });
  EXPECT_EQ(err, "");
}

TEST(CallOptions, DifferentAlgorithmsOnTwoRanksAreAMismatchAndUnknownNamesAreRejected) {
  Options options;
  options.timeout = 20s;
  std::string err = run_ranks(2, [](Communicator& c) {
    std::vector<float> x(100000, 1.0f);
    CallOptions bad;
    bad.algorithm = "no_such_algorithm";
    EXPECT_THROW(c.all_reduce(x.data(), x.data(), x.size(), DataType::float32, ReduceOp::sum, bad),
                 InvalidArgumentError);
    c.all_reduce(x.data(), x.data(), x.size(), DataType::float32, ReduceOp::sum);  // still usable
    EXPECT_EQ(x[0], 2.0f);
    CallOptions mine;
    mine.algorithm = c.rank() == 0 ? "ring" : "rabenseifner";
    EXPECT_THROW(c.all_reduce(x.data(), x.data(), x.size(), DataType::float32, ReduceOp::sum, mine), MismatchError);
  }, options);
  EXPECT_EQ(err, "");
}

}  // namespace
}  // namespace shoal::testing
