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
  /// The CPU SHOAL_BIND=auto binds this process to (choose_bind_cpu), or -1: leave it.
  int bind_cpu = -1;
};

/// The CPUs this process may run on (sched_getaffinity), as hex digits, lowest CPUs first.
std::string affinity_mask();
/// How many CPUs the union of `masks` (affinity_mask's form) names.
int cores_in_union(const std::vector<std::string>& masks);

/// The CPU a rank binds its process to when nobody bound the ranks of its machine, or -1.
/// `masks` and `pids` are the machine's ranks' (affinity_mask's form), in rank order, this rank's
/// at `local_rank` (emulated hosts in network namespaces are one machine: they share its cores).
/// Nobody bound them when every mask is the same (torchrun, srun without
/// --cpu-bind, mpirun --bind-to none); each must be its own process (ranks run as threads share
/// one affinity) and the mask must hold a CPU for each. Then rank i takes the mask's i-th CPU.
int choose_bind_cpu(const std::vector<std::string>& masks, const std::vector<long>& pids,
                    int local_rank);
/// Binds every thread of this process to `cpu` (those started later inherit it); false when the
/// kernel refuses (a CPU outside the cgroup's set), which leaves the affinity as it was.
bool bind_process_to_cpu(int cpu);

/// hostname + boot id: the machine, whatever SHOAL_HOST_ID or the network namespace say
/// (emulated hosts share its cores).
std::string machine_identity();
/// SHOAL_HOST_ID, else hostname + boot id + network namespace (ranks in different network
/// namespaces count as different hosts, which is how the emulated cluster works).
std::string host_identity();

/// Every rank publishes its host identity, machine, affinity and pid. With SHOAL_BIND=auto, a rank
/// nobody bound binds its process here (choose_bind_cpu), once per process, when the launcher's
/// count of ranks on the node (LOCAL_WORLD_SIZE and the like) is this communicator's on the
/// machine.
Topology discover_topology(Store& store, const std::string& prefix, int rank, int size);

/// Test hook: the host identity of communicators created on the calling thread from now on
/// (over SHOAL_HOST_ID; empty: none), so that ranks run as threads can play different hosts.
void set_thread_host_id_for_testing(std::string id);

}  // namespace shoal::comm
