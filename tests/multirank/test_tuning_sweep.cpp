// The tuning sweep (comm/tuning_sweep.hpp), shoal-tune's measurements as library code: one table
// per collective and world with every registry row at every size, the same on the ranks that
// measured it, a file the dispatcher loads; bad options fail alike on every rank.
#include <gtest/gtest.h>

#include <array>
#include <mutex>
#include <string>
#include <vector>

#include "algorithms/registry.hpp"
#include "comm/tuning_sweep.hpp"
#include "support/ranks.hpp"

namespace shoal::comm {
namespace {

using algorithms::Collective;
using testing::run_ranks;

// What the cost models count for a float32 call of the size requested: whole elements per rank.
uint64_t model_bytes_of(Collective c, uint64_t requested, int world) {
  const uint64_t per_element = c == Collective::all_reduce ? 4 : 4 * static_cast<uint64_t>(world);
  return requested / per_element * per_element;
}

TEST(TuningSweep, EveryRowOfEveryCollectiveAtEverySizeForEachWorld) {
  constexpr int kRanks = 3;
  SweepOptions o;
  o.sizes = {1024, 64 << 10};
  o.worlds = {2, 3};
  o.iters = 2;
  o.warmup = 1;
  o.rounds = 1;
  std::mutex mu;
  std::array<tune::TuningFile, kRanks> files;
  ASSERT_EQ(run_ranks(kRanks,
                      [&](Communicator& c) {
                        tune::TuningFile f = measure_tuning_tables(c, o);
                        std::lock_guard<std::mutex> lock(mu);
                        files[c.rank()] = std::move(f);
                      }),
            "");
  // Rank 0 took part in both worlds, rank 2 only in the world of 3.
  ASSERT_EQ(files[0].tables.size(), 6u);
  ASSERT_EQ(files[2].tables.size(), 3u);
  for (const auto& t : files[0].tables) {
    SCOPED_TRACE(std::string(algorithms::to_string(t.collective)) + " at " +
                 std::to_string(t.world) + " ranks");
    EXPECT_TRUE(t.world == 2 || t.world == 3);
    EXPECT_EQ(t.ranks_per_host, t.world);  // one host
    EXPECT_EQ(t.transport, tune::Transport::shm);
    EXPECT_TRUE(t.hierarchical.empty());  // one host: nothing to compose
    ASSERT_EQ(t.sizes.size(), 2u);
    EXPECT_EQ(t.sizes[0], model_bytes_of(t.collective, o.sizes[0], t.world));
    EXPECT_EQ(t.sizes[1], model_bytes_of(t.collective, o.sizes[1], t.world));
    std::vector<std::string_view> want, got;
    for (const auto& row : algorithms::registry())  // but the rows that follow links
      if (row.collective == t.collective && !row.follows_links) want.push_back(row.name);
    for (const auto& [row, times] : t.times) {
      got.push_back(row->name);
      ASSERT_EQ(times.size(), t.sizes.size());
      for (double s : times) EXPECT_GT(s, 0.0);
    }
    EXPECT_EQ(got, want);
  }
  // The world of 3: the same tables, bit for bit, on every rank (the slowest rank's times).
  for (int r = 1; r < kRanks; ++r)
    for (const auto& mine : files[r].tables) {
      if (mine.world != 3) continue;
      bool found = false;
      for (const auto& zero : files[0].tables)
        if (zero.world == 3 && zero.collective == mine.collective) {
          found = true;
          EXPECT_EQ(zero.sizes, mine.sizes);
          for (size_t a = 0; a < zero.times.size(); ++a)
            EXPECT_EQ(zero.times[a].second, mine.times[a].second) << "rank " << r;
        }
      EXPECT_TRUE(found);
    }
  // What it returns is a tuning file the dispatcher loads.
  const std::string text = tune::to_json(files[0], "{}");
  EXPECT_EQ(tune::parse_tuning_file(text, "the sweep").tables.size(), 6u);
}

TEST(TuningSweep, AWorldOutsideTheCommunicatorFailsOnEveryRankAndLeavesItUsable) {
  SweepOptions o;
  o.sizes = {1024};
  o.worlds = {2, 4};
  int failed = 0;
  std::mutex mu;
  ASSERT_EQ(
      run_ranks(3,
                [&](Communicator& c) {
                  try {
                    measure_tuning_tables(c, o);
                  } catch (const InvalidArgumentError& e) {
                    EXPECT_NE(std::string(e.what()).find("4 is not a world"), std::string::npos)
                        << e.what();
                    std::lock_guard<std::mutex> lock(mu);
                    ++failed;
                  }
                  c.barrier();
                }),
      "");
  EXPECT_EQ(failed, 3);
}

}  // namespace
}  // namespace shoal::comm
