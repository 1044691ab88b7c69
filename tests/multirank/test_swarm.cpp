// SWARM end to end inside one process: stage servers and trainers as threads over a real TCP
// store and real RPC connections. The kill -9 cases, the static baseline and rebalancing run
// as processes in tests/tools/test_swarm.sh.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "shoal/error.hpp"
#include "swarm/net/rpc.hpp"
#include "swarm/train/keys.hpp"
#include "swarm/train/stage_server.hpp"
#include "swarm/train/tensors.hpp"
#include "swarm/train/trainer.hpp"

using namespace shoal;
using namespace shoal::swarm;
using namespace std::chrono_literals;

namespace {

GptConfig tiny_model(int stages) {
  GptConfig c;
  c.d_model = 32;
  c.n_heads = 4;
  c.n_layers = 2;
  c.seq_len = 16;
  c.stages = stages;
  return c;
}

/// A swarm in this process: servers run on threads until the fixture ends.
class Swarm {
 public:
  explicit Swarm(GptConfig model, int round_microbatches = 3, bool delayed_updates = false)
      : model_(model), m_(round_microbatches), delayed_(delayed_updates) {
    TcpStore::Options o;
    o.is_server = true;
    o.timeout = 60s;
    store_ = std::make_shared<TcpStore>("127.0.0.1", 0, o);
  }
  ~Swarm() {
    stop_ = true;
    for (auto& t : threads_) t.join();
  }
  std::shared_ptr<Registry> registry() { return std::make_shared<StoreRegistry>(client()); }
  std::shared_ptr<TcpStore> client() {
    TcpStore::Options o;
    o.timeout = 60s;
    return std::make_shared<TcpStore>("127.0.0.1", store_->port(), o);
  }
  StageServer& add_server(int stage, const std::string& id, Codec codec = Codec::None,
                          Codec averaging = Codec::None) {
    ServerOptions s;
    s.averaging_codec = averaging;
    s.model = model_;
    s.stage = stage;
    s.id = id;
    s.round_microbatches = m_;
    s.codec = codec;
    s.delayed_updates = delayed_;
    s.join_window = 500ms;
    servers_.push_back(std::make_unique<StageServer>(s, registry()));
    StageServer* server = servers_.back().get();
    threads_.emplace_back([this, server] { server->run(stop_); });
    return *server;
  }
  TrainerOptions trainer_options(int rounds, int inflight = 1, Codec codec = Codec::None) {
    TrainerOptions t;
    t.model = model_;
    t.micro_batch = 4;
    t.round_microbatches = m_;
    t.rounds = rounds;
    t.inflight = inflight;
    t.codec = codec;
    t.delayed_updates = delayed_;
    t.request_timeout = 10s;
    t.give_up = 60s;
    return t;
  }
  std::vector<double> round_losses(int rounds) {
    std::vector<double> out;
    for (int r = 0; r < rounds; ++r)
      out.push_back(store_->add(keys::loss_sum(r), 0) * 1e-6 / store_->add(keys::loss_count(r), 0));
    return out;
  }
  /// The stage's parameters as a server would hand them to a joining peer (replicas that took
  /// the same averaged steps from the same start also agree on Adam's moments); with delayed
  /// updates followed by the parameters before the last step, flattened.
  std::vector<torch::Tensor> state_of(const StageServer& server, int stage) {
    RpcClient client("127.0.0.1", server.port(), 5s);
    Message request;
    request.type = MsgType::GetState;
    request.stage = static_cast<uint32_t>(stage);
    StageModule module(model_, stage);
    auto optimizer = make_optimizer(module, OptimConfig{});
    auto reply = client.call(request, 10s);
    EXPECT_EQ(reply.tensors.size(), delayed_ ? 2u : 1u);
    load_stage_state(module, *optimizer, wire_to_bytes(reply.tensors.at(0)));
    auto state = module->parameters();
    if (delayed_) state.push_back(from_wire(reply.tensors.at(1)).clone());
    return state;
  }
  /// Waits (at most 30 s) until every server has stepped `rounds` rounds: a trainer ends once
  /// one replica of each stage stepped the last round, while the others may still be averaging.
  void settle(uint32_t rounds) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    for (auto& server : servers_)
      while (server->stats().round < rounds && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(5ms);
    for (auto& server : servers_) EXPECT_GE(server->stats().round, rounds);
  }
  static bool same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!torch::equal(a[i], b[i])) return false;
    return true;
  }
  std::shared_ptr<TcpStore> store() { return store_; }

 private:
  GptConfig model_;
  int m_;
  bool delayed_;
  std::shared_ptr<TcpStore> store_;
  std::atomic<bool> stop_{false};
  std::vector<std::unique_ptr<StageServer>> servers_;
  std::vector<std::thread> threads_;
};

}  // namespace

