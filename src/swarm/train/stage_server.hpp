// A stage server: one replica of one stage of the model. It serves forward (stage input ->
// output) and stateless backward (the trainer resends the input; the server recomputes the
// forward and returns the input gradient), accumulates parameter gradients until the swarm has
// processed the round's global batch, averages them with the stage's other live replicas over a
// shoal communicator formed through the registry, and steps its optimizer. It renews its lease
// in the registry, takes over a stage's state from a live replica when it joins or moves, and
// (optionally) moves to the bottleneck stage when the rebalancing rule names it.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "swarm/net/codec.hpp"
#include "swarm/net/registry.hpp"
#include "swarm/train/model.hpp"

namespace shoal::swarm {

using Milliseconds = std::chrono::milliseconds;

struct ServerOptions {
  GptConfig model;
  OptimConfig optim;
  int stage = 0;
  std::string id;                  // unique; empty: "peer-<pid>-<random>"
  std::string host = "127.0.0.1";  // address to listen on and announce
  uint16_t port = 0;
  int round_microbatches = 8;  // the global batch, in micro-batches
  Codec codec = Codec::None;   // for activations and gradients this server sends
  // Delayed parameter updates: round r's micro-batches are computed on the parameters of round
  // r-1 (every step up to round r-2's), so they can flow while round r-1 averages and steps.
  // The server keeps that version beside the newest one. Every peer and trainer must agree.
  bool delayed_updates = false;
  // Averaging inside the stage: Codec::None sums the float32 gradients with the communicator's
  // all_reduce; fp16 or int8 run net/averaging.hpp's butterfly with error feedback. Every
  // replica of a swarm takes the same codec.
  Codec averaging_codec = Codec::None;
  double bandwidth = 0;  // MB/s this peer tells its group: its part of the butterfly (0: equal)
  // Heterogeneity emulation: every request's service time becomes slowdown * (compute +
  // device_ms per request), the extra spent asleep while holding the stage (a slower device).
  double slowdown = 1.0;
  double device_ms = 0;  // emulated accelerator time of a forward (backward: twice)
  // device_ms is per transformer block of the stage served (stages of unequal depth then cost
  // unequally on the emulated device), instead of per request.
  bool device_per_block = false;
  Milliseconds lease{3000};
  Milliseconds announce_every{500};
  Milliseconds averaging_timeout{15000};  // bound on forming the group and on its all_reduce
  Milliseconds join_window{2000};         // the group leader waits this long for stragglers
  bool rebalance = false;
  Milliseconds rebalance_period{10000};  // jittered by +-25 % per peer
  double rebalance_threshold = 0.10;
  int exit_in_averaging =
      -1;  // fault injection (tests): the process dies inside this round's averaging
  int64_t exit_after_claim =
      -1;  // fault injection (tests): dies after claiming one from this micro-batch on
};

/// What a server has done, for logs and tests.
struct ServerStats {
  int stage = -1;
  uint32_t round = 0;
  uint64_t forwards = 0, backwards = 0, duplicates = 0;
  uint64_t rounds_averaged = 0, group_failures = 0, state_loads = 0, moves = 0;
  uint64_t averaging_bytes = 0;  // sent to the group's other members
  double throughput = 0;         // samples per busy second
};

class StageServer {
 public:
  StageServer(ServerOptions options, std::shared_ptr<Registry> registry);
  ~StageServer();
  /// Serves until `stop` becomes true (or stop() is called): leases, averaging, rebalancing.
  void run(const std::atomic<bool>& stop);
  void stop();
  uint16_t port() const;
  ServerStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shoal::swarm
