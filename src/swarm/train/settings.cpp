#include "swarm/train/settings.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

namespace shoal::swarm {
namespace {

// Text that reads back as the same double (std::to_string keeps six decimals).
std::string exact(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

void add_swarm_options(CLI::App* app, SwarmSettings& c) {
  app->add_option(
      "--registry", c.registry,
      "registry: host:port of the embedded one, or etcd://host:port[,host:port...][/SWARM]");
  app->add_option("--stages", c.model.stages, "pipeline stages of the model");
  app->add_option("--d-model", c.model.d_model, "model width");
  app->add_option("--layers", c.model.n_layers, "transformer blocks in all");
  app->add_option("--stage-layers", c.model.stage_layers,
                  "blocks of each stage, e.g. 1,1,4 (default: as even as possible)")
      ->delimiter(',');
  app->add_option("--heads", c.model.n_heads, "attention heads");
  app->add_option("--seq-len", c.model.seq_len, "tokens per sample");
  app->add_option("--model-seed", c.model.seed, "parameter initialisation seed");
  app->add_option("--lr", c.optim.lr, "Adam learning rate");
  app->add_option("--micro-batch", c.micro_batch, "samples per micro-batch");
  app->add_option("--global-batch", c.global_batch,
                  "micro-batches per optimizer step (whole swarm)");
  app->add_option("--codec", c.codec, "activations and gradients between stages: none|fp16|int8")
      ->check(CLI::IsMember({"none", "fp16", "int8"}));
  app->add_option("--averaging-codec", c.averaging_codec,
                  "averaging inside a stage: none (float32 all_reduce) | fp16 | int8 "
                  "(compressed butterfly with error feedback)")
      ->check(CLI::IsMember({"none", "fp16", "int8"}));
  app->add_flag("--delayed-updates", c.delayed_updates,
                "asynchronous rounds: round r runs on round r-1's parameters while r-1 averages");
  app->add_option("--corpus", c.corpus, "text file or directory (Debian: fortunes)");
  app->add_option("--data-seed", c.data_seed, "micro-batch sampling seed");
  app->add_option("--threads", c.threads, "torch threads per process");
}

std::vector<std::string> swarm_args(const SwarmSettings& c) {
  std::vector<std::string> args{"--registry",     c.registry,
                                "--stages",       std::to_string(c.model.stages),
                                "--d-model",      std::to_string(c.model.d_model),
                                "--layers",       std::to_string(c.model.n_layers),
                                "--heads",        std::to_string(c.model.n_heads),
                                "--seq-len",      std::to_string(c.model.seq_len),
                                "--model-seed",   std::to_string(c.model.seed),
                                "--lr",           exact(c.optim.lr),
                                "--micro-batch",  std::to_string(c.micro_batch),
                                "--global-batch", std::to_string(c.global_batch),
                                "--codec",        c.codec,
                                "--corpus",       c.corpus,
                                "--data-seed",    std::to_string(c.data_seed),
                                "--threads",      std::to_string(c.threads)};
  if (c.delayed_updates) args.push_back("--delayed-updates");
  if (!c.model.stage_layers.empty()) {
    std::string layers;
    for (int n : c.model.stage_layers) layers += (layers.empty() ? "" : ",") + std::to_string(n);
    args.insert(args.end(), {"--stage-layers", layers});
  }
  args.insert(args.end(), {"--averaging-codec", c.averaging_codec});
  return args;
}

}  // namespace shoal::swarm
