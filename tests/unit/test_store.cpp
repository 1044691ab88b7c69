// Stores: the TCP store (server and clients, torch 2.x wire format, failures), the file store
// across processes, and PrefixStore.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "shoal/error.hpp"
#include "shoal/store.hpp"

using namespace shoal;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

TcpStore::Options server_options(Milliseconds timeout = 10s) {
  TcpStore::Options o;
  o.is_server = true;
  o.timeout = timeout;
  o.connect_timeout = 5s;
  return o;
}

TcpStore::Options client_options(Milliseconds timeout = 10s, Milliseconds connect = 5s) {
  TcpStore::Options o;
  o.timeout = timeout;
  o.connect_timeout = connect;
  return o;
}

uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// torch 2.x's first request on every connection: VALIDATE with its number.
const std::string kValidate("\x00\xce\xf7\x85\x3c", 5);

// A raw TCP connection, to speak the protocol byte by byte; it opens with VALIDATE, as torch's
// client does, unless `validate` is false.
class Raw {
 public:
  explicit Raw(uint16_t port, bool validate = true) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    if (validate) send(kValidate);
  }
  explicit Raw(int fd, bool) : fd_(fd) {}
  ~Raw() { ::close(fd_); }
  void send(const std::string& data) {
    ASSERT_EQ(::send(fd_, data.data(), data.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(data.size()));
  }
  // Reads exactly n bytes; fewer when the peer closes or `timeout` passes.
  std::string recv(size_t n, Milliseconds timeout = 3s) {
    std::string out;
    const auto end = Clock::now() + timeout;
    while (out.size() < n) {
      pollfd p{fd_, POLLIN, 0};
      int left =
          static_cast<int>(std::chrono::duration_cast<Milliseconds>(end - Clock::now()).count());
      if (left <= 0 || ::poll(&p, 1, left) <= 0) break;
      char buf[4096];
      ssize_t got = ::recv(fd_, buf, std::min(sizeof buf, n - out.size()), 0);
      if (got <= 0) break;
      out.append(buf, static_cast<size_t>(got));
    }
    return out;
  }
  // True when the peer closed the connection within `timeout`.
  bool closed_by_peer(Milliseconds timeout = 3s) {
    const auto end = Clock::now() + timeout;
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      int left =
          static_cast<int>(std::chrono::duration_cast<Milliseconds>(end - Clock::now()).count());
      if (left <= 0 || ::poll(&p, 1, left) <= 0) return false;
      char buf[4096];
      ssize_t got = ::recv(fd_, buf, sizeof buf, 0);
      if (got == 0 || (got < 0 && errno == ECONNRESET)) return true;
    }
  }

 private:
  int fd_ = -1;
};

// name("c", i) without g++ 12's false -Wrestrict warning (GCC bug 105329).
std::string name(const char* prefix, size_t i) {
  std::string s(prefix);
  s += std::to_string(i);
  return s;
}

std::string u64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
std::string str(const std::string& s) { return u64(s.size()) + s; }
int64_t as_i64(const std::string& s) {
  int64_t v = 0;
  EXPECT_EQ(s.size(), 8u);
  if (s.size() == 8) std::memcpy(&v, s.data(), 8);
  return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// TcpStore
// ---------------------------------------------------------------------------------------

TEST(TcpStore, PortZeroPicksAFreePortAndClientsShareData) {
  TcpStore server("127.0.0.1", 0, server_options());
  ASSERT_NE(server.port(), 0);
  TcpStore a("127.0.0.1", server.port(), client_options());
  TcpStore b("localhost", server.port(), client_options());
  a.set("k", std::string("hello"));
  EXPECT_EQ(b.get_string("k"), "hello");
  EXPECT_EQ(server.get_string("k"), "hello");

  Bytes binary = {0, 1, 2, 0, 255, 0};
  b.set("bin", binary);
  EXPECT_EQ(a.get("bin"), binary);
  a.set("empty", Bytes{});
  EXPECT_TRUE(b.get("empty").empty());

  Bytes big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7 + 3);
  a.set("big", big);
  EXPECT_EQ(b.get("big"), big);

  b.set("k", std::string("overwritten"));
  EXPECT_EQ(a.get_string("k"), "overwritten");
}

TEST(TcpStore, SecondServerOnTheSamePortIsRefusedClearly) {
  TcpStore server("127.0.0.1", 0, server_options());
  try {
    TcpStore again("127.0.0.1", server.port(), server_options());
    FAIL() << "a second server bound the same port";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("already in use"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(server.port())), std::string::npos)
        << e.what();
  }
}

TEST(TcpStore, AddIsAtomicUnderConcurrency) {
  TcpStore server("127.0.0.1", 0, server_options());
  constexpr int kThreads = 8, kAdds = 250;
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      TcpStore c("127.0.0.1", server.port(), client_options());
      for (int i = 0; i < kAdds; ++i) seen[t].push_back(c.add("counter", 1));
    });
  for (auto& t : threads) t.join();
  std::set<int64_t> all;
  for (auto& v : seen) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), size_t{kThreads * kAdds}) << "two adds returned the same value";
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kThreads * kAdds);
  EXPECT_EQ(server.add("counter", 0), kThreads * kAdds);
  EXPECT_EQ(server.add("counter", -kThreads * kAdds - 5), -5);
  EXPECT_EQ(server.get_string("counter"), "-5");  // stored as decimal text, as torch does
}

