// Helper of test_store_torch_interop.sh: the shoal side of the TCPStore interop checks.
//   shoal_store_interop serve PORT_FILE   host a store; a torch client talks to it
//   shoal_store_interop client HOST PORT  join a store torch hosts
//   shoal_store_interop rank              one rank under torchrun: detect() + open_store()
// Exits 0 when every check passed; prints what failed otherwise.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "shoal/error.hpp"
#include "shoal/store.hpp"
#include "store/bootstrap.hpp"

using namespace shoal;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

int failures = 0;

#define CHECK_EQ(a, b)                                                                          \
  do {                                                                                          \
    auto va_ = (a);                                                                             \
    auto vb_ = (b);                                                                             \
    if (!(va_ == vb_)) {                                                                        \
      std::cerr << "FAILED line " << __LINE__ << ": " #a " == " #b " (" << va_ << " vs " << vb_ \
                << ")\n";                                                                       \
      ++failures;                                                                               \
    }                                                                                           \
  } while (0)

int serve(const std::string& port_file) {
  TcpStore::Options o;
  o.is_server = true;
  o.timeout = 60s;
  TcpStore store("127.0.0.1", 0, o);
  {
    std::ofstream f(port_file + ".tmp");
    f << store.port() << "\n";
  }
  std::rename((port_file + ".tmp").c_str(), port_file.c_str());
  CHECK_EQ(store.get_string("from_torch"), std::string("hello shoal"));  // set by torch's client
  CHECK_EQ(store.add("counter", 10), int64_t{10});
  store.set("from_shoal", std::string("hi torch"));
  store.wait({"torch_done"});
  CHECK_EQ(store.get_string("counter"), std::string("11"));  // torch added 1
  CHECK_EQ(store.check({"cas"}), false);                     // torch deleted it
  return failures == 0 ? 0 : 1;
}

int client(const std::string& host, int port) {
  TcpStore::Options o;
  o.timeout = 30s;
  o.connect_timeout = 30s;
  TcpStore store(host, static_cast<uint16_t>(port), o);
  CHECK_EQ(store.get_string("from_torch"), std::string("hello shoal"));
  CHECK_EQ(store.add("counter", 5), int64_t{12});  // torch added 7
  CHECK_EQ(store.check({"from_torch"}), true);
  CHECK_EQ(store.check({"from_torch", "nope"}), false);
  store.set("tmp", std::string("x"));
  CHECK_EQ(store.remove("tmp"), true);
  CHECK_EQ(store.remove("tmp"), false);
  // A timeout against torch's server, then the client keeps working.
  const auto t0 = Clock::now();
  try {
    store.wait({"never"}, 300ms);
    std::cerr << "FAILED: wait for a missing key returned\n";
    ++failures;
  } catch (const TimeoutError&) {
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s < 0.25 || s > 5) {
      std::cerr << "FAILED: the wait timed out after " << s << " s instead of 0.3 s\n";
      ++failures;
    }
  }
  store.set("after_timeout", std::string("ok"));
  CHECK_EQ(store.get_string("after_timeout"), std::string("ok"));
  // A key torch sets only after we asked for it.
  store.set("want_late", std::string("1"));
  CHECK_EQ(store.get_string("late"), std::string("L"));
  Bytes binary = {0, 1, 0, 255};
  store.set("binary", binary);
  store.set("from_shoal", std::string("hi torch"));
  store.set("shoal_done", std::string("1"));
  return failures == 0 ? 0 : 1;
}

int rank() {
  auto info = bootstrap::detect(bootstrap::process_env());
  std::cout << "rank " << info.rank << "/" << info.size << " launcher=" << info.launcher
            << " external=" << info.store_is_external << " store=" << info.store_host << ":"
            << info.store_port << " prefix=" << info.key_prefix << std::endl;
  auto store = bootstrap::open_store(info, 60s);
  store->set("rank" + std::to_string(info.rank), std::to_string(info.rank * 3));
  for (int r = 0; r < info.size; ++r)
    CHECK_EQ(store->get_string("rank" + std::to_string(r)), std::to_string(r * 3));
  CHECK_EQ(store->add("arrived", 1) <= info.size, true);
  // Whoever hosts the store (rank 0 without the agent's store) leaves last.
  store->set("left" + std::to_string(info.rank), std::string("1"));
  if (info.rank == 0)
    for (int r = 0; r < info.size; ++r) store->wait({"left" + std::to_string(r)});
  if (failures == 0) std::cout << "rank " << info.rank << " OK" << std::endl;
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "serve" && argc == 3) return serve(argv[2]);
    if (mode == "client" && argc == 4) return client(argv[2], std::atoi(argv[3]));
    if (mode == "rank" && argc == 2) return rank();
  } catch (const std::exception& e) {
    std::cerr << "FAILED: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "usage: shoal_store_interop serve PORT_FILE | client HOST PORT | rank\n";
  return 2;
}
