// Which ranks share a host: every rank publishes its host identity through the store.
#pragma once

#include <string>
#include <vector>

#include "shoal/store.hpp"

namespace shoal::comm {

struct Topology {
  std::vector<int> host_of;  // host index of every rank, hosts numbered by first rank
  int local_rank = 0;
  int local_size = 1;
  int num_hosts = 1;
};

/// SHOAL_HOST_ID, else hostname + boot id + network namespace (ranks in different network
/// namespaces count as different hosts, which is how the emulated cluster works).
std::string host_identity();

Topology discover_topology(Store& store, const std::string& prefix, int rank, int size);

/// Test hook: the host identity of communicators created on the calling thread from now on
/// (over SHOAL_HOST_ID; empty: none), so that ranks run as threads can play different hosts.
void set_thread_host_id_for_testing(std::string id);

}  // namespace shoal::comm
