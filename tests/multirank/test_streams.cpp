// Several TCP connections per pair of ranks on different hosts (SHOAL_SOCKET_STREAMS): ranks as
// threads on emulated hosts over loopback, every pair across hosts striped over the number of
// connections set, results against support/values.hpp; on loopback's round trip auto keeps one;
// a bad setting fails the communicator's creation naming it.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "support/env.hpp"
#include "support/hosts.hpp"
#include "support/values.hpp"

namespace shoal::testing {
namespace {

const bool kEnvironment = [] {
  setenv("SHOAL_SOCKET_IFNAME", "lo", 0);  // the emulated hosts' TCP on loopback
  return true;
}();

// all_reduce and all_gather of float32 larger than a stripe segment (256 KiB) many times over,
// and of a few elements; every element against the reference.
void check_collectives(Communicator& c) {
  const int p = c.size(), r = c.rank();
  for (uint64_t count : {uint64_t{3}, uint64_t{1} << 20, (uint64_t{1} << 21) + 5}) {
    SCOPED_TRACE("count " + std::to_string(count) + " on rank " + std::to_string(r));
    auto send = bytes_for(count, DataType::float32), recv = bytes_for(count, DataType::float32);
    for (uint64_t i = 0; i < count; ++i)
      store(send.data(), i, DataType::float32, value(r, i, DataType::float32, ReduceOp::sum));
    c.all_reduce(send.data(), recv.data(), count, DataType::float32, ReduceOp::sum);
    EXPECT_EQ(wrong(recv.data(), 0, count, DataType::float32,
                    [&](uint64_t i) { return expected(p, i, DataType::float32, ReduceOp::sum); }),
              0u)
        << "all_reduce: wrong elements";
    auto gathered = bytes_for(count * p, DataType::float32);
    c.all_gather(send.data(), gathered.data(), count, DataType::float32);
    for (int q = 0; q < p; ++q)
      EXPECT_EQ(wrong(gathered.data(), q * count, count, DataType::float32,
                      [&](uint64_t i) {
                        return as_stored(value(q, i, DataType::float32, ReduceOp::sum),
                                         DataType::float32);
                      }),
                0u)
          << "all_gather: wrong elements in block " << q;
  }
}

TEST(SocketStreams, PairsAcrossHostsStripeOverTheStreamsSet) {
  ScopedEnv streams("SHOAL_SOCKET_STREAMS", "3");
  std::vector<std::string> described(4);
  const auto err = run_on_hosts({0, 0, 1, 1}, [&](Communicator& c) {
    described[c.rank()] = c.describe();
    check_collectives(c);
  });
  ASSERT_EQ(err, "");
  for (const auto& d : described)
    EXPECT_NE(d.find("striped over up to 3 connections"), std::string::npos) << d;
}

TEST(SocketStreams, AutoKeepsOneConnectionOnALansRoundTrip) {
  ScopedEnv streams("SHOAL_SOCKET_STREAMS", std::nullopt);
  std::vector<std::string> described(2);
  const auto err = run_on_hosts({0, 1}, [&](Communicator& c) {
    described[c.rank()] = c.describe();
    check_collectives(c);
  });
  ASSERT_EQ(err, "");
  for (const auto& d : described) {
    EXPECT_NE(d.find("tcp with 1 peer(s)"), std::string::npos) << d;
    EXPECT_EQ(d.find("striped"), std::string::npos) << d;
  }
}

TEST(SocketStreams, ABadSettingFailsCreationNamingIt) {
  for (const char* bad : {"0", "17", "many"}) {
    ScopedEnv streams("SHOAL_SOCKET_STREAMS", bad);
    const auto err = run_on_hosts({0, 1}, [](Communicator&) {});
    EXPECT_NE(err.find("SHOAL_SOCKET_STREAMS"), std::string::npos) << bad << ": " << err;
  }
}

}  // namespace
}  // namespace shoal::testing
