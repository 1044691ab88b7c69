// Creating a communicator succeeds on every rank or on none (src/comm/agreement.*): ranks as
// threads, each with its own client of one TCP store, vote as CommImpl does after set-up.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/agreement.hpp"
#include "core/config.hpp"
#include "shoal/error.hpp"
#include "shoal/store.hpp"

namespace shoal::comm {
namespace {

using namespace std::chrono_literals;

struct Outcome {
  ErrorCode code = ErrorCode::Internal;
  std::string what;  // empty: created
};

class Agreement : public ::testing::Test {
 protected:
  std::unique_ptr<TcpStore> client() {
    TcpStore::Options o;
    o.timeout = 10s;
    o.connect_timeout = 5s;
    return std::make_unique<TcpStore>("127.0.0.1", server_.port(), o);
  }
  // Runs `vote(rank, store)` on `size` threads at once; returns what each saw.
  std::vector<Outcome> run(int size, const std::function<void(int, Store&)>& vote) {
    std::vector<Outcome> out(size);
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r)
      threads.emplace_back([&, r, store = std::shared_ptr<TcpStore>(client())] {
        try {
          vote(r, *store);
        } catch (const Error& e) {
          out[r].code = e.code();
          out[r].what = e.what();
        }
      });
    for (auto& t : threads) t.join();
    return out;
  }
  TcpStore server_{"127.0.0.1", 0, [] {
                     TcpStore::Options o;
                     o.is_server = true;
                     o.auth_key = "";
                     return o;
                   }()};
};

TEST_F(Agreement, EveryYesCreatesOnEveryRank) {
  auto out = run(5, [](int r, Store& s) { vote_for_creation(s, "c", r, 5, Clock::now() + 10s); });
  for (int r = 0; r < 5; ++r) EXPECT_EQ(out[r].what, "") << "rank " << r;
}

TEST_F(Agreement, OneNoFailsEveryRankWithItsReason) {
  auto out = run(4, [](int r, Store& s) {
    if (r == 2)
      vote_against_creation(s, "c", r, 4, "cannot map rank 1's shared memory");
    else
      vote_for_creation(s, "c", r, 4, Clock::now() + 10s);
  });
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(out[r].code, ErrorCode::PeerFailure) << out[r].what;
    EXPECT_NE(out[r].what.find("rank 2: cannot map rank 1's shared memory"), std::string::npos)
        << out[r].what;
  }
}

TEST_F(Agreement, ARankThatVotesAfterTheOthersGaveUpCannotCreateAlone) {
  // Rank 3 is frozen during set-up: the others time out, and when it thaws and votes yes it
  // must fail too, instead of holding a communicator nobody else has.
  auto out = run(3, [](int r, Store& s) { vote_for_creation(s, "c", r, 4, Clock::now() + 300ms); });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(out[r].code, ErrorCode::Timeout) << out[r].what;
    EXPECT_NE(out[r].what.find("1 rank(s) did not finish setting up"), std::string::npos)
        << out[r].what;
  }
  auto late = run(1, [](int, Store& s) { vote_for_creation(s, "c", 3, 4, Clock::now() + 5s); });
  EXPECT_EQ(late[0].code, ErrorCode::PeerFailure) << late[0].what;
}

TEST_F(Agreement, ADecisionMadeBeforeARankGaveUpStands) {
  // Rank 1 completes the count but is slow to publish the outcome; rank 0 gives up waiting in
  // between. The count was complete, so rank 0 must follow the decision (created), not fail.
  // Each step waits for the one before, read from the vote counter (rank 0's vote adds 1, its
  // giving up 2^32 - 1): no sleep decides the order.
  auto store = client();
  const int64_t kGaveUp = int64_t{1} << 32;
  auto counter = [&] { return store->add("c/create/votes", 0); };
  std::thread slow_last_voter([&] {
    while (counter() < 1) std::this_thread::sleep_for(1ms);  // rank 0 voted
    EXPECT_EQ(store->add("c/create/votes", 1), 2);           // the decisive vote: both said yes
    while (counter() < kGaveUp) std::this_thread::sleep_for(1ms);  // rank 0 gave up
    store->set("c/create/outcome", std::string("ok"));
  });
  // Long enough for the decisive vote to come first even on a loaded machine.
  auto out = run(1, [&](int, Store& s) { vote_for_creation(s, "c", 0, 2, Clock::now() + 1s); });
  slow_last_voter.join();
  EXPECT_EQ(out[0].what, "");
  EXPECT_EQ(counter(), 2 + kGaveUp - 1) << "rank 0 must have given up after the decisive vote";
}

// The settings every rank must hold equal: the first rank (and setting) that differs from
// rank 0's is named, the same on every rank (all compare the same gathered values).
TEST(SettingsAgreement, TheFirstDifferenceFromRankZeroIsNamed) {
  const auto agreed = config::agreed_settings();
  const size_t k = agreed.size();
  ASSERT_GT(k, 2u);
  std::vector<uint64_t> all;
  for (int r = 0; r < 4; ++r)
    for (size_t i = 0; i < k; ++i) all.push_back(1000 + i);
  EXPECT_FALSE(first_disagreement(all, k).has_value());
  all[3 * k + 1] = 7;  // rank 3, the second setting
  all[2 * k + 2] = 7;  // rank 2, the third: the lower rank is named
  const auto d = first_disagreement(all, k);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->rank, 2);
  EXPECT_NE(d->message.find("rank 2's"), std::string::npos) << d->message;
  EXPECT_NE(d->message.find(agreed[2]->name), std::string::npos) << d->message;
  EXPECT_THROW(first_disagreement(all, k + 1), InternalError);  // not one fingerprint per setting
}

TEST_F(Agreement, OneRankNeedsNoVote) {
  auto store = client();
  vote_for_creation(*store, "c", 0, 1, Clock::now());
  EXPECT_FALSE(store->check({"c/create/votes"}));
}

}  // namespace
}  // namespace shoal::comm
