// Runs ranks as threads of this process on emulated hosts: each thread takes a host identity of
// its own (comm::set_thread_host_id_for_testing), so ranks of one "host" share memory and the
// others talk TCP over loopback.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/topology.hpp"
#include "shoal/shoal.hpp"
#include "support/ranks.hpp"

namespace shoal::testing {

/// Runs one rank per entry of `host_of` (its host index) as threads; returns the first error.
inline std::string run_on_hosts(const std::vector<int>& host_of,
                                const std::function<void(Communicator&)>& fn) {
  auto server = make_server_store();
  const int n = static_cast<int>(host_of.size());
  std::mutex mu;
  std::string first_error;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      comm::set_thread_host_id_for_testing("emulated-host-" + std::to_string(host_of[r]));
      try {
        TcpStore::Options o;
        o.timeout = std::chrono::seconds(60);
        auto store = std::make_shared<TcpStore>("127.0.0.1", server->port(), o);
        Options options;
        options.timeout = std::chrono::seconds(60);
        Communicator comm = Communicator::create(store, r, n, options);
        fn(comm);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.empty()) first_error = "rank " + std::to_string(r) + ": " + e.what();
      }
      comm::set_thread_host_id_for_testing("");
    });
  }
  for (auto& t : threads) t.join();
  return first_error;
}

}  // namespace shoal::testing
