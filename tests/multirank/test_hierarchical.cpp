// Hierarchical all_reduce, all_gather and reduce_scatter on emulated hosts: ranks run as threads,
// each with a host identity of its own (comm::set_thread_host_id_for_testing), so ranks of one
// "host" share memory and the others talk TCP; results against support/values.hpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <iterator>
#include <mutex>

#include "comm/comm_impl.hpp"
#include "comm/topology.hpp"
#include "support/env.hpp"
#include "support/hosts.hpp"
#include "support/temp_file.hpp"
#include "support/values.hpp"

namespace shoal::testing {
namespace {

using algorithms::Collective;

// Before any thread starts: force the hierarchy (SHOAL_HIERARCHICAL is read once per
// communicator), and keep the emulated hosts' TCP on loopback whatever NICs the machine has.
const bool kEnvironment = [] {
  setenv("SHOAL_HIERARCHICAL", "on", 1);
  setenv("SHOAL_SOCKET_IFNAME", "lo", 0);
  return true;
}();

uint64_t hierarchical_calls(Communicator& c) {
  const auto& h = shoal::detail::Internals::of(c).hierarchy;
  return h ? h->calls() : 0;
}

std::string name(Collective k, DataType t, ReduceOp op, uint64_t count, bool in_place, bool async) {
  std::string s = std::string(algorithms::to_string(k)) + " " + std::string(to_string(t)) + " " +
                  std::string(to_string(op)) + " x" + std::to_string(count);
  return s + (in_place ? " in place" : "") + (async ? " async" : "");
}

// One call of `k` on every rank and a check of every element; failures name the case.
void check_call(Communicator& c, Collective k, DataType t, ReduceOp op, uint64_t count,
                bool in_place, bool async) {
  SCOPED_TRACE(name(k, t, op, count, in_place, async) + " on rank " + std::to_string(c.rank()));
  const int p = c.size(), r = c.rank();
  const size_t es = size_of(t);
  auto done = [&](Work w) {
    if (async) w.wait();
  };
  if (k == Collective::all_reduce) {
    auto send = bytes_for(count, t), recv = bytes_for(count, t);
    for (uint64_t i = 0; i < count; ++i) store(send.data(), i, t, value(r, i, t, op));
    void* result = in_place ? send.data() : recv.data();
    if (async)
      done(c.all_reduce_async(send.data(), result, count, t, op));
    else
      c.all_reduce(send.data(), result, count, t, op);
    for (uint64_t i = 0; i < count; ++i)
      ASSERT_EQ(load(result, i, t), expected(p, i, t, op)) << "element " << i;
  } else if (k == Collective::all_gather) {
    auto send = bytes_for(count, t), recv = bytes_for(count * p, t);
    uint8_t* mine = in_place ? recv.data() + r * count * es : send.data();
    for (uint64_t i = 0; i < count; ++i) store(mine, i, t, value(r, i, t, ReduceOp::sum));
    if (async)
      done(c.all_gather_async(mine, recv.data(), count, t));
    else
      c.all_gather(mine, recv.data(), count, t);
    for (int q = 0; q < p; ++q)
      for (uint64_t i = 0; i < count; ++i)
        ASSERT_EQ(load(recv.data(), q * count + i, t), as_stored(value(q, i, t, ReduceOp::sum), t))
            << "block " << q << " element " << i;
  } else {
    auto send = bytes_for(count * p, t), recv = bytes_for(count, t);
    for (uint64_t i = 0; i < count * p; ++i) store(send.data(), i, t, value(r, i, t, op));
    void* result = in_place ? send.data() + r * count * es : recv.data();
    if (async)
      done(c.reduce_scatter_async(send.data(), result, count, t, op));
    else
      c.reduce_scatter(send.data(), result, count, t, op);
    for (uint64_t i = 0; i < count; ++i)
      ASSERT_EQ(load(result, i, t), expected(p, r * count + i, t, op)) << "element " << i;
  }
}

// Every collective x dtype (or a subset) x op (all_gather: sum only) x count, in place and not,
// blocking and asynchronous alternately.
void run_matrix(Communicator& c, bool every_type) {
  static constexpr DataType kSomeTypes[] = {DataType::uint8, DataType::float16, DataType::int64,
                                            DataType::float32};
  std::vector<DataType> types(std::begin(kSomeTypes), std::end(kSomeTypes));
  if (every_type) types.assign(std::begin(kAllTypes), std::end(kAllTypes));
  int n = 0;
  for (Collective k : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter})
    for (DataType t : types)
      for (ReduceOp op : ops_for(t)) {
        if (k == Collective::all_gather && op != ReduceOp::sum) continue;
        for (uint64_t count : {uint64_t{1}, uint64_t{7}, uint64_t{1003}})
          for (bool in_place : {false, true})
            check_call(c, k, t, op, count, in_place, ++n % 2 == 0);
      }
  // Larger than the chunk and the shared-memory direct threshold.
  for (Collective k : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter})
    for (bool in_place : {false, true})
      check_call(c, k, DataType::float32, ReduceOp::sum, 300001, in_place, in_place);
}

