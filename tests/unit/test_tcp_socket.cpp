// configure_data_socket (transport/tcp/socket.hpp) on a real loopback connection: TCP_NODELAY and
// non-blocking always; SHOAL_TCP_CC sets the connection's congestion control, as getsockopt reads
// it back; one the kernel does not offer is an InvalidArgumentError naming the setting and the
// kernel's list; unset leaves the kernel's default.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <utility>

#include "shoal/error.hpp"
#include "support/env.hpp"
#include "transport/tcp/socket.hpp"

using shoal::testing::ScopedEnv;

namespace {

// A connected TCP socket over 127.0.0.1 (the client end); the listener and server end closed
// by the destructor.
struct Loopback {
  int listener = -1, client = -1, server = -1;
  Loopback() {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    if (bind(listener, reinterpret_cast<sockaddr*>(&sa), len) != 0 || listen(listener, 1) != 0 ||
        getsockname(listener, reinterpret_cast<sockaddr*>(&sa), &len) != 0)
      return;
    client = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(client, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) return;
    server = accept(listener, nullptr, nullptr);
  }
  ~Loopback() {
    for (int fd : {listener, client, server})
      if (fd >= 0) close(fd);
  }
};

std::string congestion_control(int fd) {
  char name[32] = {};
  socklen_t len = sizeof name;
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "getsockopt failed";
  return std::string(name);
}

int int_option(int fd, int level, int name) {
  int value = 0;
  socklen_t len = sizeof value;
  getsockopt(fd, level, name, &value, &len);
  return value;
}

std::string kernel_default() {
  std::ifstream in("/proc/sys/net/ipv4/tcp_congestion_control");
  std::string name;
  in >> name;
  return name;
}

}  // namespace

TEST(DataSocket, NoDelayNonBlockingAndTheKernelsCongestionControlByDefault) {
  ScopedEnv cc("SHOAL_TCP_CC", std::nullopt);
  Loopback l;
  ASSERT_GE(l.server, 0);
  shoal::transport::tcp::configure_data_socket(l.client);
  EXPECT_EQ(int_option(l.client, IPPROTO_TCP, TCP_NODELAY), 1);
  EXPECT_TRUE(fcntl(l.client, F_GETFL, 0) & O_NONBLOCK);
  EXPECT_EQ(congestion_control(l.client), kernel_default());
}

TEST(DataSocket, SetsTheCongestionControlNamed) {
  ScopedEnv cc("SHOAL_TCP_CC", "reno");  // built into every Linux kernel
  Loopback l;
  ASSERT_GE(l.server, 0);
  shoal::transport::tcp::configure_data_socket(l.client);
  EXPECT_EQ(congestion_control(l.client), "reno");
}

TEST(DataSocket, RefusesACongestionControlTheKernelLacks) {
  ScopedEnv cc("SHOAL_TCP_CC", "nosuchcc");
  Loopback l;
  ASSERT_GE(l.server, 0);
  const std::string before = congestion_control(l.client);
  try {
    shoal::transport::tcp::configure_data_socket(l.client);
    ADD_FAILURE() << "SHOAL_TCP_CC=nosuchcc was accepted";
  } catch (const shoal::InvalidArgumentError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("SHOAL_TCP_CC=nosuchcc"), std::string::npos) << what;
    EXPECT_NE(what.find("reno"), std::string::npos) << "the kernel's list is not named: " << what;
  }
  EXPECT_EQ(congestion_control(l.client), before);
}

using std::chrono::microseconds;
using std::chrono::milliseconds;

TEST(DataSocket, MeasuresTheRoundTripOfItsHandshake) {
  Loopback l;
  ASSERT_GE(l.server, 0);
  const auto rtt = shoal::transport::tcp::measured_rtt(l.client);
  EXPECT_GT(rtt.count(), 0);  // the kernel holds a sample from the SYN's round trip
  EXPECT_LT(rtt, shoal::transport::tcp::kLanRtt);
  // The stream count reads the congestion control data connections will run: the socket's own
  // (the kernel's default), or SHOAL_TCP_CC's.
  {
    ScopedEnv unset("SHOAL_TCP_CC", std::nullopt);
    EXPECT_EQ(shoal::transport::tcp::data_congestion_control(l.client),
              congestion_control(l.client));
  }
  ScopedEnv set("SHOAL_TCP_CC", "cubic");
  EXPECT_EQ(shoal::transport::tcp::data_congestion_control(l.client), "cubic");
}

