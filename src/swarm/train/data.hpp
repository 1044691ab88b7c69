// Training data: a real text corpus read as bytes (Debian's fortunes by default), cut into
// samples of seq_len + 1 bytes. Micro-batch i is a pure function of (corpus, seed, i), so every
// trainer, any retry and the single-process reference see the same tokens for the same index.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "swarm/train/model.hpp"

namespace shoal::swarm {

/// Where the corpus is looked for when none is given.
inline constexpr const char* kDefaultCorpus = "/usr/share/games/fortunes";

struct MicroBatch {
  uint64_t index = 0;
  torch::Tensor tokens;   // int64 [B, T]
  torch::Tensor targets;  // int64 [B, T]: tokens shifted by one
};

class ByteCorpus {
 public:
  /// `path`: a file, or a directory whose regular text files are concatenated in name order
  /// (fortune's .dat index files and symlinks skipped). InvalidArgumentError when nothing
  /// usable is found, naming the path and the Debian package that ships it (fortunes).
  explicit ByteCorpus(const std::string& path = kDefaultCorpus, double holdout_fraction = 0.05);
  size_t train_bytes() const;
  size_t holdout_bytes() const;
  /// Micro-batch `index` of `batch` samples of `seq_len` tokens from the training part;
  /// start offsets drawn from a generator seeded by (seed, index).
  MicroBatch micro_batch(uint64_t index, int batch, int seq_len, uint64_t seed = 0) const;
  /// A fixed batch from the held-out part (evaluation).
  MicroBatch holdout_batch(int batch, int seq_len, uint64_t seed = 0) const;

 private:
  std::vector<uint8_t> bytes_;
  size_t train_end_ = 0;
};

/// Single-process reference: trains the S stages chained in one process on the same
/// micro-batches (`micro_batches` per optimizer step, indices step*micro_batches + j), summing
/// the per-micro-batch gradients and dividing by micro_batches before each step, exactly as the
/// swarm's replicas do. With delayed_updates, each step applies the previous round's mean
/// gradient (round r is computed on the parameters of round r-1). Returns the mean micro-batch
/// loss of each step.
std::vector<double> train_reference(const GptConfig& model, const OptimConfig& optim,
                                    const ByteCorpus& corpus, int steps, int micro_batches,
                                    int batch, uint64_t data_seed = 0,
                                    bool delayed_updates = false);

}  // namespace shoal::swarm
