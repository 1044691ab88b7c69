// Authentication of transport connections (SHOAL_AUTH_KEY): both ends prove they know the
// key; a stranger, or a rank with another key, is refused with a clear message; ranks with
// the key form a job; without a key, one warning per process says the job is open.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "support/processes.hpp"
#include "transport/tcp/auth.hpp"

namespace shoal::testing {
namespace {

using namespace std::chrono_literals;
using transport::Hello;
using transport::tcp::authenticate_from;
using transport::tcp::authenticate_to;

struct Outcome {
  bool accepted = false;
  std::string why;    // the acceptor's reason when it refused
  std::string error;  // what the connector threw
  ErrorCode code = ErrorCode::Internal;
  int peer = -2;
};

// The handshake over a socket pair: the acceptor (rank 0) with `acceptor_key`, the connector
// (rank 1) with `connector_key`.
Outcome handshake(const std::string& acceptor_key, const std::string& connector_key) {
  int sv[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  Hello hello;
  hello.comm_id = 42;
  hello.rank = 1;
  hello.size = 2;
  hello.reserved = transport::tcp::kHelloAuth;
  Outcome out;
  const auto deadline = transport::tcp::Clock::now() + 5s;
  std::thread acceptor([&] {
    out.accepted = authenticate_from(sv[0], hello, 0, acceptor_key, deadline, out.why);
    close(sv[0]);  // a refused connection is closed
  });
  try {
    authenticate_to(sv[1], hello, 0, "test", connector_key, deadline);
  } catch (const Error& e) {
    out.error = e.what();
    out.code = e.code();
    out.peer = e.peer();
  }
  close(sv[1]);  // a connector that gave up closes, which ends the acceptor's wait
  acceptor.join();
  return out;
}

TEST(Auth, TheSameKeyOnBothEndsIsAccepted) {
  Outcome o = handshake("s3cret", "s3cret");
  EXPECT_TRUE(o.accepted) << o.why;
  EXPECT_EQ(o.error, "");
}

TEST(Auth, AnotherKeyIsRefusedOnBothEndsNamingThePeer) {
  Outcome o = handshake("s3cret", "guess");
  EXPECT_FALSE(o.accepted);
  EXPECT_NE(o.why, "");
  EXPECT_EQ(o.code, ErrorCode::Unauthorized) << o.error;
  EXPECT_EQ(o.peer, 0);
  EXPECT_NE(o.error.find("rank 0"), std::string::npos) << o.error;
  EXPECT_NE(o.error.find("SHOAL_AUTH_KEY"), std::string::npos) << o.error;
}

// A stranger that answers the challenge with garbage (it cannot compute the HMAC).
TEST(Auth, AStrangerIsRefused) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  Hello hello;
  hello.comm_id = 42;
  hello.rank = 1;
  hello.size = 2;
  hello.reserved = transport::tcp::kHelloAuth;
  std::thread stranger([&] {
    uint8_t nonce[32] = {1}, reply[64], answer[32] = {0};
    ASSERT_EQ(write(sv[1], nonce, sizeof nonce), 32);
    size_t got = 0;
    while (got < sizeof reply) {
      ssize_t n = read(sv[1], reply + got, sizeof reply - got);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    ASSERT_EQ(write(sv[1], answer, sizeof answer), 32);
  });
  std::string why;
  EXPECT_FALSE(
      authenticate_from(sv[0], hello, 0, "s3cret", transport::tcp::Clock::now() + 5s, why));
  EXPECT_NE(why.find("SHOAL_AUTH_KEY"), std::string::npos) << why;
  stranger.join();
  close(sv[0]);
  close(sv[1]);
}

// Real ranks: with one key everywhere the job forms and computes; a rank with another key
// fails with UnauthorizedError naming the rank it could not verify.
TEST(Auth, RanksWithTheKeyFormAJob) {
  ProcessJob job(3);
  auto results = job.run(
      [](int rank, const ProcessJob& j) {
        setenv("SHOAL_AUTH_KEY", "s3cret", 1);
        setenv("SHOAL_TRANSPORT", "tcp", 1);
        Communicator comm = Communicator::create(j.store(), rank, 3);
        float x = 1.0f;
        comm.all_reduce(&x, 1, DataType::float32, ReduceOp::sum);
        return x == 3.0f ? 0 : 1;
      },
      60s);
  for (int r = 0; r < 3; ++r)
    EXPECT_EQ(results[r].exit_code, 0) << "rank " << r << ": " << results[r].report;
}

TEST(Auth, ARankWithAnotherKeyFailsWithUnauthorized) {
  ProcessJob job(2);
  auto results = job.run(
      [](int rank, const ProcessJob& j) {
        setenv("SHOAL_AUTH_KEY", rank == 0 ? "s3cret" : "guess", 1);
        Options o;
        o.timeout = 5s;  // rank 0 waits for a rank that never authenticates
        try {
          Communicator comm = Communicator::create(j.store(), rank, 2, o);
        } catch (const UnauthorizedError& e) {
          j.report(rank, std::to_string(e.peer()) + "\n" + e.what());
          return 10;
        } catch (const Error& e) {
          j.report(rank, e.what());
          return 11;
        }
        return 0;
      },
      60s);
  EXPECT_EQ(results[1].exit_code, 10) << results[1].report;
  EXPECT_EQ(results[1].report.rfind("0\n", 0), 0u)
      << "the error must name rank 0: " << results[1].report;
  EXPECT_EQ(results[0].exit_code, 11)
      << "rank 0 must not form a job with it: " << results[0].report;
}

TEST(Auth, WithoutAKeyOneWarningSaysTheJobIsOpen) {
  ProcessJob job(1);
  auto results = job.run(
      [](int, const ProcessJob& j) {
        unsetenv("SHOAL_AUTH_KEY");
        unsetenv("SHOAL_AUTH_KEY_FILE");
        const std::string log = j.dir() + "/stderr";
        const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || dup2(fd, 2) < 0) return 1;  // shoal logs with write(2, ...)
        auth::job_key();
        auth::job_key();
        std::ifstream in(log);
        std::stringstream text;
        text << in.rdbuf();
        j.report(0, text.str());
        return 0;
      },
      30s);
  ASSERT_EQ(results[0].exit_code, 0);
  const std::string& log = results[0].report;
  const auto first = log.find("no SHOAL_AUTH_KEY");
  EXPECT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find("no SHOAL_AUTH_KEY", first + 1), std::string::npos) << "warned twice: " << log;
}

}  // namespace
}  // namespace shoal::testing
