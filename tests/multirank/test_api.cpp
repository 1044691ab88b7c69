// The API surface: async Work (test, wait with a timeout, errors), typed spans, issue order,
// several communicators over one store, topology, unaligned buffers.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <ctime>
#include <future>
#include <mutex>
#include <numeric>
#include <thread>

#include "algorithms/registry.hpp"
#include "comm/comm_impl.hpp"
#include "support/processes.hpp"
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

// Callbacks see the finished result, run in the order they were added, and once; one added
// after completion runs at once on the adding thread.
TEST(Api, CompletionCallbacksRunOnceAfterTheResultIsThere) {
  std::string err = run_ranks(3, [](Communicator& c) {
    std::vector<float> v(1 << 16, static_cast<float>(c.rank() + 1));
    std::mutex m;
    std::vector<std::string> seen;
    Work w = c.all_reduce_async(std::span<float>(v), ReduceOp::sum);
    for (const char* name : {"first", "second"})
      w.on_complete([&, name](std::exception_ptr e) {
        std::lock_guard<std::mutex> lock(m);
        seen.push_back(std::string(name) + (e ? " error" : "") +
                       (v.back() == 6.0f && v.front() == 6.0f ? " done" : " early"));
      });
    w.wait();
    for (int i = 0; i < 1000 &&
                    [&] {
                      std::lock_guard<std::mutex> l(m);
                      return seen.size() < 2;
                    }();
         ++i)
      std::this_thread::sleep_for(1ms);  // the completing thread runs them after waking us
    const auto me = std::this_thread::get_id();
    std::thread::id ran_on;
    w.on_complete([&](std::exception_ptr) { ran_on = std::this_thread::get_id(); });
    EXPECT_EQ(ran_on, me);
    std::lock_guard<std::mutex> lock(m);
    EXPECT_EQ(seen, (std::vector<std::string>{"first done", "second done"}));
    EXPECT_THROW(w.on_complete(nullptr), InvalidArgumentError);
  });
  EXPECT_EQ(err, "");
}

TEST(Api, CompletionCallbacksGetTheError) {
  Options options;
  options.timeout = 20s;
  std::string err = run_ranks(
      2,
      [](Communicator& c) {
        if (c.rank() == 1) return;  // never joins: rank 0 aborts
        float x = 1;
        std::promise<std::exception_ptr> got;
        Work w = c.all_reduce_async(&x, &x, 1, DataType::float32, ReduceOp::sum);
        w.on_complete([&](std::exception_ptr e) { got.set_value(e); });
        c.abort();
        auto future = got.get_future();
        ASSERT_EQ(future.wait_for(10s), std::future_status::ready);
        auto e = future.get();
        ASSERT_TRUE(e != nullptr);
        EXPECT_THROW(std::rethrow_exception(e), AbortedError);
      },
      options);
  EXPECT_EQ(err, "");
}

// ---- all_to_all_v ----

// Rank i sends (i + 2j) % 3 elements to rank j (zero counts included), packed in rank order;
// element k of that block is i * 1000 + j * 100 + k.
TEST(AllToAllV, UnevenCountsReachEveryPeerAtItsDisplacement) {
  for (int n : {1, 2, 4}) {
    std::string err = run_ranks(n, [](Communicator& c) {
      const int p = c.size(), me = c.rank();
      auto count = [](int from, int to) { return static_cast<size_t>((from + 2 * to) % 3); };
      std::vector<size_t> sc(p), sd(p), rc(p), rd(p);
      size_t ns = 0, nr = 0;
      for (int j = 0; j < p; ++j) {
        sc[j] = count(me, j), sd[j] = ns, ns += sc[j];
        rc[j] = count(j, me), rd[j] = nr + 1, nr += rc[j] + 1;  // a gap before each block
      }
      std::vector<int64_t> send(ns), recv(nr, -1);
      for (int j = 0; j < p; ++j)
        for (size_t k = 0; k < sc[j]; ++k)
          send[sd[j] + k] = me * 1000 + j * 100 + static_cast<int64_t>(k);
      c.all_to_all_v(send.data(), sc, sd, recv.data(), rc, rd, DataType::int64);
      for (int j = 0; j < p; ++j) {
        EXPECT_EQ(recv[rd[j] - 1], -1) << "the gap before rank " << j << "'s block was written";
        for (size_t k = 0; k < rc[j]; ++k)
          EXPECT_EQ(recv[rd[j] + k], j * 1000 + me * 100 + static_cast<int64_t>(k))
              << j << " " << k;
      }
      // and the communicator goes on as usual
      int32_t x = 1;
      c.all_reduce(&x, 1, DataType::int32, ReduceOp::sum);
      EXPECT_EQ(x, p);
    });
    EXPECT_EQ(err, "") << n << " ranks";
  }
}

