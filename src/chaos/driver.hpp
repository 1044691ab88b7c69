// A chaos soak's driver: hosts the rendezvous store, starts the workers (chaos/worker.hpp),
// injects one fault at a time (kill: SIGKILL; freeze: SIGSTOP ... SIGCONT; cut: ss -K of one
// TCP connection between two workers), restarts the killed as joiners, and reports faults by
// kind, faults survived, time to detect and to shrink, operations verified and lost, and leaks
// (fds, threads, /dev/shm segments, processes) in OUT/summary.json.
#pragma once

#include <cstdint>
#include <string>

namespace shoal::chaos {

struct RunArgs {
  int ranks = 8;
  double duration = 60, fault_every = 5, timeout = 10, shrink_wait = 3, restart_delay = 3;
  uint64_t seed = 1;
  std::string faults = "kill,freeze,cut", out = "chaos-out", transport = "tcp";
  int grow_every = 16;
  bool strict = false;  // a live worker left out by a shrink fails the run
};

/// Runs a soak; `worker_exe` is a program whose `worker` subcommand calls run_worker with the
/// options the driver passes (shoal-chaos). Returns 0 when every fault was survived, nothing
/// was lost or corrupt, no leak was found and no worker hung; 1 otherwise; kExitUsage for bad
/// arguments.
int run_driver(const RunArgs& args, const std::string& worker_exe);

}  // namespace shoal::chaos
