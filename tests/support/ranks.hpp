// Runs N ranks as threads of this process over real sockets: a TcpStore hosted in the test,
// one Communicator per thread. Exceptions in a rank fail the test with the rank's message.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shoal/shoal.hpp"

namespace shoal::testing {

inline std::shared_ptr<TcpStore> make_server_store() {
  TcpStore::Options o;
  o.is_server = true;
  o.timeout = std::chrono::seconds(60);
  return std::make_shared<TcpStore>("127.0.0.1", 0, o);
}

/// Calls fn(comm) on `n` ranks concurrently, rank r's communicator made with options_of(r);
/// returns the first error text ("" if none). `before_create(rank)` runs on each rank's thread
/// before its communicator is made.
inline std::string run_ranks(int n, const std::function<void(Communicator&)>& fn,
                             const std::function<Options(int)>& options_of,
                             const std::function<void(int)>& before_create = {}) {
  auto server = make_server_store();
  std::mutex mu;
  std::string first_error;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        if (before_create) before_create(r);
        TcpStore::Options o;
        o.timeout = std::chrono::seconds(60);
        auto store = std::make_shared<TcpStore>("127.0.0.1", server->port(), o);
        Communicator comm = Communicator::create(store, r, n, options_of(r));
        fn(comm);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.empty()) first_error = "rank " + std::to_string(r) + ": " + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return first_error;
}

/// run_ranks with the same `options` on every rank.
inline std::string run_ranks(int n, const std::function<void(Communicator&)>& fn,
                             Options options = {},
                             const std::function<void(int)>& before_create = {}) {
  return run_ranks(
      n, fn, [&options](int) { return options; }, before_create);
}

}  // namespace shoal::testing
