// The GPT stages: blocks written out with plain Linear layers so every replica runs the same ops,
// and an initialisation drawn from private generators so that it is a pure function of the
// config (seed, layout) and never touches torch's global generator.
#include "swarm/train/model.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "core/mix.hpp"
#include "shoal/error.hpp"

namespace shoal::swarm {
namespace {

// One generator per model component, keyed by the component's place in the whole model (not by
// stage), so the S-stage chain starts from exactly the parameters of the 1-stage model.
constexpr uint64_t kEmbedSalt = 1ULL << 40, kHeadSalt = 2ULL << 40;
at::Generator component_generator(uint64_t seed, uint64_t component) {
  return at::make_generator<at::CPUGeneratorImpl>(splitmix64(splitmix64(seed) ^ component));
}

// GPT-2 style: normal(0, 0.02) weights, zero biases, LayerNorm at identity. Submodules are
// visited in registration order, fixed by the code, so the draws are bitwise reproducible.
void init_parameters(torch::nn::Module& module, at::Generator gen) {
  torch::NoGradGuard no_grad;
  for (auto& m : module.modules(/*include_self=*/true)) {
    if (auto* ln = m->as<torch::nn::LayerNormImpl>()) {
      ln->weight.fill_(1.0);
      ln->bias.zero_();
    } else if (auto* linear = m->as<torch::nn::LinearImpl>()) {
      linear->weight.normal_(0.0, 0.02, gen);
      if (linear->bias.defined()) linear->bias.zero_();
    } else if (auto* embedding = m->as<torch::nn::EmbeddingImpl>()) {
      embedding->weight.normal_(0.0, 0.02, gen);
    }
  }
}

// Pre-norm transformer block: x + attn(ln1(x)), then x + mlp(ln2(x)).
class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(int d, int heads)
      : heads_(heads),
        ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})))),
        qkv(register_module("qkv", torch::nn::Linear(d, 3 * d))),
        proj(register_module("proj", torch::nn::Linear(d, d))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})))),
        fc(register_module("fc", torch::nn::Linear(d, 4 * d))),
        fc_out(register_module("fc_out", torch::nn::Linear(4 * d, d))) {}

  torch::Tensor forward(torch::Tensor x) {
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2), hd = d / heads_;
    auto parts = qkv(ln1(x)).chunk(3, -1);
    auto split = [&](const torch::Tensor& y) {  // [B, T, D] -> [B, H, T, D/H]
      return y.view({b, t, heads_, hd}).transpose(1, 2);
    };
    auto q = split(parts[0]), k = split(parts[1]), v = split(parts[2]);
    auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(hd)));
    auto future = torch::ones({t, t}, torch::TensorOptions().dtype(torch::kBool)).triu(1);
    att = torch::softmax(att.masked_fill(future, -std::numeric_limits<float>::infinity()), -1);
    auto y = torch::matmul(att, v).transpose(1, 2).contiguous().view({b, t, d});
    x = x + proj(y);
    return x + fc_out(torch::gelu(fc(ln2(x))));
  }

 private:
  int64_t heads_;

 public:
  torch::nn::LayerNorm ln1;
  torch::nn::Linear qkv, proj;
  torch::nn::LayerNorm ln2;
  torch::nn::Linear fc, fc_out;
};
TORCH_MODULE(Block);

// The module constructors draw torch's default init from the global generator; put its state
// back so building a stage does not shift anyone else's random stream.
class GlobalRngGuard {
 public:
  GlobalRngGuard() : gen_(at::detail::getDefaultCPUGenerator()), state_(gen_.get_state()) {}
  ~GlobalRngGuard() { gen_.set_state(state_); }

 private:
  at::Generator gen_;
  at::Tensor state_;
};

}  // namespace

std::string GptConfig::describe() const {
  const int64_t d = d_model;
  int64_t params = int64_t(vocab) * d + int64_t(seq_len) * d    // embeddings
                   + int64_t(n_layers) * (12 * d * d + 13 * d)  // blocks
                   + 2 * d + d * vocab + vocab;                 // final norm and head
  char buf[256];
  std::string split;
  for (size_t i = 0; i < stage_layers.size(); ++i)
    split += (i ? "," : " (blocks ") + std::to_string(stage_layers[i]);
  if (!split.empty()) split += ")";
  std::snprintf(buf, sizeof buf, "gpt d%d h%d L%d T%d / %d stages%s, %.2f M params", d_model,
                n_heads, n_layers, seq_len, stages, split.c_str(), params / 1e6);
  return buf;
}