// Evidence 1 of docs/swarm.md in miniature: one replica per stage, no compression, one
// micro-batch at a time: every round's loss is single-process training's.
TEST(Swarm, OneReplicaPerStageEqualsSingleProcessTraining) {
  auto model = tiny_model(2);
  Swarm swarm(model);
  swarm.add_server(0, "a0");
  swarm.add_server(1, "a1");
  auto options = swarm.trainer_options(4);
  Trainer trainer(options, swarm.registry());
  std::atomic<bool> stop{false};
  trainer.run(stop);
  auto losses = swarm.round_losses(4);
  ByteCorpus corpus;
  auto reference = train_reference(model, OptimConfig{}, corpus, 4, 3, options.micro_batch);
  ASSERT_EQ(reference.size(), 4u);
  for (int r = 0; r < 4; ++r) EXPECT_NEAR(losses[r], reference[r], 1e-5) << "round " << r;
  EXPECT_LT(losses.back(), losses.front());
}

// Delayed updates: round r runs on the parameters of round r-1 while r-1 averages, so every
// round's loss is that of single-process training that applies each round's gradient one round
// late, and not that of synchronous training. Two micro-batches in flight, so that round r+1's
// requests reach a server before and after it steps round r.
TEST(Swarm, DelayedUpdatesEqualSingleProcessTrainingOneStepLate) {
  auto model = tiny_model(2);
  constexpr int kRounds = 6;
  Swarm swarm(model, 3, /*delayed_updates=*/true);
  swarm.add_server(0, "a0");
  swarm.add_server(1, "a1");
  auto options = swarm.trainer_options(kRounds, 2);
  Trainer trainer(options, swarm.registry());
  std::atomic<bool> stop{false};
  trainer.run(stop);
  auto losses = swarm.round_losses(kRounds);
  ByteCorpus corpus;
  auto delayed =
      train_reference(model, OptimConfig{}, corpus, kRounds, 3, options.micro_batch, 0, true);
  auto synchronous = train_reference(model, OptimConfig{}, corpus, kRounds, 3, options.micro_batch);
  for (int r = 0; r < kRounds; ++r) EXPECT_NEAR(losses[r], delayed[r], 1e-5) << "round " << r;
  // Round 0 runs on the initial parameters in both schedules; round 1 on them again only with
  // delayed updates, so from round 1 on the two must part.
  for (int r = 1; r < kRounds; ++r)
    EXPECT_GT(std::fabs(delayed[r] - synchronous[r]), 1e-4) << "round " << r;
  EXPECT_LT(losses.back(), losses.front());
}

// Two replicas per stage, two trainers, several micro-batches in flight: the trainers split
// each global batch exactly, and after every round the replicas of a stage hold identical
// parameters and optimizer state (they averaged and stepped together).
void expect_replicas_agree(bool delayed_updates) {
  Swarm swarm(tiny_model(2), 4, delayed_updates);
  auto& a0 = swarm.add_server(0, "a0");
  auto& b0 = swarm.add_server(0, "b0");
  auto& a1 = swarm.add_server(1, "a1");
  auto& b1 = swarm.add_server(1, "b1");
  std::atomic<bool> stop{false};
  Trainer t1(swarm.trainer_options(3, 2), swarm.registry());
  Trainer t2(swarm.trainer_options(3, 2), swarm.registry());
  std::thread other([&] { t2.run(stop); });
  t1.run(stop);
  other.join();
  EXPECT_EQ(t1.stats().microbatches + t2.stats().microbatches, 3u * 4u);
  swarm.settle(3);
  EXPECT_EQ(a0.stats().round, 3u);
  EXPECT_EQ(b1.stats().round, 3u);
  EXPECT_TRUE(Swarm::same(swarm.state_of(a0, 0), swarm.state_of(b0, 0)));
  EXPECT_TRUE(Swarm::same(swarm.state_of(a1, 1), swarm.state_of(b1, 1)));
  // ...and they trained: not the initial parameters any more.
  StageModule initial(tiny_model(2), 1);
  EXPECT_FALSE(torch::equal(initial->parameters()[0], swarm.state_of(a1, 1)[0]));
  // Both replicas did work: stochastic wiring spread it.
  EXPECT_GT(a1.stats().backwards, 0u);
  EXPECT_GT(b1.stats().backwards, 0u);
}
TEST(Swarm, ReplicasAverageToIdenticalStateAndTrainersShareTheBatch) {
  expect_replicas_agree(false);
}
TEST(Swarm, ReplicasWithDelayedUpdatesAverageToIdenticalState) { expect_replicas_agree(true); }

