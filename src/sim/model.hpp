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
  // The receiving direction of a NIC where it differs from nic_bw (a home's 40 Mbit/s up and
  // 200 Mbit/s down); 0: nic_bw.
  double nic_down_bw = 0;
  // A wide-area network above the hosts, as netcluster.sh's WAN mode emulates it (src/wan):
  // host h lies in region h mod regions; a message between two hosts pays their regions'
  // one-way delay on top of nic_latency, and between two regions every flow also shares the
  // line from one to the other. Random loss is kept from the spec but not modelled: shoal's
  // streams under BBR hold their rate through it (docs/scale.md, "Regions").
  struct Path {
    double bw = 0;     // the line between two regions, per direction; 0: none (inside a region)
    double delay = 0;  // one way, seconds
    double loss = 0;
  };
  int regions = 1;
  std::vector<Path> paths;  // regions x regions, row = from; empty: no delay anywhere

  int host_of(int rank) const { return rank / ranks_per_host; }
  int nic_of(int rank) const { return stripe ? 0 : (rank % ranks_per_host) % nics; }
  /// The leaf of `host` among `hosts` (hosts_per_leaf > 0).
  int leaf_of(int host, int hosts) const {
    const int leaves = (hosts + hosts_per_leaf - 1) / hosts_per_leaf;
    return alternate_leaves ? host % leaves : host / hosts_per_leaf;
  }
  int region_of(int host) const { return host % regions; }
  /// The path between the regions of two hosts; nullptr without one.
  const Path* path(int host_from, int host_to) const {
    if (paths.empty()) return nullptr;
    return &paths[static_cast<size_t>(region_of(host_from)) * static_cast<size_t>(regions) +
                  static_cast<size_t>(region_of(host_to))];
  }
  double down_bw() const { return nic_down_bw > 0 ? nic_down_bw : nic_bw; }
};

/// The rate each ordered pair of `p` ranks gets alone on `m` (bytes per second, [from * p + to],
/// 0 on the diagonal): what measuring the links of a communicator (tune/links.hpp) would find
/// there. Ranks of one host: its memory bus (or one transfer's cap); of two hosts: a NIC (all
/// of them, striped), and through the core, a leaf's uplink.
std::vector<double> pair_rates(const ClusterModel& m, int p);
/// The one-way latency of each ordered pair of `p` ranks on `m` (seconds, laid out as
/// pair_rates): inside a host intra_latency, between hosts nic_latency plus their path's delay.
std::vector<double> pair_latencies(const ClusterModel& m, int p);

/// The model of the network a WAN spec describes (src/wan/model.hpp's text, which
/// `netcluster.sh spec` prints): the endpoints of one namespace are a host's NICs, hosts in
/// the order they first appear; their rates, regions and paths as given (an endpoint outside
/// every namespace, the root's, is left out). `ranks_per_host` and the fields a spec does not
/// hold come from `base`. Throws InvalidArgumentError where the spec does not fit the model:
/// hosts of different NIC counts or rates, host h not in region h mod regions.
ClusterModel model_from_wan(const std::string& spec_text, ClusterModel base = {});
/// The same, from a file.
ClusterModel load_wan_model(const std::string& path, ClusterModel base = {});

/// InvalidArgumentError naming what is wrong: ranks per host, NICs or taper not positive, paths not
/// regions x regions, regions beside a fat tree, a negative delay or rate.
void check_model(const ClusterModel& m);

/// JSON text of the model (every field, SI units as above; the paths as a list of objects).
std::string to_json(const ClusterModel& m);
/// Reads the fields a JSON object has (the others keep their values in `base`); throws
/// InvalidArgumentError naming the field on a bad value.
ClusterModel model_from_json(const std::string& text, ClusterModel base = {});
/// Loads a model file; throws InvalidArgumentError when unreadable.
ClusterModel load_model(const std::string& path, ClusterModel base = {});

/// Frontier-like node: 8 ranks (GCDs), 4 NICs of 25 GB/s, 2 us, fast local links.
ClusterModel frontier_model();

}  // namespace shoal::sim
