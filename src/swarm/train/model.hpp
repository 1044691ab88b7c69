// The model SWARM trains here: a small GPT-style decoder (byte-level tokens, learned positions,
// pre-norm blocks of causal self-attention and MLP) cut into S stages. Stage 0 holds the
// embeddings and the first blocks, the last stage the last blocks, the final norm and the head;
// blocks are spread as evenly as possible unless `stage_layers` says how many each stage holds
// (stages of unequal cost). Every stage initialises from (seed, stage)
// alone, so every replica of a stage and the single-process reference start from identical
// parameters.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace shoal::swarm {

struct GptConfig {
  int vocab = 256;   // bytes
  int seq_len = 64;  // tokens per sample
  int d_model = 128;
  int n_heads = 4;
  int n_layers = 4;               // transformer blocks in the whole model
  int stages = 2;                 // pipeline stages (1 <= stages <= n_layers)
  std::vector<int> stage_layers;  // blocks of each stage; empty: as even as possible
  uint64_t seed = 1234;
  std::string describe() const;  // "gpt d128 h4 L4 T64 / 2 stages, 0.83 M params"
};

/// Blocks [first, last) of stage `stage` of `stages` for `n_layers` blocks; throws on a
/// `stage_layers` that does not cut the model into `stages` stages of at least one block.
std::pair<int, int> stage_blocks(const GptConfig& config, int stage);

/// One stage. forward: stage 0 takes int64 tokens [B, T] and returns [B, T, D]; middle stages
/// map [B, T, D] to [B, T, D]; the last stage returns logits [B, T, vocab]. With stages == 1
/// the one stage maps tokens to logits.
class StageModuleImpl : public torch::nn::Module {
 public:
  StageModuleImpl(const GptConfig& config, int stage);
  torch::Tensor forward(torch::Tensor x);
  bool is_first() const { return stage_ == 0; }
  bool is_last() const { return stage_ == config_.stages - 1; }
  int stage() const { return stage_; }
  const GptConfig& config() const { return config_; }

 private:
  GptConfig config_;
  int stage_;
  torch::nn::Embedding tok_{nullptr}, pos_{nullptr};
  torch::nn::ModuleList blocks_{nullptr};
  torch::nn::LayerNorm ln_f_{nullptr};
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(StageModule);

/// Mean next-token cross entropy of logits [B, T, V] against targets [B, T].
torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets);

/// The optimizer every replica of a stage runs (Adam, betas 0.9/0.95, no weight decay).
struct OptimConfig {
  double lr = 3e-3;
};
std::unique_ptr<torch::optim::Optimizer> make_optimizer(StageModule& module,
                                                        const OptimConfig& config);

/// A stage's parameters and optimizer state as one byte string (torch::serialize), and back:
/// how a joining or migrating peer takes over a stage from a live replica.
std::string save_stage_state(StageModule& module, torch::optim::Optimizer& optimizer);
void load_stage_state(StageModule& module, torch::optim::Optimizer& optimizer,
                      const std::string& bytes);

}  // namespace shoal::swarm
