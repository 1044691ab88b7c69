// A whole swarm on this host (shoal-swarm local): hosts the embedded registry (or uses etcd),
// starts stage servers and trainers as processes of `swarm_exe`, kills servers at the given
// times, and writes progress.csv, peers.csv, rounds.csv, summary.json and logs/ under `out`.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "swarm/train/settings.hpp"

namespace shoal::swarm {

struct LocalOptions {
  std::string swarm_exe;  // shoal-swarm, whose serve and train subcommands run the peers
  int peers = 4, trainers = 1, rounds = 30, inflight = 4;
  std::string slowdown = "1", placement, kill_at, routing = "swarm", out = "swarm-run";
  double device_ms = 0, rebalance_period = 0, threshold = 0.1, time_limit = 1800,
         request_timeout = 20;
  bool check_reference = false;
  bool device_per_block = false;  // device_ms per block of the stage (ServerOptions)
  // Emulated hosts (scripts/netcluster.sh namespaces): server i runs in netns[(i + i / stages)
  // mod n] and announces that namespace's address, trainer t in netns[(n - 1 - t) mod n].
  // Empty: all here.
  std::vector<std::string> netns;
  std::string exit_in_averaging;  // "server3:2"
  std::string exit_after_claim;   // "server1:5"
};

/// Runs the swarm until its trainers finish, `stop` is set or the time limit passes.
/// Returns 0 when every round completed (and matched the reference, with check_reference).
int run_local(SwarmSettings settings, const LocalOptions& options, const std::atomic<bool>& stop);

}  // namespace shoal::swarm
