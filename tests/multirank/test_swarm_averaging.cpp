// Compressed averaging inside a stage (swarm/net/averaging.*): ranks as threads over real
// sockets, results against sums in double precision computed here.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <random>

#include "support/ranks.hpp"
#include "swarm/net/averaging.hpp"

using namespace shoal;
using namespace shoal::swarm;
using shoal::testing::run_ranks;

namespace {

/// Rank r's values: smooth with a spread of magnitudes, so blocks have different scales.
std::vector<float> values_of(int rank, size_t count, uint64_t seed = 7) {
  std::mt19937_64 rng(seed * 1000 + static_cast<uint64_t>(rank));
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i)
    v[i] = noise(rng) * (1.0f + static_cast<float>(i % 700) / 70.0f);
  return v;
}

std::vector<double> exact_sum(int ranks, size_t count) {
  std::vector<double> sum(count, 0.0);
  for (int r = 0; r < ranks; ++r) {
    auto v = values_of(r, count);
    for (size_t i = 0; i < count; ++i) sum[i] += v[i];
  }
  return sum;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

}  // namespace

TEST(PartBounds, ProportionalToTheWeightsOnAlignedBoundaries) {
  std::vector<double> equal{1, 1, 1, 1};
  EXPECT_EQ(part_bounds(1000, equal, 1), (std::vector<size_t>{0, 250, 500, 750, 1000}));
  std::vector<double> skewed{1, 3};
  EXPECT_EQ(part_bounds(1000, skewed, 1), (std::vector<size_t>{0, 250, 1000}));
  // int8 blocks of 256 stay whole: 1000 * 1/3 = 333 rounds to 256, 666 to 768.
  std::vector<double> three{1, 1, 1};
  EXPECT_EQ(part_bounds(1000, three, 256), (std::vector<size_t>{0, 256, 768, 1000}));
  // Fewer values than members: some parts are empty, none negative.
  EXPECT_EQ(part_bounds(1, three, 1), (std::vector<size_t>{0, 0, 1, 1}));
  std::vector<double> bad{1, 0};
  EXPECT_THROW(part_bounds(10, bad, 1), InvalidArgumentError);
  std::vector<double> none;
  EXPECT_THROW(part_bounds(10, none, 1), InvalidArgumentError);
}

// Every codec and group size: every rank ends with the same numbers, within the codec's error
// of the exact sum (none: float rounding only; fp16: 2^-11 relative per encoding; int8: a
// block's absmax / 254 per encoding, of each member's piece and of the owner's sum).
TEST(CompressedAverager, EveryRankHoldsTheSameSumWithinTheCodecsError) {
  constexpr size_t kCount = 1000;  // not a multiple of int8's 256-value blocks
  for (Codec codec : {Codec::None, Codec::Float16, Codec::Blockwise8}) {
    for (int p : {1, 2, 3}) {
      std::mutex mu;
      std::vector<std::vector<float>> results(p);
      std::string error = run_ranks(p, [&](Communicator& comm) {
        auto v = values_of(comm.rank(), kCount);
        CompressedAverager averager(codec);
        averager.all_reduce(comm, v.data(), v.size());
        std::lock_guard<std::mutex> lock(mu);
        results[comm.rank()] = v;
      });
      ASSERT_EQ(error, "") << codec_name(codec) << " p=" << p;
      auto sum = exact_sum(p, kCount);
      double inputs = 0;
      for (int r = 0; r < p; ++r) inputs = std::max(inputs, max_abs(values_of(r, kCount)));
      double total = 0;
      for (double s : sum) total = std::max(total, std::fabs(s));
      double per_value = codec == Codec::None      ? 1e-5 * p * inputs
                         : codec == Codec::Float16 ? (p * inputs + total) * std::ldexp(1.0, -10)
                                                   : (p * inputs + total) / 254.0 * 1.01;
      double worst = 0;
      for (size_t i = 0; i < kCount; ++i)
        worst = std::max(worst, std::fabs(results[0][i] - sum[i]));
      EXPECT_LE(worst, per_value) << codec_name(codec) << " p=" << p;
      if (codec != Codec::None && p > 1) {
        EXPECT_GT(worst, 0.0) << "compression that loses nothing?";
      }
      for (int r = 1; r < p; ++r)
        EXPECT_EQ(results[r], results[0]) << codec_name(codec) << " p=" << p << " rank " << r;
    }
  }
}