struct Layout {
  const char* name;
  std::vector<int> host_of;
  bool hierarchical;  // whether the layout allows the hierarchy
  bool every_type;    // all dtypes, else a subset (test time)
};

class Hierarchical : public ::testing::TestWithParam<Layout> {};

TEST_P(Hierarchical, EveryCollectiveTypeOpAndCountMatchesTheReference) {
  const Layout& l = GetParam();
  std::string err = run_on_hosts(l.host_of, [&](Communicator& c) {
    run_matrix(c, l.every_type);
    if (l.hierarchical)
      EXPECT_GT(hierarchical_calls(c), 0u) << "the hierarchy was not used";
    else
      EXPECT_EQ(hierarchical_calls(c), 0u) << "an uneven layout must run the flat algorithms";
  });
  EXPECT_EQ(err, "");
}

INSTANTIATE_TEST_SUITE_P(Layouts, Hierarchical,
                         ::testing::Values(Layout{"hosts2x2", {0, 0, 1, 1}, true, true},
                                           Layout{"hosts2x3", {0, 0, 0, 1, 1, 1}, true, true},
                                           Layout{"hosts3x2", {0, 0, 1, 1, 2, 2}, true, true},
                                           Layout{"hosts4x2", {0, 0, 1, 1, 2, 2, 3, 3}, true, true},
                                           Layout{"interleaved2x2", {0, 1, 0, 1}, true, true},
                                           Layout{"uneven3plus1", {0, 0, 0, 1}, false, false}),
                         [](const ::testing::TestParamInfo<Layout>& info) {
                           return std::string(info.param.name);
                         });

// A hierarchical call and the parent's calls around it keep issue order, also asynchronously.
TEST(HierarchicalOrder, ParentCallsWaitForPendingHierarchicalWork) {
  std::string err = run_on_hosts({0, 0, 1, 1}, [](Communicator& c) {
    const int p = c.size();
    std::vector<int32_t> a(1 << 16, 1), b(1 << 16, 2);
    Work wa = c.all_reduce_async(std::span<int32_t>(a), ReduceOp::sum);  // helper thread
    Work wb = c.all_reduce_async(std::span<int32_t>(b), ReduceOp::sum);  // queued behind it
    // A flat collective on the parent reading `a` must see the all_reduce's result.
    c.reduce(a.data(), 1, DataType::int32, ReduceOp::sum, 0);
    EXPECT_TRUE(wa.test());
    EXPECT_TRUE(wb.test());
    EXPECT_EQ(a[0], c.rank() == 0 ? p * p : p);
    EXPECT_EQ(a.back(), p);
    EXPECT_EQ(b.back(), 2 * p);
    // And a hierarchical call issued behind pending parent work starts after it.
    std::vector<int32_t> x(1 << 16, c.rank() == 0 ? 1 : 5);  // the broadcast makes it all 1
    Work wx = c.broadcast_async(x.data(), x.size(), DataType::int32, 0);
    c.all_reduce(std::span<int32_t>(x), ReduceOp::sum);
    EXPECT_TRUE(wx.test());
    EXPECT_EQ(x.back(), p);
    EXPECT_EQ(hierarchical_calls(c), 3u);
  });
  EXPECT_EQ(err, "");
}

