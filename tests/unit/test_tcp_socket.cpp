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

#include <fstream>
#include <string>

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
  int nodelay = 0;
  socklen_t len = sizeof nodelay;
  getsockopt(l.client, IPPROTO_TCP, TCP_NODELAY, &nodelay, &len);
  EXPECT_EQ(nodelay, 1);
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
