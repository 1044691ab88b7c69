// Point to point: one queue per (sender, tag), receives from any source, and sends and receives
// that wait without holding back collectives. Over TCP and shared memory, with messages small
// enough to be buffered on arrival and large enough to be parked (TCP) or pulled by reference
// (shared memory).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "support/env.hpp"
#include "support/ranks.hpp"

namespace shoal::testing {
namespace {

using namespace std::chrono_literals;

struct P2pCase {
  const char* transport;
  size_t count;  // float32 elements per message
};

std::string case_name(const ::testing::TestParamInfo<P2pCase>& info) {
  return std::string(info.param.transport) + "_" + std::to_string(info.param.count);
}

class P2p : public ::testing::TestWithParam<P2pCase> {
 protected:
  ScopedEnv transport_{"SHOAL_TRANSPORT", std::string(GetParam().transport)};
  size_t n() const { return GetParam().count; }
  Options options() const {
    Options o;
    o.timeout = 30s;  // a regression fails with a timeout, never hangs the suite
    return o;
  }
};

// A message's contents: its sender, its number and the element's index.
std::vector<float> message(int from, int number, size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i)
    v[i] = static_cast<float>(from * 1000 + number * 100) + static_cast<float>(i % 97);
  return v;
}

TEST_P(P2p, TagsAreSeparateQueuesInOrderWithinATag) {
  std::string err = run_ranks(
      2,
      [&](Communicator& c) {
        // rank 0 sends tag 1, tag 2, tag 1; rank 1 takes tag 2 first.
        if (c.rank() == 0) {
          const auto a1 = message(0, 1, n()), b = message(0, 2, n()), a2 = message(0, 3, n());
          std::vector<Work> w;
          w.push_back(c.send_async(a1.data(), n(), DataType::float32, 1, 1));
          w.push_back(c.send_async(b.data(), n(), DataType::float32, 1, 2));
          w.push_back(c.send_async(a2.data(), n(), DataType::float32, 1, 1));
          for (auto& x : w) x.wait();
          return;
        }
        std::vector<float> got(n());
        c.recv(got.data(), n(), DataType::float32, 0, 2);
        EXPECT_EQ(got, message(0, 2, n()));
        c.recv(got.data(), n(), DataType::float32, 0, 1);
        EXPECT_EQ(got, message(0, 1, n()));
        Work last = c.recv_async(got.data(), n(), DataType::float32, 0, 1);
        last.wait();
        EXPECT_EQ(got, message(0, 3, n()));
        EXPECT_EQ(last.source(), 0);
      },
      options());
  EXPECT_EQ(err, "");
}

TEST_P(P2p, ReceivesFromAnySourceTakeEachSenderOnceAndOnlyTheirTag) {
  const int p = 4;
  std::string err = run_ranks(
      p,
      [&](Communicator& c) {
        if (c.rank() != 0) {
          // rank 2 sends on tag 6 first: the any-source receives of tag 5 must leave it. (Not
          // waited for before tag 5 goes: rank 0 receives it last.)
          const auto other = message(c.rank(), 6, n()), mine = message(c.rank(), 5, n());
          Work first;
          if (c.rank() == 2) first = c.send_async(other.data(), n(), DataType::float32, 0, 6);
          c.send(mine.data(), n(), DataType::float32, 0, 5);
          if (first.valid()) first.wait();
          return;
        }
        std::vector<std::vector<float>> got(p - 1, std::vector<float>(n()));
        std::vector<Work> w;
        for (int k = 0; k < p - 1; ++k)
          w.push_back(
              c.recv_async(got[k].data(), n(), DataType::float32, Communicator::kAnySource, 5));
        std::set<int> sources;
        for (int k = 0; k < p - 1; ++k) {
          w[k].wait();
          const int from = w[k].source();
          sources.insert(from);
          EXPECT_EQ(got[k], message(from, 5, n())) << "receive " << k << " from rank " << from;
        }
        EXPECT_EQ(sources, (std::set<int>{1, 2, 3}));
        std::vector<float> other(n());
        c.recv(other.data(), n(), DataType::float32, 2, 6);
        EXPECT_EQ(other, message(2, 6, n()));
      },
      options());
  EXPECT_EQ(err, "");
}

// MPI's rule: of the receives that fit a message, the one posted first takes it, whether it
// names the sender or takes any.
TEST_P(P2p, TheEarliestPostedReceiveThatFitsTakesTheMessage) {
  for (bool any_first : {true, false}) {
    SCOPED_TRACE(any_first ? "any source posted first" : "named source posted first");
    std::string err = run_ranks(
        2,
        [&](Communicator& c) {
          if (c.rank() == 1) {
            c.barrier();  // both receives are posted
            const auto x = message(1, 1, n()), y = message(1, 2, n());
            c.send(x.data(), n(), DataType::float32, 0, 0);
            c.send(y.data(), n(), DataType::float32, 0, 0);
            return;
          }
          std::vector<float> any(n()), named(n());
          Work first, second;
          if (any_first) {
            first = c.recv_async(any.data(), n(), DataType::float32, Communicator::kAnySource, 0);
            second = c.recv_async(named.data(), n(), DataType::float32, 1, 0);
          } else {
            first = c.recv_async(named.data(), n(), DataType::float32, 1, 0);
            second = c.recv_async(any.data(), n(), DataType::float32, Communicator::kAnySource, 0);
          }
          c.barrier();  // runs while both receives wait
          first.wait();
          second.wait();
          EXPECT_EQ(any_first ? any : named, message(1, 1, n()));
          EXPECT_EQ(any_first ? named : any, message(1, 2, n()));
        },
        options());
    EXPECT_EQ(err, "");
  }
}

// A receive or send waiting for its peer does not hold back this rank's collectives: the peer
// may run the collective first.
TEST_P(P2p, APendingReceiveOrSendDoesNotHoldBackACollective) {
  std::string err = run_ranks(
      2,
      [&](Communicator& c) {
        const auto mine = message(c.rank(), 7, n());
        std::vector<float> got(n());
        int32_t x = c.rank() + 1;
        if (c.rank() == 0) {
          Work r = c.recv_async(got.data(), n(), DataType::float32, 1, 3);
          Work s = c.send_async(mine.data(), n(), DataType::float32, 1, 4);
          c.all_reduce(&x, 1, DataType::int32, ReduceOp::sum);
          r.wait();
          s.wait();
        } else {
          c.all_reduce(&x, 1, DataType::int32, ReduceOp::sum);
          c.send(mine.data(), n(), DataType::float32, 0, 3);
          c.recv(got.data(), n(), DataType::float32, 0, 4);
        }
        EXPECT_EQ(x, 3);
        EXPECT_EQ(got, message(1 - c.rank(), 7, n()));
      },
      options());
  EXPECT_EQ(err, "");
}

TEST_P(P2p, ADifferentCountUnderTheSameTagIsAMismatchNamingTheTag) {
  std::string err = run_ranks(
      2,
      [&](Communicator& c) {
        std::vector<float> buf(n() + 1, 1.0f);
        if (c.rank() == 0) {
          try {  // a small message is gone before the receiver looks at it; a large one waits
            c.send(buf.data(), n() + 1, DataType::float32, 1, 4);
          } catch (const MismatchError& e) {
            EXPECT_NE(std::string(e.what()).find("tag 4"), std::string::npos) << e.what();
          }
        } else {
          try {
            c.recv(buf.data(), n(), DataType::float32, 0, 4);
            ADD_FAILURE() << "a receive of " << n() << " elements took a message of " << n() + 1;
          } catch (const MismatchError& e) {
            EXPECT_NE(std::string(e.what()).find("tag 4"), std::string::npos) << e.what();
          }
        }
        // Either side: the communicator is unusable now, and says so instead of hanging.
        EXPECT_THROW(c.barrier(), Error);
      },
      options());
  EXPECT_EQ(err, "");
}

INSTANTIATE_TEST_SUITE_P(Transports, P2p,
                         ::testing::Values(P2pCase{"tcp", 16}, P2pCase{"tcp", 1 << 20},
                                           P2pCase{"shm", 16}, P2pCase{"shm", 1 << 20}),
                         case_name);

TEST(P2pArguments, AnySourceIsForReceivesOnly) {
  std::string err = run_ranks(2, [](Communicator& c) {
    int32_t x = 0;
    EXPECT_THROW(c.send(&x, 1, DataType::int32, Communicator::kAnySource), InvalidArgumentError);
    EXPECT_THROW(c.recv(&x, 1, DataType::int32, -2), InvalidArgumentError);
    c.barrier();  // still usable
  });
  EXPECT_EQ(err, "");
}

}  // namespace
}  // namespace shoal::testing