// A replica that joins mid-training downloads the stage's parameters and optimizer state from a
// live replica before serving (with delayed updates also the parameters the next round runs
// on), and is then routed to and averaged with.
void expect_joiner_takes_state(bool delayed_updates) {
  Swarm swarm(tiny_model(2), 3, delayed_updates);
  auto& a0 = swarm.add_server(0, "a0");
  auto& a1 = swarm.add_server(1, "a1");
  std::atomic<bool> stop{false};
  Trainer first(swarm.trainer_options(2), swarm.registry());
  first.run(stop);
  auto& late = swarm.add_server(1, "late1");
  EXPECT_EQ(late.stats().state_loads, 1u);
  EXPECT_EQ(late.stats().round, 2u);
  EXPECT_TRUE(Swarm::same(swarm.state_of(late, 1), swarm.state_of(a1, 1)));
  Trainer second(swarm.trainer_options(4, 3), swarm.registry());
  second.run(stop);
  swarm.settle(4);
  EXPECT_GT(late.stats().backwards, 0u);
  EXPECT_TRUE(Swarm::same(swarm.state_of(late, 1), swarm.state_of(a1, 1)));
  EXPECT_EQ(a0.stats().round, 4u);
}
TEST(Swarm, JoiningReplicaTakesTheStageStateFromALiveOne) { expect_joiner_takes_state(false); }
TEST(Swarm, JoiningReplicaWithDelayedUpdatesTakesBothVersions) { expect_joiner_takes_state(true); }

// A replica that leaves mid-training (its connections close under in-flight requests) is
// routed around: the trainer retries elsewhere and training completes.
TEST(Swarm, LeavingReplicaIsRoutedAround) {
  Swarm swarm(tiny_model(2), 6);
  swarm.add_server(0, "a0");
  swarm.add_server(1, "a1");
  auto& b1 = swarm.add_server(1, "b1");
  std::atomic<bool> stop{false};
  Trainer trainer(swarm.trainer_options(4, 3), swarm.registry());
  std::thread killer([&] {
    while (b1.stats().backwards < 3) std::this_thread::sleep_for(1ms);
    b1.stop();
  });
  trainer.run(stop);
  killer.join();
  auto losses = swarm.round_losses(4);
  EXPECT_EQ(losses.size(), 4u);
  EXPECT_LT(losses.back(), losses.front());
}

// A trainer that dies holding claimed micro-batches stalls their round; another trainer notices
// the stall and drives them itself, so the swarm finishes every round with the whole batch.
TEST(Swarm, MicroBatchesOfADeadTrainerAreDrivenAgain) {
  Swarm swarm(tiny_model(2), 4);
  swarm.add_server(0, "a0");
  swarm.add_server(1, "a1");
  auto options = swarm.trainer_options(3, 2);
  std::atomic<bool> kill_first{false};
  Trainer first(options, swarm.registry());
  std::thread runner([&] {
    try {
      first.run(kill_first);
    } catch (const Error&) {
    }
  });
  // Its workers claim round 1's first micro-batches while round 0 finishes; stopping it then
  // abandons them, as a crash would.
  while (swarm.store()->add(keys::claimed(1), 0) < 2) std::this_thread::sleep_for(1ms);
  kill_first = true;
  runner.join();
  options.stall_timeout = 300ms;
  Trainer second(options, swarm.registry());
  std::atomic<bool> stop{false};
  second.run(stop);
  EXPECT_GT(second.stats().recovered, 0u);
  for (uint32_t r = 0; r < 3; ++r)
    EXPECT_EQ(swarm.store()->add(keys::loss_count(r), 0), 4) << "round " << r;
}

