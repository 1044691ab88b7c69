// What every process of a swarm must agree on (model, optimizer, batches, codecs, corpus,
// registry), as options of shoal-swarm's subcommands and as the arguments a launcher passes
// them: swarm_args() is what add_swarm_options() parses back (tested).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "swarm/train/data.hpp"
#include "swarm/train/model.hpp"

namespace CLI {
class App;
}

namespace shoal::swarm {

struct SwarmSettings {
  GptConfig model;
  OptimConfig optim;
  std::string registry = "127.0.0.1:29600";
  int micro_batch = 8;
  int global_batch = 8;  // micro-batches per optimizer round
  std::string codec = "none";
  bool delayed_updates = false;  // round r computed on round r-1's parameters
  std::string averaging_codec = "none";
  std::string corpus = kDefaultCorpus;
  uint64_t data_seed = 0;
  int threads = 1;  // torch intra-op threads per process
};

/// Adds --registry, --stages, --d-model, ... to a subcommand, parsed into `settings`.
void add_swarm_options(CLI::App* app, SwarmSettings& settings);

/// The command-line arguments that add_swarm_options() parses back into `settings`.
std::vector<std::string> swarm_args(const SwarmSettings& settings);

}  // namespace shoal::swarm
