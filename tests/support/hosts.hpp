// Runs ranks as threads of this process on emulated hosts: each thread takes a host identity of
// its own (comm::set_thread_host_id_for_testing, thread-local), so ranks of one "host" share
// memory and the others talk TCP over loopback.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "comm/topology.hpp"
#include "shoal/shoal.hpp"
#include "support/ranks.hpp"

namespace shoal::testing {

/// Runs one rank per entry of `host_of` (its host index) as threads; returns the first error.
inline std::string run_on_hosts(const std::vector<int>& host_of,
                                const std::function<void(Communicator&)>& fn) {
  Options options;
  options.timeout = std::chrono::seconds(60);
  return run_ranks(static_cast<int>(host_of.size()), fn, options, [&](int r) {
    comm::set_thread_host_id_for_testing("emulated-host-" + std::to_string(host_of[r]));
  });
}

}  // namespace shoal::testing
