// A chaos soak's worker process: joins the job through the driver's store, runs the workload
// (chaos/workload.hpp) and checks every result, admits joiners at checkpoints, and logs every
// event as one JSON line for the driver (chaos/driver.hpp). After a failure the survivors
// shrink, learn the members' stable ids again and agree on the smallest op index not completed
// by all (all_reduce max of -next_op), and re-issue from there: an op is either verified by
// every member of some epoch or re-issued, never skipped.
#pragma once

#include <cstdint>
#include <string>

namespace shoal::chaos {

/// A worker's exit status, which the driver reads.
enum WorkerExit : int {
  kExitDone = 0,      // finished on the driver's stop
  kExitCorrupt = 2,   // a result differed from the expected one
  kExitExcluded = 3,  // a shrink was decided without this worker (e.g. it was frozen)
  kExitCannot = 4,    // cannot continue (failed shrink, failed join, ...): restart me
  kExitUsage = 64,
};

struct WorkerArgs {
  int id = 0;           // stable id, kept across restarts
  int gen = 0;          // restart generation of this id
  int ranks = 8;        // the job's full size (joiners grow it back to this)
  int grow_every = 16;  // ops between checkpoints
  uint64_t seed = 1;
  bool joiner = false;  // a restarted worker: enters through grow()/join()
  std::string store;    // the driver's store, host:port
  std::string out;      // directory of worker-<id>-<gen>.jsonl
};

/// Wall-clock milliseconds: the time base of the events of every process of a run.
double wall_ms();

/// Runs one worker to its end; returns its WorkerExit.
int run_worker(const WorkerArgs& args);

}  // namespace shoal::chaos