// Under SHOAL_HIERARCHICAL=auto on `hosts`: a 4 KB, a 1 MiB and a 4 MiB all_reduce, each
// checked, and the hierarchical calls counted after each.
std::string sizes_in_turn(const std::vector<int>& hosts, uint64_t after_small, uint64_t after_big,
                          uint64_t after_bigger) {
  setenv("SHOAL_HIERARCHICAL", "auto", 1);
  std::string err = run_on_hosts(hosts, [&](Communicator& c) {
    const auto p = static_cast<float>(c.size());
    std::vector<float> small(1000, 1.0f), big(1 << 18, 1.0f),
        bigger(1 << 20, 1.0f);  // 4 KB, 1 MiB, 4 MiB
    c.all_reduce(std::span<float>(small), ReduceOp::sum);
    EXPECT_EQ(hierarchical_calls(c), after_small);
    c.all_reduce(std::span<float>(big), ReduceOp::sum);
    EXPECT_EQ(hierarchical_calls(c), after_big);
    c.all_reduce(std::span<float>(bigger), ReduceOp::sum);
    EXPECT_EQ(hierarchical_calls(c), after_bigger);
    EXPECT_EQ(small.back(), p);
    EXPECT_EQ(big.back(), p);
    EXPECT_EQ(bigger.back(), p);
  });
  setenv("SHOAL_HIERARCHICAL", "on", 1);
  return err;
}

// CallOptions "hierarchical" takes the hierarchy whatever SHOAL_HIERARCHICAL says, with the
// reference result on every rank; the next plain call follows the setting again.
TEST(HierarchicalByName, CallOptionsTakesTheHierarchyWithTheSettingOff) {
  ScopedEnv off("SHOAL_HIERARCHICAL", "off");
  EXPECT_EQ(run_on_hosts({0, 0, 1, 1},
                         [](Communicator& c) {
                           const int p = c.size(), r = c.rank();
                           CallOptions hier;
                           hier.algorithm = "hierarchical";
                           std::vector<int64_t> in(1003), out(1003);
                           for (size_t i = 0; i < in.size(); ++i)
                             in[i] = static_cast<int64_t>(i) * (r + 1);
                           c.all_reduce(in.data(), out.data(), in.size(), DataType::int64,
                                        ReduceOp::sum, hier);
                           EXPECT_EQ(hierarchical_calls(c), 1u);
                           for (size_t i = 0; i < out.size(); ++i)
                             ASSERT_EQ(out[i], static_cast<int64_t>(i) * p * (p + 1) / 2) << i;
                           c.all_reduce(in.data(), out.data(), in.size(), DataType::int64,
                                        ReduceOp::sum);
                           EXPECT_EQ(hierarchical_calls(c), 1u);  // off: flat
                         }),
            "");
}

// Without a tuning file auto follows the cost model (tune::Dispatcher::hierarchy_cost), whose
// constants the settings replace here. On 3 hosts of 2 with slow NICs and free memory work the
// hierarchy sends 1.0 n through a host's NICs against the best flat row's 1.5 n: taken at
// every size, up to SHOAL_HIERARCHICAL_MAX_BYTES (2 MiB: not at 4 MiB). With costly messages
// it has more steps (2 in the host, 2 across) than recursive doubling (3): flat at every size.
TEST(HierarchicalAuto, FollowsTheCostModelWithinTheSizeBounds) {
  {
    ScopedEnv a("SHOAL_TUNE_ALPHA", "1e-9"), b("SHOAL_TUNE_BETA", "1e-6"),
        g("SHOAL_TUNE_BUSY_GAMMA", "1e-12");
    EXPECT_EQ(sizes_in_turn({0, 0, 1, 1, 2, 2}, 1, 2, 3), "");
    ScopedEnv max_bytes("SHOAL_HIERARCHICAL_MAX_BYTES", "2M");
    EXPECT_EQ(sizes_in_turn({0, 0, 1, 1, 2, 2}, 1, 2, 2), "");
  }
  ScopedEnv a("SHOAL_TUNE_ALPHA", "1e-3"), b("SHOAL_TUNE_BETA", "1e-12"),
      g("SHOAL_TUNE_BUSY_GAMMA", "1e-12");
  EXPECT_EQ(sizes_in_turn({0, 0, 1, 1, 2, 2}, 0, 0, 0), "");
}

