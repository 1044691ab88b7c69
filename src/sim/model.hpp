// The cluster a simulation runs on: hosts of `ranks_per_host` ranks with `nics` NICs each,
// an optional two-level fat tree above them, and the per-byte costs of local work. Times in
// seconds, bandwidths in bytes per second (one direction of a NIC or link).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shoal::sim {

struct ClusterModel {
  int ranks_per_host = 8;
  int nics = 1;  // per host; local rank i uses NIC i mod nics, unless stripe
  // 1: a flow between hosts uses every NIC of both (shoal's multi-rail TCP stripes each pair's
  // stream over all of them): the host's NICs act as one of nics x nic_bw. 0: one NIC per
  // flow, the local rank's (how NCCL and PCCL assign rails).
  int stripe = 0;
  double nic_bw = 25e9;       // per NIC and direction
  double nic_latency = 2e-6;  // one message between hosts, start to first byte delivered
  double intra_bw = 100e9;    // a host's memory bus, shared by every intra-host transfer on it
  double intra_flow_bw = 0;   // cap of one intra-host transfer (one core copying); 0: none
  double intra_latency = 0.5e-6;
  double overhead = 0;              // CPU seconds per message on the sending and the receiving rank
  double reduce_cost = 0.1e-9;      // seconds per byte reduced (on the rank's core)
  double copy_cost = 0.05e-9;       // seconds per byte copied or finalized
  uint64_t eager_bytes = 64 << 10;  // larger messages wait until their receive is posted
  // A token bucket on every NIC direction (tc's tbf, which shapes the emulated cluster; a
  // cloud VM's burst allowance): nic_bw refills it, and while it holds tokens the NIC runs at
  // nic_burst_bw. 0 in either: no bucket, nic_bw always.
  uint64_t nic_burst_bytes = 0;
  double nic_burst_bw = 0;
  // Fat tree: hosts_per_leaf hosts under each leaf switch; a leaf's uplink (and downlink) to
  // the core carries hosts_per_leaf * nics * nic_bw / taper. 0: a full-bisection network.
  int hosts_per_leaf = 0;
  double taper = 1;
  // 1: host h hangs under leaf h mod leaves (hosts alternate between the leaves, as a launcher
  // that knows nothing of the tree numbers them); 0: in blocks of hosts_per_leaf.
  int alternate_leaves = 0;

  int host_of(int rank) const { return rank / ranks_per_host; }
  int nic_of(int rank) const { return stripe ? 0 : (rank % ranks_per_host) % nics; }
  /// The leaf of `host` among `hosts` (hosts_per_leaf > 0).
  int leaf_of(int host, int hosts) const {
    const int leaves = (hosts + hosts_per_leaf - 1) / hosts_per_leaf;
    return alternate_leaves ? host % leaves : host / hosts_per_leaf;
  }
};

/// The rate each ordered pair of `p` ranks gets alone on `m` (bytes per second, [from * p + to],
/// 0 on the diagonal): what measuring the links of a communicator (tune/links.hpp) would find
/// there. Ranks of one host: its memory bus (or one transfer's cap); of two hosts: a NIC (all
/// of them, striped), and through the core, a leaf's uplink.
std::vector<double> pair_rates(const ClusterModel& m, int p);

/// JSON text of the model (every field, SI units as above).
std::string to_json(const ClusterModel& m);
/// Reads the fields a JSON object has (the others keep their values in `base`); throws
/// InvalidArgumentError naming the field on a bad value.
ClusterModel model_from_json(const std::string& text, ClusterModel base = {});
/// Loads a model file; throws InvalidArgumentError when unreadable.
ClusterModel load_model(const std::string& path, ClusterModel base = {});

/// Frontier-like node: 8 ranks (GCDs), 4 NICs of 25 GB/s, 2 us, fast local links.
ClusterModel frontier_model();

}  // namespace shoal::sim
