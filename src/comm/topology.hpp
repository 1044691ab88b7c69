// Which ranks share a host, and the cores each host gives them: every rank publishes its host
// identity and CPU affinity through the store.
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
  /// Per host: the CPUs its ranks may run on (the union of their affinity masks), so that a
  /// host of more ranks than that shares cores (a launcher's binding counts, not the CPUs online).
  std::vector<int> cores_of_host;
  int local_cores = 0;  // this rank's host's
};

/// The CPUs this process may run on (sched_getaffinity), as hex digits, lowest CPUs first.
std::string affinity_mask();
/// How many CPUs the union of `masks` (affinity_mask's form) names.
int cores_in_union(const std::vector<std::string>& masks);

/// SHOAL_HOST_ID, else hostname + boot id + network namespace (ranks in different network
/// namespaces count as different hosts, which is how the emulated cluster works).
std::string host_identity();

Topology discover_topology(Store& store, const std::string& prefix, int rank, int size);

/// Test hook: the host identity of communicators created on the calling thread from now on
/// (over SHOAL_HOST_ID; empty: none), so that ranks run as threads can play different hosts.
void set_thread_host_id_for_testing(std::string id);

}  // namespace shoal::comm
