// A launcher passes a swarm's settings to its processes as arguments (swarm_args) that the
// processes parse back (add_swarm_options): every field must survive the trip.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <string>
#include <vector>

#include "swarm/train/settings.hpp"

namespace shoal::swarm {
namespace {

SwarmSettings parse(std::vector<std::string> args) {
  CLI::App app;
  SwarmSettings parsed;
  add_swarm_options(&app, parsed);
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector in reverse order
  app.parse(args);
  return parsed;
}

TEST(SwarmSettings, EveryFieldSurvivesTheArgumentsAProcessIsStartedWith) {
  SwarmSettings s;
  s.model.stages = 3;
  s.model.d_model = 48;
  s.model.n_layers = 5;
  s.model.stage_layers = {1, 3, 1};
  s.model.n_heads = 6;
  s.model.seq_len = 24;
  s.model.seed = 987654321012ull;
  s.optim.lr = 2.5e-7;  // below std::to_string's six decimals
  s.registry = "etcd://10.0.0.1:2379,10.0.0.2:2379/run7";
  s.micro_batch = 3;
  s.global_batch = 17;
  s.codec = "int8";
  s.delayed_updates = true;
  s.averaging_codec = "fp16";
  s.corpus = "/tmp/corpus dir";
  s.data_seed = 77;
  s.threads = 2;
  const SwarmSettings p = parse(swarm_args(s));
  EXPECT_EQ(p.model.stages, 3);
  EXPECT_EQ(p.model.d_model, 48);
  EXPECT_EQ(p.model.n_layers, 5);
  EXPECT_EQ(p.model.stage_layers, (std::vector<int>{1, 3, 1}));
  EXPECT_EQ(p.model.n_heads, 6);
  EXPECT_EQ(p.model.seq_len, 24);
  EXPECT_EQ(p.model.seed, 987654321012ull);
  EXPECT_EQ(p.optim.lr, 2.5e-7);
  EXPECT_EQ(p.registry, s.registry);
  EXPECT_EQ(p.micro_batch, 3);
  EXPECT_EQ(p.global_batch, 17);
  EXPECT_EQ(p.codec, "int8");
  EXPECT_TRUE(p.delayed_updates);
  EXPECT_EQ(p.averaging_codec, "fp16");
  EXPECT_EQ(p.corpus, "/tmp/corpus dir");
  EXPECT_EQ(p.data_seed, 77u);
  EXPECT_EQ(p.threads, 2);
  // And the defaults stay the defaults.
  const SwarmSettings d = parse(swarm_args(SwarmSettings{}));
  EXPECT_FALSE(d.delayed_updates);
  EXPECT_TRUE(d.model.stage_layers.empty());
  EXPECT_EQ(d.optim.lr, SwarmSettings{}.optim.lr);
}

TEST(SwarmSettings, AnUnknownCodecIsRefused) {
  EXPECT_THROW(parse({"--codec", "zip"}), CLI::ValidationError);
}

}  // namespace
}  // namespace shoal::swarm