TEST(TcpStore, OneClientIsThreadSafe) {
  TcpStore server("127.0.0.1", 0, server_options());
  TcpStore shared("127.0.0.1", server.port(), client_options());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        shared.set(name("t", t), std::to_string(i));
        EXPECT_EQ(shared.get_string(name("t", t)), std::to_string(i));
        shared.add("n", 1);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(shared.add("n", 0), 400);
}

TEST(TcpStore, WaitIsSatisfiedWhenTheLastKeyIsSet) {
  TcpStore server("127.0.0.1", 0, server_options());
  TcpStore setter("127.0.0.1", server.port(), client_options());
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    TcpStore c("127.0.0.1", server.port(), client_options());
    c.wait({"a", "b"});
    done = true;
  });
  std::this_thread::sleep_for(100ms);
  setter.set("a", std::string("1"));
  std::this_thread::sleep_for(150ms);
  EXPECT_FALSE(done.load()) << "wait returned before every key was set";
  setter.set("b", std::string("2"));
  const auto t0 = Clock::now();
  while (!done.load() && seconds_since(t0) < 5) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(done.load());
  waiter.join();
}

TEST(TcpStore, GetBlocksUntilTheKeyIsSet) {
  TcpStore server("127.0.0.1", 0, server_options());
  std::thread late([&] {
    std::this_thread::sleep_for(200ms);
    TcpStore c("127.0.0.1", server.port(), client_options());
    c.set("late", std::string("here"));
  });
  TcpStore reader("127.0.0.1", server.port(), client_options());
  const auto t0 = Clock::now();
  EXPECT_EQ(reader.get_string("late"), "here");
  EXPECT_GE(seconds_since(t0), 0.15);
  late.join();
}

TEST(TcpStore, WaitAndGetTimeOutWithinBoundsAndNameTheKey) {
  TcpStore server("127.0.0.1", 0, server_options());
  TcpStore c("127.0.0.1", server.port(), client_options());
  auto t0 = Clock::now();
  try {
    c.wait({"never_set", "also_missing"}, 300ms);
    FAIL() << "wait returned";
  } catch (const TimeoutError& e) {
    const double s = seconds_since(t0);
    EXPECT_GE(s, 0.28);
    EXPECT_LT(s, 3.0);
    const std::string m = e.what();
    EXPECT_NE(m.find("never_set"), std::string::npos) << m;
    EXPECT_NE(m.find("127.0.0.1:" + std::to_string(server.port())), std::string::npos) << m;
    EXPECT_NE(m.find("SHOAL_TIMEOUT"), std::string::npos) << m;
  }

  c.set_timeout(250ms);
  t0 = Clock::now();
  EXPECT_THROW(c.get("nope"), TimeoutError);
  EXPECT_LT(seconds_since(t0), 3.0);
  EXPECT_GE(seconds_since(t0), 0.23);
}

TEST(TcpStore, ClientStaysInSyncAfterATimeout) {
  // A WAIT that timed out may still be answered later; that answer must never be taken for
  // the reply to a later request.
  TcpStore server("127.0.0.1", 0, server_options());
  TcpStore c("127.0.0.1", server.port(), client_options());
  EXPECT_THROW(c.wait({"slow"}, 200ms), TimeoutError);
  server.set("slow", std::string("now"));
  server.set("n", std::string("41"));
  EXPECT_EQ(c.add("n", 1), 42);
  EXPECT_TRUE(c.check({"slow"}));
  EXPECT_EQ(c.get_string("slow"), "now");
}

TEST(TcpStore, CheckAndRemove) {
  TcpStore server("127.0.0.1", 0, server_options());
  TcpStore c("127.0.0.1", server.port(), client_options(500ms));
  EXPECT_FALSE(c.check({"x"}));
  c.set("x", std::string("1"));
  EXPECT_TRUE(c.check({"x"}));
  EXPECT_FALSE(c.check({"x", "y"}));
  c.set("y", std::string("2"));
  EXPECT_TRUE(c.check({"x", "y"}));
  EXPECT_TRUE(c.check({}));
  EXPECT_TRUE(c.remove("x"));
  EXPECT_FALSE(c.remove("x"));
  EXPECT_FALSE(c.check({"x"}));
  EXPECT_THROW(c.get("x"), TimeoutError);
  EXPECT_EQ(c.get_string("y"), "2");
}

TEST(TcpStore, MultiGetReturnsEveryValueInOrderAndWaitsLikeGet) {
  TcpStore server("127.0.0.1", 0, server_options());
  TcpStore c("127.0.0.1", server.port(), client_options(400ms));
  const Bytes binary{0, 1, 255, 0};
  c.set("a", std::string("first"));
  c.set("b", binary);
  c.set("empty", Bytes{});
  EXPECT_TRUE(c.multi_get({}).empty());
  auto values = c.multi_get({"b", "empty", "a", "b"});
  ASSERT_EQ(values.size(), 4u);
  EXPECT_EQ(values[0], binary);
  EXPECT_TRUE(values[1].empty());
  EXPECT_EQ(std::string(values[2].begin(), values[2].end()), "first");
  EXPECT_EQ(values[3], binary);
  // A key set while the call waits is returned, as get() would.
  std::thread late([&] {
    std::this_thread::sleep_for(100ms);
    server.set("late", std::string("here"));
  });
  values = c.multi_get({"a", "late"});
  late.join();
  ASSERT_EQ(values.size(), 2u);
  EXPECT_EQ(std::string(values[1].begin(), values[1].end()), "here");
  // A key never set: a timeout naming it, and the connection stays usable.
  try {
    c.multi_get({"a", "never_set"});
    FAIL() << "multi_get returned";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("never_set"), std::string::npos) << e.what();
  }
  EXPECT_EQ(c.add("n", 3), 3);
  EXPECT_EQ(c.multi_get({"a"}).at(0), server.get("a"));
}