// A count that differs from the peer's (also zero against non-zero) fails on both sides of the
// pair with MismatchError instead of hanging; wrong span sizes are InvalidArgumentError.
TEST(AllToAllV, CountsThatDifferFromThePeersAreAMismatch) {
  Options options;
  options.timeout = 20s;
  for (size_t wrong : {size_t{3}, size_t{0}}) {
    std::string err = run_ranks(
        2,
        [wrong](Communicator& c) {
          std::vector<float> send(4, 1.0f), recv(8, 0.0f);
          std::vector<size_t> sc{2, 2}, sd{0, 2}, rc{2, 2}, rd{0, 4};
          if (c.rank() == 1) rc[0] = wrong;  // rank 0 sends it 2
          EXPECT_THROW(c.all_to_all_v(send.data(), sc, sd, recv.data(), rc, rd, DataType::float32),
                       MismatchError)
              << "rank " << c.rank() << ", receive count " << wrong;
          std::vector<size_t> short_counts{2};
          EXPECT_THROW(
              c.all_to_all_v(send.data(), short_counts, sd, recv.data(), rc, rd, DataType::float32),
              InvalidArgumentError);
        },
        options);
    EXPECT_EQ(err, "") << "receive count " << wrong;
  }
}

// Refused on every rank before anything is sent: the communicator stays usable.
TEST(Api, BitwiseOpsOnFloatsAreRefusedAndTheCommunicatorStaysUsable) {
  std::string err = run_ranks(2, [](Communicator& c) {
    std::vector<float> f(4, 1.0f), out(4, -1.0f);
    for (ReduceOp op : {ReduceOp::band, ReduceOp::bor, ReduceOp::bxor}) {
      EXPECT_THROW(c.all_reduce(std::span<float>(f), op), InvalidArgumentError);
      EXPECT_THROW(c.reduce(f.data(), out.data(), 4, DataType::float32, op, 0),
                   InvalidArgumentError);
      EXPECT_THROW(c.reduce_scatter(f.data(), out.data(), 2, DataType::float32, op),
                   InvalidArgumentError);
    }
    EXPECT_EQ(out, std::vector<float>(4, -1.0f));
    std::vector<int32_t> bits = {1 << c.rank(), 6, -1, c.rank() == 0 ? 0x0f : 0x3c};
    c.all_reduce(std::span<int32_t>(bits), ReduceOp::bor);
    EXPECT_EQ(bits, (std::vector<int32_t>{3, 6, -1, 0x3f}));
    c.all_reduce(std::span<int32_t>(bits), ReduceOp::bxor);
    EXPECT_EQ(bits, (std::vector<int32_t>{0, 0, 0, 0}));
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
  std::string err = run_ranks(
      2,
      [](Communicator& c) {
        int32_t x[4] = {1, 2, 3, 4};
        if (c.rank() == 0)
          EXPECT_THROW(c.split(0, 0), Error);
        else
          EXPECT_THROW(c.all_reduce(x, 4, DataType::int32, ReduceOp::sum), Error);
      },
      options);
  EXPECT_EQ(err, "");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 15s)
      << "the mismatch was found by the timeout";
  // A rank that gathers four integers where its peer splits: the split names the difference.
  err = run_ranks(
      2,
      [](Communicator& c) {
        int32_t x[4] = {1, 2, 3, 4}, all[8];
        if (c.rank() == 0)
          EXPECT_THROW(c.split(0, 0), MismatchError);
        else
          c.all_gather(x, all, 4, DataType::int32);
      },
      options);
  EXPECT_EQ(err, "");
}

// ---- Communicator::shrink with an exclusion list ----

// Rank 2 is alive and stays out; the others shrink without waiting for it: a coordinator that
// waited the full shrink wait (60 s) would leave the others' read of the members to time out
// (the communicators' 10 s).
TEST(Shrink, ExcludedLiveRanksAreLeftOutAndNotWaitedFor) {
  Options options;
  options.timeout = 10s;
  std::string err = run_ranks(
      4,
      [](Communicator& c) {
        if (c.rank() == 2) return;
        EXPECT_THROW(c.shrink({c.rank()}), InvalidArgumentError);
        EXPECT_THROW(c.shrink({4}), InvalidArgumentError);
        Communicator rest = c.shrink({2}, 60s);
        ASSERT_EQ(rest.size(), 3);
        EXPECT_EQ(rest.rank(), c.rank() < 2 ? c.rank() : c.rank() - 1);
        int32_t mine = c.rank(), all[3] = {-1, -1, -1};
        rest.all_gather(&mine, all, 1, DataType::int32);
        EXPECT_EQ(std::vector<int32_t>(all, all + 3), (std::vector<int32_t>{0, 1, 3}));
      },
      options);
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
        SCOPED_TRACE(std::string(algorithms::to_string(row.collective)) + ":" + call.algorithm +
                     " n=" + std::to_string(n));
        if (row.collective == algorithms::Collective::all_reduce) {
          std::vector<int32_t> in(n), out(n);
          for (size_t i = 0; i < n; ++i) in[i] = static_cast<int32_t>(i) * (r + 1);
          c.all_reduce(in.data(), out.data(), n, DataType::int32, ReduceOp::sum, call);
          for (size_t i = 0; i < n; i += 997)
            EXPECT_EQ(out[i], static_cast<int32_t>(i) * p * (p + 1) / 2);
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
    EXPECT_GE(forced_calls, 2 * 10)
        << "ring, recursive, Rabenseifner, Bruck, Swing, binomial... for three collectives";
  });
  EXPECT_EQ(err, "");
}