// Error feedback: averaging the same values round after round, what compression dropped is
// carried into the next round, so the sum of all rounds' results stays within one round's
// error of rounds x the exact sum. Without it (a fresh averager each round) the rounding of the
// same values repeats and the error of the total grows with the rounds.
TEST(CompressedAverager, ErrorFeedbackKeepsTheTotalWithinOneRoundsError) {
  constexpr size_t kCount = 700;
  constexpr int kRounds = 40, kRanks = 3;
  for (Codec codec : {Codec::Float16, Codec::Blockwise8}) {
    std::mutex mu;
    std::vector<double> with_feedback(kCount, 0.0), without(kCount, 0.0);
    std::string error = run_ranks(kRanks, [&](Communicator& comm) {
      CompressedAverager carried(codec);
      std::vector<double> a(kCount, 0.0), b(kCount, 0.0);
      for (int round = 0; round < kRounds; ++round) {
        auto v = values_of(comm.rank(), kCount);
        carried.all_reduce(comm, v.data(), v.size());
        for (size_t i = 0; i < kCount; ++i) a[i] += v[i];
        CompressedAverager fresh(codec);
        auto w = values_of(comm.rank(), kCount);
        fresh.all_reduce(comm, w.data(), w.size());
        for (size_t i = 0; i < kCount; ++i) b[i] += w[i];
      }
      if (comm.rank() == 0) {
        std::lock_guard<std::mutex> lock(mu);
        with_feedback = a;
        without = b;
      }
    });
    ASSERT_EQ(error, "") << codec_name(codec);
    auto sum = exact_sum(kRanks, kCount);
    double err_with = 0, err_without = 0;
    for (size_t i = 0; i < kCount; ++i) {
      err_with = std::max(err_with, std::fabs(with_feedback[i] - kRounds * sum[i]));
      err_without = std::max(err_without, std::fabs(without[i] - kRounds * sum[i]));
    }
    // One round's error, as the codec bounds it (see the test above).
    double inputs = 0, total = 0;
    for (int r = 0; r < kRanks; ++r) inputs = std::max(inputs, max_abs(values_of(r, kCount)));
    for (double s : sum) total = std::max(total, std::fabs(s));
    double one_round = codec == Codec::Float16 ? (kRanks * inputs + total) * std::ldexp(1.0, -10)
                                               : (kRanks * inputs + total) / 254.0 * 1.01;
    EXPECT_LE(err_with, 2 * one_round) << codec_name(codec);
    EXPECT_GT(err_without, 10 * err_with) << codec_name(codec);
  }
}

// Parts sized by bandwidth: a member of weight w owns w / sum(w) of the vector; it sends the
// others' parts of its values (1 - share) and its summed part to each other member. Exact byte
// counts for float32 (4 bytes a value), and the result is still the sum.
TEST(CompressedAverager, PartsFollowTheWeightsAndBytesMatchTheButterfly) {
  constexpr size_t kCount = 1200;
  std::vector<double> weights{1, 1, 2};
  std::mutex mu;
  std::vector<uint64_t> sent(3);
  std::vector<float> result;
  std::string error = run_ranks(3, [&](Communicator& comm) {
    auto v = values_of(comm.rank(), kCount);
    CompressedAverager averager(Codec::None);
    averager.all_reduce(comm, v.data(), v.size(), weights);
    std::lock_guard<std::mutex> lock(mu);
    sent[comm.rank()] = averager.bytes_sent();
    if (comm.rank() == 0) result = v;
  });
  ASSERT_EQ(error, "");
  // Shares 300, 300, 600 values: rank i sends (1200 - share_i) + 2 * share_i values.
  EXPECT_EQ(sent[0], 4u * (900 + 2 * 300));
  EXPECT_EQ(sent[1], 4u * (900 + 2 * 300));
  EXPECT_EQ(sent[2], 4u * (600 + 2 * 600));
  auto sum = exact_sum(3, kCount);
  for (size_t i = 0; i < kCount; ++i) ASSERT_NEAR(result[i], sum[i], 1e-4) << i;
}

TEST(CompressedAverager, DisagreeingWeightsAreRefused) {
  std::string error = run_ranks(2, [&](Communicator& comm) {
    std::vector<float> v(10, 1.0f);
    std::vector<double> three{1, 1, 1};
    CompressedAverager averager(Codec::Float16);
    averager.all_reduce(comm, v.data(), v.size(), three);
  });
  EXPECT_NE(error.find("3 weights for 2 members"), std::string::npos) << error;
}