TEST(TcpStore, AddAllReturnsEachNewValueInOrderAndIsAtomicPerAdd) {
  TcpStore server("127.0.0.1", 0, server_options());
  TcpStore c("127.0.0.1", server.port(), client_options());
  EXPECT_TRUE(c.add_all({}).empty());
  EXPECT_EQ(c.add("x", 5), 5);
  EXPECT_EQ(c.add_all({{"x", 1}, {"y", -2}, {"x", 10}}), (std::vector<int64_t>{6, -2, 16}));
  EXPECT_EQ(c.add("x", 0), 16);
  EXPECT_EQ(server.add("y", 0), -2);
  // Clients pipelining at once: every add counted once.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      TcpStore mine("127.0.0.1", server.port(), client_options());
      for (int i = 0; i < 50; ++i) mine.add_all({{"n", 1}, {"m", 2}, {"n", 1}});
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.add("n", 0), 400);
  EXPECT_EQ(c.add("m", 0), 400);
  // A PrefixStore passes them on under its prefix.
  PrefixStore p("job", std::make_shared<TcpStore>("127.0.0.1", server.port(), client_options()));
  EXPECT_EQ(p.add_all({{"k", 3}, {"k", 4}}), (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(c.add("job/k", 0), 7);
}

TEST(TcpStore, ClientStartedBeforeTheServerConnectsWhenItComesUp) {
  const uint16_t port = free_port();
  std::atomic<bool> ok{false};
  std::string error;
  std::thread early([&] {
    try {
      TcpStore c("127.0.0.1", port, client_options(10s, 10s));
      c.set("early", std::string("bird"));
      ok = c.get_string("from_server") == "hello";
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  std::this_thread::sleep_for(400ms);
  TcpStore server("127.0.0.1", port, server_options());
  server.set("from_server", std::string("hello"));
  EXPECT_EQ(server.get_string("early"), "bird");
  early.join();
  EXPECT_TRUE(ok.load()) << error;
}

TEST(TcpStore, ConnectGivesUpAfterConnectTimeoutWithAClearMessage) {
  const uint16_t port = free_port();
  const auto t0 = Clock::now();
  try {
    TcpStore c("127.0.0.1", port, client_options(10s, 400ms));
    FAIL() << "connected to nothing";
  } catch (const TimeoutError& e) {
    const double s = seconds_since(t0);
    EXPECT_GE(s, 0.38);
    EXPECT_LT(s, 3.0);
    const std::string m = e.what();
    EXPECT_NE(m.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << m;
    EXPECT_NE(m.find("MASTER_ADDR"), std::string::npos) << m;
  }
}

TEST(TcpStore, GarbageClosesOnlyTheSendersConnection) {
  TcpStore server("127.0.0.1", 0, server_options());
  const uint16_t port = server.port();
  TcpStore good("127.0.0.1", port, client_options());
  good.set("before", std::string("1"));
  // A well-behaved client with a WAIT pending through all of it.
  std::atomic<bool> waited{false};
  std::thread waiter([&] {
    TcpStore c("127.0.0.1", port, client_options(20s));
    c.wait({"after_garbage"});
    waited = true;
  });

  {  // unknown query type
    Raw r(port);
    r.send(std::string(1, '\x63'));
    EXPECT_TRUE(r.closed_by_peer());
  }
  {  // a torch 1.13 client: its first request is no VALIDATE
    Raw r(port, false);
    r.send(std::string(1, '\x03') + str("init/") + u64(1));
    EXPECT_TRUE(r.closed_by_peer());
  }
  {  // VALIDATE with another number
    Raw r(port, false);
    r.send(std::string("\x00\x01\x02\x03\x04", 5));
    EXPECT_TRUE(r.closed_by_peer());
  }
  {  // SET announcing a 2^62-byte key
    Raw r(port);
    r.send(std::string(1, '\x01') + u64(uint64_t{1} << 62));
    EXPECT_TRUE(r.closed_by_peer());
  }
  {  // SET announcing an absurd value
    Raw r(port);
    r.send(std::string(1, '\x01') + str("/k") + u64(uint64_t{1} << 50));
    EXPECT_TRUE(r.closed_by_peer());
  }
  {  // WAIT for 2^40 keys
    Raw r(port);
    r.send(std::string(1, '\x06') + u64(uint64_t{1} << 40));
    EXPECT_TRUE(r.closed_by_peer());
  }
  {  // MULTI_SET of 2^40 pairs
    Raw r(port);
    r.send(std::string(1, '\x0b') + u64(uint64_t{1} << 40));
    EXPECT_TRUE(r.closed_by_peer());
  }
  {  // MULTI_GET with a missing key
    Raw r(port);
    r.send(std::string(1, '\x0a') + u64(2) + str("/before") + str("/missing"));
    EXPECT_TRUE(r.closed_by_peer());
  }
  {  // GET of a missing key (torch's server drops such a client too)
    Raw r(port);
    r.send(std::string(1, '\x03') + str("/missing"));
    EXPECT_TRUE(r.closed_by_peer());
  }
  {  // ADD to a value that is not a number
    Raw r(port);
    r.send(std::string(1, '\x04') + str("/before_text") + u64(1));
    EXPECT_EQ(as_i64(r.recv(8)), 1);  // a fresh key: fine
    good.set("text", std::string("abc"));
    ASSERT_TRUE(good.check({"text"}));  // a round trip: the server has stored it
    r.send(std::string(1, '\x04') + str("/text") + u64(1));
    EXPECT_TRUE(r.closed_by_peer());
  }
  std::mt19937 rng(12345);
  for (int round = 0; round < 20; ++round) {  // random bytes
    Raw r(port);
    std::string junk(4096, '\0');
    for (auto& ch : junk) ch = static_cast<char>(rng());
    r.send(junk);
  }
  // A request cut in the middle, its sender still connected, does not block anyone.
  Raw half(port);
  half.send(std::string(1, '\x01') + u64(100) + "/par");

  EXPECT_EQ(good.get_string("before"), "1");
  good.set("after_garbage", std::string("yes"));
  EXPECT_EQ(good.add("count", 3), 3);
  const auto t0 = Clock::now();
  while (!waited.load() && seconds_since(t0) < 5) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(waited.load()) << "a pending WAIT was lost while the server handled garbage";
  waiter.join();
  TcpStore late("127.0.0.1", port, client_options());
  EXPECT_EQ(late.get_string("after_garbage"), "yes");
}

TEST(TcpStore, OversizedValueClosesThatClient) {
  ::setenv("SHOAL_STORE_MAX_VALUE", "1K", 1);
  TcpStore server("127.0.0.1", 0, server_options());
  ::unsetenv("SHOAL_STORE_MAX_VALUE");
  TcpStore big("127.0.0.1", server.port(), client_options(2s));
  big.set("small", Bytes(1000, 1));
  big.set("huge", Bytes(2000, 2));  // no reply for SET: the failure shows on the next call
  EXPECT_THROW(big.get("small"), PeerFailureError);
  TcpStore other("127.0.0.1", server.port(), client_options(300ms));
  EXPECT_EQ(other.get("small"), Bytes(1000, 1));
  EXPECT_FALSE(other.check({"huge"}));
}

TEST(TcpStore, ManyClients) {
  TcpStore server("127.0.0.1", 0, server_options());
  std::vector<std::unique_ptr<TcpStore>> clients;
  for (int i = 0; i < 64; ++i)
    clients.push_back(std::make_unique<TcpStore>("127.0.0.1", server.port(), client_options()));
  for (auto& c : clients) c->add("joined", 1);
  for (size_t i = 0; i < clients.size(); ++i) clients[i]->set(name("c", i), std::to_string(i));
  std::vector<std::string> keys;
  for (size_t i = 0; i < clients.size(); ++i) keys.push_back(name("c", i));
  clients[17]->wait(keys);
  EXPECT_EQ(server.add("joined", 0), 64);
  EXPECT_EQ(clients[63]->get_string("c5"), "5");
}

TEST(TcpStore, LostServerIsAPeerFailure) {
  auto server = std::make_unique<TcpStore>("127.0.0.1", 0, server_options());
  const uint16_t port = server->port();
  TcpStore c("127.0.0.1", port, client_options(20s));
  c.set("x", std::string("1"));

  std::atomic<int> waiter_result{0};  // 1: PeerFailure, 2: something else
  std::thread waiter([&] {
    TcpStore w("127.0.0.1", port, client_options(20s));
    try {
      w.wait({"never"});
      waiter_result = 2;
    } catch (const PeerFailureError&) {
      waiter_result = 1;
    } catch (...) {
      waiter_result = 2;
    }
  });
  std::this_thread::sleep_for(200ms);
  auto t0 = Clock::now();
  server.reset();  // joins its thread and closes every connection, waiters included
  EXPECT_LT(seconds_since(t0), 2.0) << "server shutdown hung";
  waiter.join();
  EXPECT_EQ(waiter_result.load(), 1);
  EXPECT_LT(seconds_since(t0), 3.0);

  t0 = Clock::now();
  try {
    c.add("x", 1);
    FAIL() << "add succeeded without a server";
  } catch (const PeerFailureError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << m;
    EXPECT_NE(m.find("crashed"), std::string::npos) << m;
  }
  // And again: one quick reconnection attempt, not a long retry loop.
  EXPECT_THROW(c.get("x"), PeerFailureError);
  EXPECT_LT(seconds_since(t0), 4.0);
}

// The exact bytes torch 2.x's client sends (captured from the installed torch with a fake
// server; see tests/tools/test_store_torch_interop.sh for the live check).
TEST(TcpStore, SpeaksTorch2WireFormatAsServer) {
  TcpStore server("127.0.0.1", 0, server_options());
  Raw torch(server.port(), false);
  // Every connection opens with VALIDATE and a PING, whose nonce comes back.
  torch.send(std::string("\x00\xce\xf7\x85\x3c\x0d\xea\x1d\x00\x00", 10));
  EXPECT_EQ(torch.recv(4), std::string("\xea\x1d\x00\x00", 4));
  // TCPStore(world_size=2)'s constructor: ADD "init/" 1 (no "/" prefix on this key)
  torch.send(std::string("\x04\x05\0\0\0\0\0\0\0init/\x01\0\0\0\0\0\0\0", 22));
  EXPECT_EQ(as_i64(torch.recv(8)), 1);
  // set("k", b"vv")
  torch.send(std::string("\x01\x02\0\0\0\0\0\0\0/k\x02\0\0\0\0\0\0\0vv", 21));
  EXPECT_EQ(server.get_string("k"), "vv");
  // add("cnt", 5)
  torch.send(std::string("\x04\x04\0\0\0\0\0\0\0/cnt\x05\0\0\0\0\0\0\0", 21));
  EXPECT_EQ(as_i64(torch.recv(8)), 5);
  EXPECT_EQ(server.add("cnt", 1), 6);
  // get("k"): WAIT then GET
  torch.send(std::string(1, '\x06') + u64(1) + str("/k"));
  EXPECT_EQ(torch.recv(1), std::string(1, '\0'));
  torch.send(std::string(1, '\x03') + str("/k"));
  EXPECT_EQ(torch.recv(10), u64(2) + "vv");
  // WAIT answered when another client sets the key
  torch.send(std::string(1, '\x06') + u64(2) + str("/k") + str("/later"));
  EXPECT_EQ(torch.recv(1, 200ms), "");
  server.set("later", std::string("x"));
  EXPECT_EQ(torch.recv(1), std::string(1, '\0'));
  // A WAIT the client gives up on: CANCEL_WAIT drops it and answers WAIT_CANCELED (1); the key
  // set afterwards sends nothing more.
  torch.send(std::string(1, '\x06') + u64(1) + str("/never"));
  EXPECT_EQ(torch.recv(1, 100ms), "");
  torch.send(std::string(1, '\x0c'));
  EXPECT_EQ(torch.recv(1), std::string(1, '\x01'));
  server.set("never", std::string("late"));
  // CHECK: 0 READY, 1 NOT_READY
  torch.send(std::string(1, '\x05') + u64(1) + str("/k"));
  EXPECT_EQ(torch.recv(1), std::string(1, '\0'));
  torch.send(std::string(1, '\x05') + u64(2) + str("/k") + str("/zz"));
  EXPECT_EQ(torch.recv(1), std::string(1, '\x01'));
  // GETNUMKEYS: init/, /k, /cnt, /later, /never
  torch.send(std::string(1, '\x07'));
  EXPECT_EQ(as_i64(torch.recv(8)), 5);
  // COMPARE_SET: swap when equal; else the current value; absent key + empty expected: set
  torch.send(std::string(1, '\x02') + str("/cnt") + str("6") + str("x"));
  EXPECT_EQ(torch.recv(9), str("x"));
  torch.send(std::string(1, '\x02') + str("/cnt") + str("6") + str("y"));
  EXPECT_EQ(torch.recv(9), str("x"));
  torch.send(std::string(1, '\x02') + str("/new") + str("") + str("q"));
  EXPECT_EQ(torch.recv(9), str("q"));
  torch.send(std::string(1, '\x02') + str("/new2") + str("e") + str("q"));
  EXPECT_EQ(torch.recv(9), str("e"));
  EXPECT_FALSE(server.check({"new2"}));
  // APPEND: onto an existing value, or a new key
  torch.send(std::string(1, '\x09') + str("/k") + str("+"));
  torch.send(std::string(1, '\x09') + str("/fresh") + str("ab"));
  EXPECT_EQ(server.get_string("k"), "vv+");
  EXPECT_EQ(server.get_string("fresh"), "ab");
  // MULTI_SET: count, then (key, value) pairs; MULTI_GET: one value per key, in order
  torch.send(std::string(1, '\x0b') + u64(2) + str("/a") + str("x") + str("/b") + str("yz"));
  torch.send(std::string(1, '\x0a') + u64(3) + str("/b") + str("/a") + str("/k"));
  EXPECT_EQ(torch.recv(10 + 9 + 11), str("yz") + str("x") + str("vv+"));
  // DELETE_KEY: number deleted
  torch.send(std::string(1, '\x08') + str("/k"));
  EXPECT_EQ(as_i64(torch.recv(8)), 1);
  torch.send(std::string(1, '\x08') + str("/k"));
  EXPECT_EQ(as_i64(torch.recv(8)), 0);
  // A request split over many sends is reassembled.
  std::string split = std::string(1, '\x01') + str("/split") + str("pieces");
  for (char ch : split) {
    torch.send(std::string(1, ch));
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(server.get_string("split"), "pieces");
}

// A listening socket on loopback for a fake server; `port` is where it listens.
int listen_on_loopback(uint16_t& port) {
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::listen(lfd, 4), 0);
  socklen_t len = sizeof a;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return lfd;
}

TEST(TcpStore, SpeaksTorch2WireFormatAsClient) {
  // A fake server that records what our client sends.
  uint16_t port = 0;
  const int lfd = listen_on_loopback(port);
  std::unique_ptr<Raw> peer;
  std::thread acceptor(
      [&] { peer = std::make_unique<Raw>(::accept(lfd, nullptr, nullptr), true); });
  std::thread opening([&] {
    acceptor.join();
    // VALIDATE with torch's number, then a PING whose nonce the client expects back.
    const std::string hello = peer->recv(10);
    ASSERT_EQ(hello.size(), 10u);
    EXPECT_EQ(hello.substr(0, 5), kValidate);
    EXPECT_EQ(hello[5], '\x0d');
    peer->send(hello.substr(6, 4));
  });
  TcpStore c("127.0.0.1", port, client_options(3s));
  opening.join();
  ::close(lfd);

  c.set("k", std::string("vv"));
  EXPECT_EQ(peer->recv(21), std::string("\x01\x02\0\0\0\0\0\0\0/k\x02\0\0\0\0\0\0\0vv", 21));

  std::thread reply_add([&] {
    EXPECT_EQ(peer->recv(21), std::string("\x04\x04\0\0\0\0\0\0\0/cnt\x05\0\0\0\0\0\0\0", 21));
    peer->send(u64(7));
  });
  EXPECT_EQ(c.add("cnt", 5), 7);
  reply_add.join();

  std::thread reply_get([&] {
    EXPECT_EQ(peer->recv(19), std::string(1, '\x06') + u64(1) + str("/g"));
    peer->send(std::string(1, '\0'));
    EXPECT_EQ(peer->recv(11), std::string(1, '\x03') + str("/g"));
    peer->send(str("abc"));
  });
  EXPECT_EQ(c.get_string("g"), "abc");
  reply_get.join();

  std::thread reply_check([&] {
    EXPECT_EQ(peer->recv(1 + 8 + 10 + 11),
              std::string(1, '\x05') + u64(2) + str("/a") + str("/bb"));
    peer->send(std::string(1, '\x01'));
    EXPECT_EQ(peer->recv(1 + 10), std::string(1, '\x08') + str("/a"));
    peer->send(u64(1));
  });
  EXPECT_FALSE(c.check({"a", "bb"}));
  EXPECT_TRUE(c.remove("a"));
  reply_check.join();
}

TEST(TcpStore, AClientRefusesAStoreThatDoesNotSpeakTorch2) {
  // A torch 1.13 server reads VALIDATE as a SET and never answers the PING.
  uint16_t port = 0;
  const int lfd = listen_on_loopback(port);
  std::thread silent([&] {
    Raw peer(::accept(lfd, nullptr, nullptr), true);
    peer.recv(10);
    peer.recv(1, 2s);
  });
  try {
    TcpStore c("127.0.0.1", port, client_options(5s));
    ADD_FAILURE() << "connected to a store that never answered the opening PING";
  } catch (const PeerFailureError& e) {
    EXPECT_NE(std::string(e.what()).find("torch 2.x's TCPStore protocol"), std::string::npos)
        << e.what();
  }
  silent.join();
  ::close(lfd);
}

// ---------------------------------------------------------------------------------------
// Authentication (Options::auth_key; by default SHOAL_AUTH_KEY)
// ---------------------------------------------------------------------------------------

TcpStore::Options keyed(TcpStore::Options o, const std::string& key) {
  o.auth_key = key;
  return o;
}

// The code and message of what constructing a client with `options` throws ("" when nothing).
std::pair<ErrorCode, std::string> client_error(uint16_t port, const TcpStore::Options& options) {
  try {
    TcpStore c("127.0.0.1", port, options);
    c.add("probe", 1);  // a request with a reply: a SET alone would not notice being dropped
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  return {ErrorCode::Internal, ""};
}

TEST(TcpStoreAuth, ClientsWithTheKeyShareData) {
  TcpStore server("127.0.0.1", 0, keyed(server_options(), "s3cret"));
  TcpStore a("127.0.0.1", server.port(), keyed(client_options(), "s3cret"));
  TcpStore b("127.0.0.1", server.port(), keyed(client_options(), "s3cret"));
  a.set("k", std::string("v"));
  EXPECT_EQ(b.get_string("k"), "v");
  EXPECT_EQ(b.add("n", 2), 2);
  EXPECT_EQ(server.add("n", 1), 3);
}

TEST(TcpStoreAuth, AClientWithAnotherKeyIsRefusedWithUnauthorized) {
  TcpStore server("127.0.0.1", 0, keyed(server_options(), "s3cret"));
  auto [code, what] = client_error(server.port(), keyed(client_options(), "guess"));
  EXPECT_EQ(code, ErrorCode::Unauthorized) << what;
  // The server's proof fails first (it is made with the other key): the client stops there.
  EXPECT_NE(what.find("did not prove it knows SHOAL_AUTH_KEY"), std::string::npos) << what;
  EXPECT_FALSE(server.check({"probe"})) << "nothing of the refused client may reach the store";
}

TEST(TcpStoreAuth, AClientWithoutAKeyIsDroppedBeforeItsFirstRequestIsServed) {
  TcpStore server("127.0.0.1", 0, keyed(server_options(), "s3cret"));
  // A torch-protocol client that does not authenticate: its SET is refused, the connection closed.
  Raw stranger(server.port());
  stranger.send(std::string(1, '\x01') + str("/k") + str("evil"));
  EXPECT_TRUE(stranger.closed_by_peer());
  // shoal's own client without a key: the server closes the connection under its first request.
  auto [code, what] = client_error(server.port(), keyed(client_options(), ""));
  EXPECT_EQ(code, ErrorCode::PeerFailure) << what;
  EXPECT_FALSE(server.check({"k", "probe"}));
  // The server lives on for clients that know the key.
  TcpStore good("127.0.0.1", server.port(), keyed(client_options(), "s3cret"));
  good.set("k", std::string("fine"));
  EXPECT_EQ(server.get_string("k"), "fine");
}

TEST(TcpStoreAuth, AKeyedClientRefusesAStoreWithoutAKey) {
  TcpStore server("127.0.0.1", 0, keyed(server_options(), ""));
  auto [code, what] = client_error(server.port(), keyed(client_options(), "s3cret"));
  EXPECT_EQ(code, ErrorCode::Unauthorized) << what;
  EXPECT_NE(what.find("closed the connection when this process asked to authenticate"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("SHOAL_STORE_AUTH=0"), std::string::npos) << what;
}

TEST(TcpStoreAuth, AKeyedClientRefusesAStrangerServer) {
  // A fake server that answers the challenge with bytes of its own choosing.
  uint16_t port = 0;
  const int lfd = listen_on_loopback(port);
  std::string hello, proof;
  std::thread fake([&] {
    Raw peer(::accept(lfd, nullptr, nullptr), true);
    hello = peer.recv(33);
    peer.send(std::string(64, '\x5a'));
    proof = peer.recv(32, 1s);
  });
  auto [code, what] = client_error(port, keyed(client_options(3s, 3s), "s3cret"));
  fake.join();
  ::close(lfd);
  ASSERT_EQ(hello.size(), 33u);
  EXPECT_EQ(static_cast<uint8_t>(hello[0]), 0xA5) << "the client asks to authenticate first";
  EXPECT_EQ(code, ErrorCode::Unauthorized) << what;
  EXPECT_NE(what.find("did not prove it knows SHOAL_AUTH_KEY"), std::string::npos) << what;
  EXPECT_TRUE(proof.empty()) << "the client must not answer a server that failed its proof";
}

// The child of the next test, in a fresh process (SHOAL_AUTH_KEY is read once per process):
// exits 10, + 1 when a client with default options is admitted by a server with default
// options, + 2 when a client without a key is.
TEST(TcpStoreAuth, DefaultOptionsChild) {
  auto admitted = [](uint16_t port, const TcpStore::Options& o) {
    try {
      TcpStore c("127.0.0.1", port, o);
      c.add("a", 1);
      return true;
    } catch (const Error&) {
      return false;
    }
  };
  TcpStore server("127.0.0.1", 0, server_options());
  ::_exit(10 + (admitted(server.port(), client_options()) ? 1 : 0) +
          (admitted(server.port(), keyed(client_options(), "")) ? 2 : 0));
}

TEST(TcpStoreAuth, TheJobKeyIsTheDefaultAndStoreAuthZeroOpensTheStore) {
  auto in_child = [](const char* store_auth) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("SHOAL_TEST_CHILD", "1", 1);  // test_main.cpp runs *Child tests only then
      ::setenv("SHOAL_AUTH_KEY", "from-env", 1);
      ::setenv("SHOAL_STORE_AUTH", store_auth, 1);
      ::execl("/proc/self/exe", "test_store", "--gtest_filter=TcpStoreAuth.DefaultOptionsChild",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(in_child("1"), 11)
      << "with SHOAL_AUTH_KEY the store admits clients with it, and only them";
  EXPECT_EQ(in_child("0"), 13) << "SHOAL_STORE_AUTH=0 leaves the store open to every client";
}

// ---------------------------------------------------------------------------------------
// FileStore
// ---------------------------------------------------------------------------------------

class FileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shoal_test_store_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/store";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_, path_;
};

TEST_F(FileStoreTest, BasicOperations) {
  FileStore s(path_, 300ms);
  EXPECT_FALSE(s.check({"a"}));
  s.set("a", std::string("1"));
  EXPECT_EQ(s.get_string("a"), "1");
  s.set("a", std::string("2"));
  EXPECT_EQ(s.get_string("a"), "2");
  Bytes binary = {0, 255, 0, 7};
  s.set("bin", binary);
  EXPECT_EQ(s.get("bin"), binary);
  EXPECT_EQ(s.add("n", 5), 5);
  EXPECT_EQ(s.add("n", -7), -2);
  EXPECT_EQ(s.get_string("n"), "-2");
  s.set("text", std::string("abc"));
  EXPECT_THROW(s.add("text", 1), InvalidArgumentError);
  EXPECT_TRUE(s.check({"a", "n"}));
  EXPECT_TRUE(s.remove("a"));
  EXPECT_FALSE(s.remove("a"));
  EXPECT_FALSE(s.check({"a"}));

  FileStore other(path_);  // a second handle on the same file sees everything
  EXPECT_EQ(other.get("bin"), binary);
}

TEST_F(FileStoreTest, GetWaitsAndTimesOutWithinBounds) {
  FileStore s(path_, 300ms);
  std::thread late([&] {
    std::this_thread::sleep_for(150ms);
    FileStore w(path_);
    w.set("late", std::string("ok"));
  });
  EXPECT_EQ(s.get_string("late"), "ok");
  late.join();

  auto t0 = Clock::now();
  try {
    s.wait({"never"}, 250ms);
    FAIL() << "wait returned";
  } catch (const TimeoutError& e) {
    EXPECT_GE(seconds_since(t0), 0.24);
    EXPECT_LT(seconds_since(t0), 2.0);
    EXPECT_NE(std::string(e.what()).find("never"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find(path_), std::string::npos);
  }
  t0 = Clock::now();
  EXPECT_THROW(s.get("never"), TimeoutError);
  EXPECT_LT(seconds_since(t0), 2.0);
}

TEST_F(FileStoreTest, WorksAcrossForkedProcesses) {
  constexpr int kChildren = 4, kAdds = 50;
  FileStore parent(path_, 10s);
  std::vector<pid_t> pids;
  for (int i = 0; i < kChildren; ++i) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int code = 0;
      try {
        FileStore s(path_, 10s);
        for (int k = 0; k < kAdds; ++k) s.add("counter", 1);
        s.set("child" + std::to_string(i), std::to_string(i * 10));
        if (s.get_string("go") != "go") code = 3;
        // Every child sees every other child's key.
        for (int j = 0; j < kChildren; ++j)
          if (s.get_string("child" + std::to_string(j)) != std::to_string(j * 10)) code = 4;
      } catch (...) {
        code = 2;
      }
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<std::string> keys;
  for (int i = 0; i < kChildren; ++i) keys.push_back("child" + std::to_string(i));
  parent.wait(keys);
  EXPECT_EQ(parent.add("counter", 0), kChildren * kAdds);
  parent.set("go", std::string("go"));
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
}

TEST_F(FileStoreTest, IgnoresARecordCutShortByACrash) {
  {
    FileStore s(path_);
    s.set("kept", std::string("yes"));
  }
  {
    std::ofstream f(path_, std::ios::app | std::ios::binary);
    f << 'S' << std::string("\x05\0\0\0\0\0\0\0", 8) << "hal";  // half a record
  }
  FileStore s(path_, 300ms);
  EXPECT_EQ(s.get_string("kept"), "yes");
  s.set("next", std::string("fine"));
  EXPECT_EQ(s.get_string("next"), "fine");
  EXPECT_EQ(s.get_string("kept"), "yes");
}

TEST_F(FileStoreTest, RefusesAFileThatIsNotAStore) {
  {
    std::ofstream f(path_);
    f << "some unrelated file contents";
  }
  EXPECT_THROW(FileStore s(path_), InvalidArgumentError);
  EXPECT_THROW(FileStore s(dir_ + "/no/such/dir/store"), InvalidArgumentError);
}

// ---------------------------------------------------------------------------------------
// PrefixStore
// ---------------------------------------------------------------------------------------

TEST(PrefixStore, IsolatesNamespaces) {
  auto base = std::make_shared<TcpStore>("127.0.0.1", 0, server_options(400ms));
  PrefixStore a("job_a", base), b("job_b", base);
  a.set("k", std::string("from a"));
  b.set("k", std::string("from b"));
  EXPECT_EQ(a.get_string("k"), "from a");
  EXPECT_EQ(b.get_string("k"), "from b");
  EXPECT_EQ(base->get_string("job_a/k"), "from a");
  EXPECT_FALSE(base->check({"k"}));

  EXPECT_EQ(a.add("n", 2), 2);
  EXPECT_EQ(b.add("n", 5), 5);
  EXPECT_EQ(a.add("n", 0), 2);

  a.set("only_a", std::string("1"));
  EXPECT_TRUE(a.check({"only_a", "k"}));
  EXPECT_FALSE(b.check({"only_a"}));
  EXPECT_TRUE(a.remove("k"));
  EXPECT_FALSE(a.check({"k"}));
  EXPECT_EQ(b.get_string("k"), "from b");

  try {
    b.wait({"only_a"}, 200ms);
    FAIL() << "b saw a's key";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("job_b/only_a"), std::string::npos) << e.what();
  }
  auto values = a.multi_get({"only_a", "n"});
  ASSERT_EQ(values.size(), 2u);
  EXPECT_EQ(std::string(values[0].begin(), values[0].end()), "1");
  EXPECT_EQ(values[1], base->get("job_a/n"));
  // Its own timeout applies to get().
  a.set_timeout(150ms);
  const auto t0 = Clock::now();
  EXPECT_THROW(a.get("missing"), TimeoutError);
  EXPECT_LT(seconds_since(t0), 0.35);
}

TEST(PrefixStore, OverAFileStore) {
  char tmpl[] = "/tmp/shoal_test_prefix_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  auto base = std::make_shared<FileStore>(std::string(tmpl) + "/s", 300ms);
  PrefixStore a("x", base), b("y", base);
  a.set("k", std::string("1"));
  EXPECT_FALSE(b.check({"k"}));
  EXPECT_EQ(base->get_string("x/k"), "1");
  std::filesystem::remove_all(tmpl);
}