// Compressed averaging inside a stage: two replicas per stage average through the int8
// butterfly. Every member decodes the same sums, so replicas stay identical; the averaging
// sends about a quarter of float32's bytes, and the loss stays near uncompressed training's.
TEST(Swarm, CompressedAveragingKeepsReplicasIdenticalAndTrains) {
  std::vector<double> losses[2];
  double sent[2];  // bytes per member and round
  for (int i = 0; i < 2; ++i) {
    Codec averaging = i ? Codec::Blockwise8 : Codec::None;
    Swarm swarm(tiny_model(2), 4);
    auto& a0 = swarm.add_server(0, "a0", Codec::None, averaging);
    auto& b0 = swarm.add_server(0, "b0", Codec::None, averaging);
    auto& a1 = swarm.add_server(1, "a1", Codec::None, averaging);
    auto& b1 = swarm.add_server(1, "b1", Codec::None, averaging);
    Trainer trainer(swarm.trainer_options(5, 2), swarm.registry());
    std::atomic<bool> stop{false};
    trainer.run(stop);
    swarm.settle(5);
    EXPECT_TRUE(Swarm::same(swarm.state_of(a0, 0), swarm.state_of(b0, 0))) << i;
    EXPECT_TRUE(Swarm::same(swarm.state_of(a1, 1), swarm.state_of(b1, 1))) << i;
    auto member_rounds = swarm.store()->add(keys::kAveragingMemberRounds, 0);
    ASSERT_GT(member_rounds, 0) << i;
    sent[i] = static_cast<double>(swarm.store()->add(keys::kAveragingBytes, 0)) / member_rounds;
    losses[i] = swarm.round_losses(5);
  }
  EXPECT_GT(sent[1], 0);
  EXPECT_LT(sent[1] * 3.5, sent[0]);
  EXPECT_LT(losses[1].back(), losses[1].front());
  EXPECT_NEAR(losses[1].back(), losses[0].back(), 0.05);
}

// Compressed activations and gradients: 8-bit blockwise moves about a quarter of the bytes and
// training still converges.
TEST(Swarm, Int8CompressionCutsBytesAndStillTrains) {
  uint64_t bytes[2];
  std::vector<double> losses[2];
  for (int i = 0; i < 2; ++i) {
    Codec codec = i ? Codec::Blockwise8 : Codec::None;
    auto model = tiny_model(3);
    model.n_layers = 3;
    Swarm swarm(model);
    for (int k = 0; k < 3; ++k) swarm.add_server(k, "s" + std::to_string(k), codec);
    Trainer trainer(swarm.trainer_options(4, 1, codec), swarm.registry());
    std::atomic<bool> stop{false};
    trainer.run(stop);
    bytes[i] = trainer.stats().bytes_sent + trainer.stats().bytes_received;
    losses[i] = swarm.round_losses(4);
  }
  EXPECT_LT(bytes[1] * 3, bytes[0]);
  EXPECT_LT(losses[1].back(), losses[1].front());
  EXPECT_NEAR(losses[1].back(), losses[0].back(), 0.05);
}

// Bad requests get clear errors and the server keeps serving.
TEST(Swarm, BadRequestsAreRejectedClearly) {
  Swarm swarm(tiny_model(2));
  auto& s1 = swarm.add_server(1, "s1");
  RpcClient client("127.0.0.1", s1.port(), 5s);
  Message wrong_stage;
  wrong_stage.type = MsgType::Forward;
  wrong_stage.stage = 0;
  wrong_stage.tensors.push_back(to_wire(torch::zeros({1, 16, 32})));
  try {
    client.call(wrong_stage, 5s);
    FAIL() << "a request for another stage was served";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("serves stage 1"), std::string::npos) << e.what();
  }
  Message bad_grad;
  bad_grad.type = MsgType::Backward;
  bad_grad.stage = 1;
  auto x = torch::zeros({2, 16, 32});
  bad_grad.tensors.push_back(to_wire(x));
  bad_grad.tensors.push_back(to_wire(torch::zeros({2, 16})));  // targets of the wrong shape
  EXPECT_THROW(client.call(bad_grad, 5s), Error);
  Message missing;
  missing.type = MsgType::Forward;
  missing.stage = 1;
  EXPECT_THROW(client.call(missing, 5s), InvalidArgumentError);
  // Still serving.
  Message ok;
  ok.type = MsgType::Forward;
  ok.stage = 1;
  ok.tensors.push_back(to_wire(torch::zeros({1, 16, 32})));
  auto reply = client.call(ok, 5s);
  ASSERT_EQ(reply.tensors.size(), 1u);
  EXPECT_EQ(from_wire(reply.tensors[0]).sizes(), (std::vector<int64_t>{1, 16, 256}));
}
