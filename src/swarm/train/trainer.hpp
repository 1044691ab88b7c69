// A trainer: draws micro-batches (claimed from a per-round counter every trainer shares, so
// trainers split each global batch between them), drives each through the stages — forward to a
// replica of every stage but the last, then backward from the last stage (which computes the loss)
// to the first — keeping each stage's input so any replica can serve its backward. Replicas are
// chosen by stochastic wiring (router.hpp), per stage and direction; a failed or timed-out
// request is retried on another replica and the failing one banned. Micro-batches of round r+1
// start once every stage has stepped round r, or round r-1 with delayed updates (so that the
// pipeline keeps flowing while a round averages).
//
// Routing::static_pipeline is the baseline the evidence compares against: fixed pipelines
// (replica i of every stage forms pipeline i, GPipe-style, micro-batches dealt round-robin),
// no re-routing: a failed peer stops it.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "swarm/net/codec.hpp"
#include "swarm/net/registry.hpp"
#include "swarm/train/data.hpp"
#include "swarm/train/model.hpp"

namespace shoal::swarm {

enum class Routing { swarm, static_pipeline };

struct TrainerOptions {
  GptConfig model;
  std::string corpus = kDefaultCorpus;
  int micro_batch = 8;         // samples per micro-batch
  int round_microbatches = 8;  // global batch, in micro-batches
  int rounds = 20;             // optimizer steps to train (all trainers together)
  int inflight = 4;            // micro-batches this trainer drives at once
  uint64_t data_seed = 0;
  Codec codec = Codec::None;  // for activations and gradients this trainer sends
  Routing routing = Routing::swarm;
  bool delayed_updates = false;  // as the servers' (ServerOptions::delayed_updates)
  std::chrono::milliseconds request_timeout{20000};
  std::chrono::milliseconds give_up{180000};  // a micro-batch no replica could serve for this long
  std::chrono::milliseconds stall_timeout{
      20000};  // a round without progress: redo its lost micro-batches
  std::string id;
};

struct TrainerStats {
  uint64_t microbatches = 0, requests = 0, retries = 0, failures = 0;
  uint64_t recovered = 0;                       // micro-batches of a stalled round driven again
  uint64_t bytes_sent = 0, bytes_received = 0;  // tensor payloads between stages
};

class Trainer {
 public:
  Trainer(TrainerOptions options, std::shared_ptr<Registry> registry);
  ~Trainer();
  /// Trains until the swarm has finished options.rounds rounds or `stop`; throws the first
  /// error that ends training (a static pipeline's broken peer, or give_up passed).
  void run(const std::atomic<bool>& stop);
  TrainerStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shoal::swarm