// auto: one connection on a LAN, then under BBR two, else one per 25 ms of round trip (rounded
// up), 2 to 8.
TEST(DataSocket, StreamsFollowTheRoundTrip) {
  using shoal::transport::tcp::streams_for;
  ScopedEnv unset("SHOAL_SOCKET_STREAMS", std::nullopt);
  const std::pair<microseconds, int> cases[] = {{microseconds(0), 1},   {microseconds(1999), 1},
                                                {milliseconds(2), 2},   {milliseconds(20), 2},
                                                {milliseconds(50), 2},  {milliseconds(51), 3},
                                                {milliseconds(80), 4},  {milliseconds(140), 6},
                                                {milliseconds(200), 8}, {milliseconds(500), 8}};
  for (const auto& [rtt, want] : cases) {
    EXPECT_EQ(streams_for(rtt), want) << rtt.count() << " us";
    EXPECT_EQ(streams_for(rtt, "cubic"), want) << rtt.count() << " us, cubic";
    // BBR: one stream is not loss- or window-bound; two on any long path.
    EXPECT_EQ(streams_for(rtt, "bbr"), rtt < milliseconds(2) ? 1 : 2) << rtt.count() << " us, bbr";
  }
  ScopedEnv set("SHOAL_SOCKET_STREAMS", "3");
  EXPECT_EQ(streams_for(milliseconds(200), "bbr"), 3);
  EXPECT_EQ(streams_for(microseconds(0)), 3);
  EXPECT_EQ(streams_for(milliseconds(200)), 3);
}

TEST(DataSocket, BadStreamCountsAreRefusedNamingTheSetting) {
  for (const char* bad : {"0", "17", "-2", "lots"}) {
    ScopedEnv set("SHOAL_SOCKET_STREAMS", bad);
    try {
      shoal::transport::tcp::streams_for(microseconds(0));
      ADD_FAILURE() << "SHOAL_SOCKET_STREAMS=" << bad << " was accepted";
    } catch (const shoal::InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("SHOAL_SOCKET_STREAMS"), std::string::npos) << e.what();
    }
  }
}

// auto: a fixed 4 MiB on a LAN, the kernel's autotuning (0: nothing set) on a long path; a
// value is kept on both.
TEST(DataSocket, BufferFollowsTheRoundTrip) {
  using shoal::transport::tcp::socket_buffer_for;
  {
    ScopedEnv unset("SHOAL_SOCKET_BUFFER", std::nullopt);
    EXPECT_EQ(socket_buffer_for(microseconds(100)), 4u << 20);
    EXPECT_EQ(socket_buffer_for(milliseconds(2)), 0u);
    EXPECT_EQ(socket_buffer_for(milliseconds(200)), 0u);
  }
  ScopedEnv set("SHOAL_SOCKET_BUFFER", "1M");
  EXPECT_EQ(socket_buffer_for(microseconds(100)), 1u << 20);
  EXPECT_EQ(socket_buffer_for(milliseconds(200)), 1u << 20);
}

// On loopback auto sets the same buffer as SHOAL_SOCKET_BUFFER=4M does (as the kernel reports
// it: doubled, capped by net.core.rmem_max).
TEST(DataSocket, AutoOnLoopbackSetsTheLanBuffer) {
  auto rcvbuf_after_configure = [] {
    Loopback l;
    EXPECT_GE(l.server, 0);
    shoal::transport::tcp::configure_data_socket(l.client);
    return int_option(l.client, SOL_SOCKET, SO_RCVBUF);
  };
  int fixed = 0, automatic = 0, untouched = 0;
  {
    ScopedEnv set("SHOAL_SOCKET_BUFFER", "4M");
    fixed = rcvbuf_after_configure();
  }
  {
    ScopedEnv unset("SHOAL_SOCKET_BUFFER", std::nullopt);
    automatic = rcvbuf_after_configure();
  }
  {
    ScopedEnv zero("SHOAL_SOCKET_BUFFER", "0");
    untouched = rcvbuf_after_configure();
  }
  EXPECT_EQ(automatic, fixed);
  EXPECT_NE(automatic, untouched);
}