std::pair<int, int> stage_blocks(const GptConfig& config, int stage) {
  if (config.stages < 1 || config.stages > config.n_layers || stage < 0 || stage >= config.stages) {
    throw InvalidArgumentError("swarm: stage " + std::to_string(stage) + " of " +
                               std::to_string(config.stages) + " stages for " +
                               std::to_string(config.n_layers) +
                               " blocks: need 0 <= stage < stages <= n_layers");
  }
  if (!config.stage_layers.empty()) {
    const auto& layers = config.stage_layers;
    int sum = 0, first = 0;
    for (size_t k = 0; k < layers.size(); ++k) {
      if (layers[k] < 1)
        throw InvalidArgumentError("swarm: stage " + std::to_string(k) + " of " +
                                   std::to_string(layers[k]) + " blocks: every stage needs one");
      if (static_cast<int>(k) < stage) first += layers[k];
      sum += layers[k];
    }
    if (static_cast<int>(layers.size()) != config.stages || sum != config.n_layers)
      throw InvalidArgumentError("swarm: stage layers of " + std::to_string(layers.size()) +
                                 " stages and " + std::to_string(sum) + " blocks for a model of " +
                                 std::to_string(config.stages) + " stages and " +
                                 std::to_string(config.n_layers) + " blocks");
    return {first, first + layers[stage]};
  }
  const int base = config.n_layers / config.stages, extra = config.n_layers % config.stages;
  const int first = stage * base + std::min(stage, extra);
  return {first, first + base + (stage < extra ? 1 : 0)};
}

StageModuleImpl::StageModuleImpl(const GptConfig& config, int stage)
    : config_(config), stage_(stage) {
  auto [first, last] = stage_blocks(config, stage);
  if (config.d_model % config.n_heads != 0) {
    throw InvalidArgumentError("swarm: d_model " + std::to_string(config.d_model) +
                               " is not a multiple of n_heads " + std::to_string(config.n_heads));
  }
  GlobalRngGuard rng_guard;
  if (is_first()) {
    tok_ = register_module("tok", torch::nn::Embedding(config.vocab, config.d_model));
    pos_ = register_module("pos", torch::nn::Embedding(config.seq_len, config.d_model));
    init_parameters(*tok_, component_generator(config.seed, kEmbedSalt));
    init_parameters(*pos_, component_generator(config.seed, kEmbedSalt + 1));
  }
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int i = first; i < last; ++i) {
    Block block(config.d_model, config.n_heads);
    init_parameters(*block, component_generator(config.seed, uint64_t(i)));
    blocks_->push_back(block);
  }
  if (is_last()) {
    ln_f_ = register_module("ln_f",
                            torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.d_model})));
    head_ = register_module("head", torch::nn::Linear(config.d_model, config.vocab));
    init_parameters(*ln_f_, component_generator(config.seed, kHeadSalt));
    init_parameters(*head_, component_generator(config.seed, kHeadSalt + 1));
  }
}

torch::Tensor StageModuleImpl::forward(torch::Tensor x) {
  if (is_first()) {
    const int64_t t = x.size(1);
    if (t > config_.seq_len) {
      throw InvalidArgumentError("swarm: sequence of " + std::to_string(t) +
                                 " tokens exceeds seq_len " + std::to_string(config_.seq_len));
    }
    x = tok_(x) + pos_(torch::arange(t, torch::TensorOptions().dtype(torch::kLong)));
  }
  for (auto& block : *blocks_) x = block->as<BlockImpl>()->forward(x);
  if (is_last()) x = head_(ln_f_(x));
  return x;
}

torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                              targets.reshape({-1}));
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(StageModule& module,
                                                        const OptimConfig& config) {
  auto options = torch::optim::AdamOptions(config.lr).betas({0.9, 0.95}).eps(1e-8);
  return std::make_unique<torch::optim::Adam>(module->parameters(), options);
}

// Layout: a torch archive with two nested archives, "module" (parameters by name) and
// "optimizer" (Adam's param groups and per-parameter step, exp_avg, exp_avg_sq).
std::string save_stage_state(StageModule& module, torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive, module_archive, optim_archive;
  module->save(module_archive);
  optimizer.save(optim_archive);
  archive.write("module", module_archive);
  archive.write("optimizer", optim_archive);
  std::ostringstream out;
  archive.save_to(out);
  return std::move(out).str();
}

void load_stage_state(StageModule& module, torch::optim::Optimizer& optimizer,
                      const std::string& bytes) {
  torch::serialize::InputArchive archive, module_archive, optim_archive;
  std::istringstream in(bytes);
  try {
    archive.load_from(in);
    archive.read("module", module_archive);
    archive.read("optimizer", optim_archive);
    module->load(module_archive);  // copies in place: the optimizer keeps its parameter handles
    optimizer.load(optim_archive);
  } catch (const c10::Error& e) {
    throw InvalidArgumentError("swarm: stage " + std::to_string(module->stage()) + " state of " +
                               std::to_string(bytes.size()) +
                               " bytes does not load: " + e.what_without_backtrace());
  }
}

}  // namespace shoal::swarm
