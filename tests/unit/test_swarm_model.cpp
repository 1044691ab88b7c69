// The SWARM model and data (src/swarm/train/model.cpp, data.cpp): the stage partition, the
// reproducible initialisation, the chain of stages equal to the whole model, causality, the
// state hand-over (parameters and Adam state) continuing bit for bit, the corpus, and the
// single-process reference actually learning.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "shoal/error.hpp"
#include "swarm/train/data.hpp"
#include "swarm/train/model.hpp"

namespace shoal::testing {
namespace {

using namespace shoal::swarm;

GptConfig tiny(int stages) {
  GptConfig c;
  c.d_model = 32;
  c.n_heads = 4;
  c.n_layers = 4;
  c.seq_len = 16;
  c.stages = stages;
  c.seed = 7;
  return c;
}

bool same_parameters(StageModule& a, StageModule& b) {
  auto pa = a->parameters(), pb = b->parameters();
  if (pa.size() != pb.size()) return false;
  for (size_t i = 0; i < pa.size(); ++i) {
    if (!torch::equal(pa[i], pb[i])) return false;
  }
  return true;
}

torch::Tensor run_chain(std::vector<StageModule>& stages, torch::Tensor x) {
  for (auto& s : stages) x = s->forward(x);
  return x;
}

TEST(SwarmModel, StageBlocksPartition) {
  for (int layers = 1; layers <= 9; ++layers) {
    for (int stages = 1; stages <= layers; ++stages) {
      GptConfig c;
      c.n_layers = layers;
      c.stages = stages;
      int next = 0;
      for (int s = 0; s < stages; ++s) {
        auto [first, last] = stage_blocks(c, s);
        EXPECT_EQ(first, next);
        const int size = last - first, base = layers / stages;
        EXPECT_EQ(size, base + (s < layers % stages ? 1 : 0));  // extras go to the first stages
        next = last;
      }
      EXPECT_EQ(next, layers);
    }
  }
  GptConfig c;
  c.n_layers = 2;
  c.stages = 3;
  EXPECT_THROW(stage_blocks(c, 0), InvalidArgumentError);
  c.stages = 2;
  EXPECT_THROW(stage_blocks(c, 2), InvalidArgumentError);
  EXPECT_NE(GptConfig().describe().find("gpt d128 h4 L4 T64 / 2 stages"), std::string::npos);
}

TEST(SwarmModel, StageLayersCutTheModelAsAsked) {
  GptConfig c;
  c.n_layers = 6;
  c.stages = 3;
  c.stage_layers = {1, 1, 4};
  EXPECT_EQ(stage_blocks(c, 0), std::make_pair(0, 1));
  EXPECT_EQ(stage_blocks(c, 1), std::make_pair(1, 2));
  EXPECT_EQ(stage_blocks(c, 2), std::make_pair(2, 6));
  EXPECT_NE(c.describe().find("3 stages (blocks 1,1,4)"), std::string::npos) << c.describe();
  c.stage_layers = {1, 1, 3};  // 5 blocks for a 6-block model
  EXPECT_THROW(stage_blocks(c, 0), InvalidArgumentError);
  c.stage_layers = {2, 4};  // 2 stages for a 3-stage model
  EXPECT_THROW(stage_blocks(c, 0), InvalidArgumentError);
  c.stage_layers = {0, 2, 4};  // an empty stage
  EXPECT_THROW(stage_blocks(c, 1), InvalidArgumentError);
}

TEST(SwarmModel, InitIsAPureFunctionOfSeedAndStage) {
  auto c = tiny(2);
  torch::manual_seed(99);  // construction must not shift the global generator
  auto expected = torch::rand({4});
  torch::manual_seed(99);
  StageModule b1(c, 1);  // built in the other order
  StageModule a1(c, 0);
  EXPECT_TRUE(torch::equal(torch::rand({4}), expected));
  torch::manual_seed(12345);
  StageModule a2(c, 0);
  StageModule b2(c, 1);
  EXPECT_TRUE(same_parameters(a1, a2));
  EXPECT_TRUE(same_parameters(b1, b2));
  EXPECT_FALSE(same_parameters(a1, b1));
  // Blocks of different stages differ; a different seed changes everything.
  EXPECT_FALSE(torch::equal(a1->named_parameters()["blocks.0.qkv.weight"],
                            b1->named_parameters()["blocks.0.qkv.weight"]));
  c.seed = 8;
  StageModule a3(c, 0);
  EXPECT_FALSE(same_parameters(a1, a3));
  // Init statistics: LayerNorm at identity, zero biases, weights ~ N(0, 0.02).
  auto params = a1->named_parameters();
  EXPECT_TRUE(torch::equal(params["blocks.0.ln1.weight"], torch::ones({32})));
  EXPECT_TRUE(torch::equal(params["blocks.0.qkv.bias"], torch::zeros({96})));
  EXPECT_NEAR(params["tok.weight"].std().item<double>(), 0.02, 0.002);
}

TEST(SwarmModel, ChainOfStagesIsTheWholeModel) {
  // Each component is seeded by its place in the whole model, so any cut gives the same net.
  auto tokens = torch::randint(0, 256, {3, 16}, torch::TensorOptions().dtype(torch::kLong));
  StageModule whole(tiny(1), 0);
  torch::NoGradGuard no_grad;
  auto reference = whole->forward(tokens);
  EXPECT_EQ(reference.sizes(), (std::vector<int64_t>{3, 16, 256}));
  for (int n : {2, 3, 4}) {
    std::vector<StageModule> stages;
    for (int s = 0; s < n; ++s) stages.emplace_back(tiny(n), s);
    auto x = tokens;
    for (int s = 0; s < n; ++s) {
      x = stages[s]->forward(x);
      if (s + 1 < n) {
        EXPECT_EQ(x.sizes(), (std::vector<int64_t>{3, 16, 32}));
      }
    }
    EXPECT_TRUE(torch::equal(x, reference)) << n << " stages";
  }
}

TEST(SwarmModel, Causal) {
  std::vector<StageModule> stages{StageModule(tiny(2), 0), StageModule(tiny(2), 1)};
  torch::NoGradGuard no_grad;
  auto tokens = torch::randint(0, 256, {2, 16}, torch::TensorOptions().dtype(torch::kLong));
  auto base = run_chain(stages, tokens);
  for (int t : {0, 5, 15}) {
    auto changed = tokens.clone();
    changed.index_put_({torch::indexing::Slice(), t},
                       (tokens.index({0, t}).item<int64_t>() + 1) % 256);
    auto out = run_chain(stages, changed);
    using torch::indexing::Slice;
    EXPECT_TRUE(
        torch::equal(out.index({Slice(), Slice(0, t)}), base.index({Slice(), Slice(0, t)})));
    EXPECT_FALSE(torch::equal(out.index({Slice(), t}), base.index({Slice(), t})));
  }
  // A shorter sequence is fine (a prefix), a longer one is refused.
  EXPECT_EQ(run_chain(stages, tokens.narrow(1, 0, 5)).size(1), 5);
  EXPECT_THROW(stages[0]->forward(torch::zeros({1, 17}, torch::kLong)), InvalidArgumentError);
}

// One optimizer step of a last stage on random inputs.
void train_step(StageModule& stage, torch::optim::Optimizer& opt, int seed) {
  torch::manual_seed(seed);
  auto x = torch::randn({2, 16, 32});
  auto targets = torch::randint(0, 256, {2, 16}, torch::TensorOptions().dtype(torch::kLong));
  opt.zero_grad();
  lm_loss(stage->forward(x), targets).backward();
  opt.step();
}

TEST(SwarmModel, StateHandOverContinuesBitForBit) {
  auto c = tiny(2);
  StageModule source(c, 1);
  auto source_opt = make_optimizer(source, OptimConfig{});
  for (int i = 0; i < 3; ++i) train_step(source, *source_opt, i);
  const std::string bytes = save_stage_state(source, *source_opt);

  StageModule joiner(c, 1);
  auto joiner_opt = make_optimizer(joiner, OptimConfig{});
  EXPECT_FALSE(same_parameters(source, joiner));
  load_stage_state(joiner, *joiner_opt, bytes);
  EXPECT_TRUE(same_parameters(source, joiner));
  for (int i = 3; i < 5; ++i) {
    train_step(source, *source_opt, i);
    train_step(joiner, *joiner_opt, i);
  }
  EXPECT_TRUE(same_parameters(source, joiner));

  // Without the Adam state the continuation differs: the state string really carries it.
  StageModule fresh(c, 1);
  auto fresh_opt = make_optimizer(fresh, OptimConfig{});
  auto plain_opt = make_optimizer(fresh, OptimConfig{});
  load_stage_state(fresh, *fresh_opt, bytes);
  train_step(fresh, *plain_opt, 9);
  StageModule again(c, 1);
  auto again_opt = make_optimizer(again, OptimConfig{});
  load_stage_state(again, *again_opt, bytes);
  train_step(again, *again_opt, 9);
  EXPECT_FALSE(same_parameters(fresh, again));

  EXPECT_THROW(load_stage_state(joiner, *joiner_opt, "not a state"), InvalidArgumentError);
}

TEST(SwarmData, CorpusIsDeterministic) {
  ByteCorpus corpus;
  EXPECT_GT(corpus.train_bytes(), 1000000u);
  EXPECT_GT(corpus.holdout_bytes(), 10000u);
  auto a = corpus.micro_batch(5, 4, 16, 3), b = corpus.micro_batch(5, 4, 16, 3);
  EXPECT_EQ(a.index, 5u);
  EXPECT_EQ(a.tokens.sizes(), (std::vector<int64_t>{4, 16}));
  EXPECT_EQ(a.tokens.scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(a.tokens, b.tokens));
  EXPECT_TRUE(torch::equal(a.targets, b.targets));
  using torch::indexing::Slice;
  EXPECT_TRUE(torch::equal(a.tokens.index({Slice(), Slice(1, 16)}),
                           a.targets.index({Slice(), Slice(0, 15)})));
  EXPECT_FALSE(torch::equal(a.tokens, corpus.micro_batch(6, 4, 16, 3).tokens));
  EXPECT_FALSE(torch::equal(a.tokens, corpus.micro_batch(5, 4, 16, 4).tokens));
  EXPECT_TRUE(torch::equal(corpus.holdout_batch(4, 16).tokens, corpus.holdout_batch(4, 16).tokens));
  EXPECT_GE(a.tokens.min().item<int64_t>(), 0);
  EXPECT_LT(a.tokens.max().item<int64_t>(), 256);
}

TEST(SwarmData, MissingOrEmptyCorpusSaysWhatToInstall) {
  auto empty = std::filesystem::temp_directory_path() / "shoal_empty_corpus";
  std::filesystem::create_directories(empty);
  for (std::string path : {std::string("/nonexistent/fortunes"), empty.string()}) {
    try {
      ByteCorpus corpus(path);
      FAIL() << "no error for " << path;
    } catch (const InvalidArgumentError& e) {
      std::string what = e.what();
      EXPECT_NE(what.find(path), std::string::npos) << what;
      EXPECT_NE(what.find("apt-get install fortunes"), std::string::npos) << what;
    }
  }
  // A single file works, .dat files are skipped in a directory.
  auto dir = std::filesystem::temp_directory_path() / "shoal_corpus_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "text") << std::string(4000, 'a');
  std::ofstream(dir / "text.dat") << std::string(4000, 'b');
  ByteCorpus from_dir(dir.string(), 0.25), from_file((dir / "text").string(), 0.25);
  EXPECT_EQ(from_dir.train_bytes(), 3000u);
  EXPECT_EQ(from_dir.holdout_bytes(), 1000u);
  EXPECT_EQ(from_file.train_bytes(), 3000u);
  EXPECT_EQ(from_dir.micro_batch(0, 2, 8).tokens.sum().item<int64_t>(), 16 * 'a');
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(empty);
}

TEST(SwarmReference, LearnsAndIsDeterministic) {
  GptConfig c;
  c.d_model = 32;
  c.n_heads = 4;
  c.n_layers = 2;
  c.stages = 2;
  c.seq_len = 16;
  ByteCorpus corpus;
  auto losses = train_reference(c, OptimConfig{}, corpus, 30, 2, 4);
  ASSERT_EQ(losses.size(), 30u);
  std::printf("reference losses: first %.4f, step 10 %.4f, last %.4f\n", losses[0], losses[10],
              losses[29]);
  EXPECT_NEAR(losses[0], std::log(256.0), 0.3);
  double last5 = 0;
  for (int i = 25; i < 30; ++i) last5 += losses[i] / 5;
  EXPECT_LT(last5, losses[0] - 1.5);
  EXPECT_EQ(train_reference(c, OptimConfig{}, corpus, 30, 2, 4), losses);
}

// Timing of one step of the default-size model on one core (run by hand:
// test_swarm_model --gtest_also_run_disabled_tests --gtest_filter='*Timing*').
TEST(SwarmReference, DISABLED_Timing) {
  const int threads = torch::get_num_threads();
  torch::set_num_threads(1);
  GptConfig c;  // d128 L4 T64, 2 stages
  ByteCorpus corpus;
  auto time_ms = [&](int steps) {
    auto start = std::chrono::steady_clock::now();
    train_reference(c, OptimConfig{}, corpus, steps, 1, 8);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  };
  time_ms(1);                                       // warm up
  const double ms = (time_ms(6) - time_ms(1)) / 5;  // less the construction
  std::printf("%s, batch 8, one thread: %.1f ms per step (forward, backward, Adam)\n",
              c.describe().c_str(), ms);
  torch::set_num_threads(threads);
}

}  // namespace
}  // namespace shoal::testing
