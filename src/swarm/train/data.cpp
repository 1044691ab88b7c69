// The byte corpus and the single-process reference trainer. The fortune files are kept verbatim,
// '%' separator lines included: they are ordinary bytes the model learns to predict.
#include "swarm/train/data.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "core/mix.hpp"
#include "shoal/error.hpp"

namespace shoal::swarm {
namespace {

namespace fs = std::filesystem;

void append_file(const fs::path& file, std::vector<uint8_t>& out) {
  std::ifstream in(file, std::ios::binary);
  out.insert(out.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string missing_corpus(const std::string& path, const std::string& why) {
  return "swarm: no training text at '" + path + "' (" + why +
         "); the default corpus is Debian's fortunes: apt-get install fortunes";
}

// `batch` windows of seq_len + 1 bytes from [begin, end), offsets drawn from `rng_seed`. The
// offsets come from raw mt19937_64 output (not a std distribution) so they are the same with
// every standard library.
MicroBatch cut_batch(const std::vector<uint8_t>& bytes, size_t begin, size_t end, int batch,
                     int seq_len, uint64_t rng_seed, const char* part) {
  if (batch < 1 || seq_len < 1 || end - begin < size_t(seq_len) + 1) {
    throw InvalidArgumentError("swarm: cannot cut " + std::to_string(batch) + " samples of " +
                               std::to_string(seq_len) + " tokens from the " + part + " part of " +
                               std::to_string(end - begin) + " bytes");
  }
  std::mt19937_64 rng(rng_seed);
  const uint64_t starts = end - begin - size_t(seq_len);  // windows that fit
  auto window = torch::empty({batch, seq_len + 1}, torch::TensorOptions().dtype(torch::kLong));
  auto* w = window.data_ptr<int64_t>();
  for (int b = 0; b < batch; ++b) {
    const size_t start = begin + rng() % starts;
    for (int t = 0; t <= seq_len; ++t) w[b * (seq_len + 1) + t] = bytes[start + t];
  }
  MicroBatch mb;
  mb.tokens = window.narrow(1, 0, seq_len).contiguous();
  mb.targets = window.narrow(1, 1, seq_len).contiguous();
  return mb;
}

}  // namespace

ByteCorpus::ByteCorpus(const std::string& path, double holdout_fraction) {
  if (!(holdout_fraction >= 0.0 && holdout_fraction < 1.0)) {
    throw InvalidArgumentError("swarm: holdout fraction " + std::to_string(holdout_fraction) +
                               " is not in [0, 1)");
  }
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(path, ec)) {
      // fortune ships name.dat (binary index) and name.u8 (symlink to name) beside each file.
      if (entry.is_symlink(ec) || !entry.is_regular_file(ec)) continue;
      if (entry.path().extension() == ".dat") continue;
      files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) append_file(file, bytes_);
  } else if (fs::is_regular_file(path, ec)) {
    append_file(path, bytes_);
  } else {
    throw InvalidArgumentError(missing_corpus(path, "no such file or directory"));
  }
  if (bytes_.size() < 1024) {
    throw InvalidArgumentError(missing_corpus(
        path, "only " + std::to_string(bytes_.size()) + " bytes of text files found there"));
  }
  train_end_ = bytes_.size() - size_t(double(bytes_.size()) * holdout_fraction);
}

size_t ByteCorpus::train_bytes() const { return train_end_; }
size_t ByteCorpus::holdout_bytes() const { return bytes_.size() - train_end_; }

MicroBatch ByteCorpus::micro_batch(uint64_t index, int batch, int seq_len, uint64_t seed) const {
  MicroBatch mb = cut_batch(bytes_, 0, train_end_, batch, seq_len,
                            splitmix64(splitmix64(seed) ^ index), "training");
  mb.index = index;
  return mb;
}

MicroBatch ByteCorpus::holdout_batch(int batch, int seq_len, uint64_t seed) const {
  // Salted so the holdout draw is not the same offsets pattern as micro-batch 0.
  return cut_batch(bytes_, train_end_, bytes_.size(), batch, seq_len,
                   splitmix64(splitmix64(seed) ^ 0x686F6C646F7574ULL), "holdout");
}

std::vector<double> train_reference(const GptConfig& model, const OptimConfig& optim,
                                    const ByteCorpus& corpus, int steps, int micro_batches,
                                    int batch, uint64_t data_seed, bool delayed_updates) {
  const int n = model.stages;
  std::vector<StageModule> stages;
  std::vector<std::unique_ptr<torch::optim::Optimizer>> optimizers;
  std::vector<std::vector<torch::Tensor>> params(n);
  for (int s = 0; s < n; ++s) {
    stages.emplace_back(model, s);
    optimizers.push_back(make_optimizer(stages.back(), optim));
    params[s] = stages.back()->parameters();
  }
  std::vector<double> losses;
  // Delayed updates: round r's mean gradient is applied after round r+1's is computed.
  std::vector<std::vector<torch::Tensor>> pending;
  auto apply = [&](std::vector<std::vector<torch::Tensor>>& mean) {
    for (int s = 0; s < n; ++s) {
      for (size_t i = 0; i < params[s].size(); ++i) params[s][i].mutable_grad() = mean[s][i];
      optimizers[s]->step();
    }
  };
  for (int step = 0; step < steps; ++step) {
    std::vector<std::vector<torch::Tensor>> sums(n);
    double loss_sum = 0;
    for (int j = 0; j < micro_batches; ++j) {
      MicroBatch mb =
          corpus.micro_batch(uint64_t(step) * micro_batches + j, batch, model.seq_len, data_seed);
      // Cut the graph at every stage boundary, as between replicas: stage s > 0 sees a fresh
      // leaf input and hands the gradient of that input back to stage s - 1.
      std::vector<torch::Tensor> inputs(n), outputs(n);
      torch::Tensor x = mb.tokens;
      for (int s = 0; s < n; ++s) {
        inputs[s] = s == 0 ? x : x.detach().requires_grad_(true);
        outputs[s] = x = stages[s]->forward(inputs[s]);
      }
      torch::Tensor loss = lm_loss(outputs[n - 1], mb.targets);
      loss_sum += loss.item<double>();
      torch::Tensor upstream;  // d loss / d outputs[s]
      for (int s = n - 1; s >= 0; --s) {
        std::vector<torch::Tensor> wrt = params[s];
        if (s > 0) wrt.push_back(inputs[s]);
        auto grads = s == n - 1 ? torch::autograd::grad({loss}, wrt)
                                : torch::autograd::grad({outputs[s]}, wrt, {upstream});
        if (s > 0) upstream = grads.back();
        for (size_t i = 0; i < params[s].size(); ++i) {
          if (j == 0) {
            sums[s].push_back(grads[i]);
          } else {
            sums[s][i] = sums[s][i] + grads[i];
          }
        }
      }
    }
    for (auto& stage_sums : sums)
      for (auto& sum : stage_sums) sum = sum / double(micro_batches);
    if (!delayed_updates) {
      apply(sums);
    } else {
      if (!pending.empty()) apply(pending);
      pending = std::move(sums);
    }
    losses.push_back(loss_sum / micro_batches);
  }
  return losses;
}

}  // namespace shoal::swarm