// With a tuning file that times "hierarchical" (shoal-tune across hosts), auto follows the
// file where it covers the call, not the size range: here the file says the hierarchy wins at
// 4 KB (below the 1 MiB threshold) and at 1 MiB, and loses at 4 MiB (inside the range).
TEST(HierarchicalAuto, FollowsTheTuningFileWhereItHasHierarchicalTimes) {
  TempFile file(R"({"format": "shoal-tune 1", "tables": [
      {"collective": "all_reduce", "world": 4, "ranks_per_host": 2, "transport": "tcp",
       "sizes": [1024, 65536, 1048576, 4194304],
       "times_us": {"ring": [100, 100, 100, 100], "hierarchical": [10, 10, 10, 1000000]}}]})");
  ScopedEnv tune_file("SHOAL_TUNE_FILE", file.path);
  ScopedEnv as_measured("SHOAL_TUNE_SMOOTHING",
                        "0");  // a step, read between neighbours, not smoothed
  EXPECT_EQ(sizes_in_turn({0, 0, 1, 1}, 1, 2, 2), "");
}

TEST(HierarchicalSplit, SplitByHostGivesLocalAndRankAlignedGroups) {
  // Interleaved: host 0 has ranks 0 and 2, host 1 ranks 1 and 3.
  std::string err = run_on_hosts({0, 1, 0, 1}, [](Communicator& c) {
    ASSERT_EQ(c.num_hosts(), 2);
    HostSplit s = c.split_by_host();
    ASSERT_TRUE(s.local.valid());
    ASSERT_TRUE(s.rank_aligned.valid());
    EXPECT_EQ(s.local.size(), 2);
    EXPECT_EQ(s.local.rank(), c.rank() / 2);
    EXPECT_EQ(s.local.num_hosts(), 1);
    EXPECT_EQ(s.rank_aligned.size(), 2);
    EXPECT_EQ(s.rank_aligned.rank(), c.rank() % 2);
    EXPECT_EQ(s.rank_aligned.num_hosts(), 2);
    int32_t mine = c.rank(), peers[2];
    s.local.all_gather(&mine, peers, 1, DataType::int32);
    EXPECT_EQ(peers[0], c.rank() % 2);
    EXPECT_EQ(peers[1], c.rank() % 2 + 2);
    s.rank_aligned.all_gather(&mine, peers, 1, DataType::int32);
    EXPECT_EQ(peers[0], c.rank() / 2 * 2);
    EXPECT_EQ(peers[1], c.rank() / 2 * 2 + 1);
  });
  EXPECT_EQ(err, "");
}

// abort() on the communicator reaches the hierarchy's groups: a hierarchical all_reduce that
// waits there for an absent rank fails with AbortedError on every rank, long before the timeout
// (60 s), and so does the absent rank's late call.
TEST(HierarchicalFailures, AbortFailsAPendingHierarchicalCollectiveOnEveryRank) {
  std::mutex mu;
  std::vector<double> took(4, -1);
  std::string err = run_on_hosts({0, 0, 1, 1}, [&](Communicator& c) {
    std::vector<float> buf(1 << 20, 1.0f);
    c.all_reduce(std::span<float>(buf), ReduceOp::sum);  // makes the groups
    ASSERT_EQ(hierarchical_calls(c), 1u);
    const auto start = std::chrono::steady_clock::now();
    if (c.rank() == 3) std::this_thread::sleep_for(std::chrono::seconds(3));  // absent for now
    Work w = c.all_reduce_async(std::span<float>(buf), ReduceOp::sum);
    if (c.rank() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      c.abort();
    }
    EXPECT_THROW(w.wait(), AbortedError) << "rank " << c.rank();
    std::lock_guard<std::mutex> lock(mu);
    took[c.rank()] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
  EXPECT_EQ(err, "");
  for (int r = 0; r < 4; ++r) {
    EXPECT_GT(took[r], 0) << "rank " << r;
    // The absent rank's call comes 3 s late and fails at once.
    EXPECT_LT(took[r], r == 3 ? 4.5 : 2.0)
        << "rank " << r << " did not fail when the communicator was aborted";
  }
}

}  // namespace
}  // namespace shoal::testing