TEST(CallOptions, DifferentAlgorithmsOnTwoRanksAreAMismatchAndUnknownNamesAreRejected) {
  Options options;
  options.timeout = 20s;
  std::string err = run_ranks(
      2,
      [](Communicator& c) {
        std::vector<float> x(100000, 1.0f);
        CallOptions bad;
        bad.algorithm = "no_such_algorithm";
        EXPECT_THROW(
            c.all_reduce(x.data(), x.data(), x.size(), DataType::float32, ReduceOp::sum, bad),
            InvalidArgumentError);
        c.all_reduce(x.data(), x.data(), x.size(), DataType::float32,
                     ReduceOp::sum);  // still usable
        EXPECT_EQ(x[0], 2.0f);
        CallOptions mine;
        mine.algorithm = c.rank() == 0 ? "ring" : "rabenseifner";
        EXPECT_THROW(
            c.all_reduce(x.data(), x.data(), x.size(), DataType::float32, ReduceOp::sum, mine),
            MismatchError);
      },
      options);
  EXPECT_EQ(err, "");
}

// CallOptions can name a path instead of a row: "flat" runs the call through the shared slots
// or the direct path (counted by the planner) with the reference result; "hierarchical" on one
// host is refused on every rank before anything is sent, and the communicator stays usable.
TEST(CallOptions, APathByNameRunsThereOrIsRefusedWhereTheCallCannotTakeIt) {
  std::string err = run_ranks(3, [](Communicator& c) {
    const int p = c.size(), r = c.rank();
    const auto& planner = *shoal::detail::Internals::of(c).planner;
    CallOptions flat;
    flat.algorithm = "flat";
    for (size_t n : {size_t{7}, size_t{300000}}) {  // in the slots, and direct beyond them
      std::vector<int32_t> in(n), out(n);
      for (size_t i = 0; i < n; ++i) in[i] = static_cast<int32_t>(i % 1000) * (r + 1);
      const uint64_t before = planner.planned(shoal::comm::Path::flat);
      c.all_reduce(in.data(), out.data(), n, DataType::int32, ReduceOp::sum, flat);
      EXPECT_EQ(planner.planned(shoal::comm::Path::flat), before + 1) << n;
      for (size_t i = 0; i < n; i += 997)
        EXPECT_EQ(out[i], static_cast<int32_t>(i % 1000) * p * (p + 1) / 2) << n;
    }
    CallOptions hier;
    hier.algorithm = "hierarchical";
    std::vector<float> x(1000, 1.0f);
    try {
      c.all_reduce(x.data(), x.data(), x.size(), DataType::float32, ReduceOp::sum, hier);
      ADD_FAILURE() << "one host: no hierarchy to take";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("'hierarchical' needs"), std::string::npos) << e.what();
    }
    c.all_reduce(x.data(), x.data(), x.size(), DataType::float32, ReduceOp::sum);
    EXPECT_EQ(x[0], static_cast<float>(p));  // still usable: nothing was sent
  });
  EXPECT_EQ(err, "");
}

}  // namespace
}  // namespace shoal::testing
