// shoal-swarm: SWARM training (docs/swarm.md).
//   shoal-swarm registry --port P            host the embedded registry (shoal's TCP store)
//   shoal-swarm serve --stage K --registry H:P   one stage server (replica)
//   shoal-swarm train --registry H:P          one trainer
//   shoal-swarm reference                     single-process training of the same model and batches
//   shoal-swarm local --stages S --peers P --trainers T   a whole swarm on this host, with
//       progress, fault injection (--kill-at), heterogeneity (--slowdown), a CSV, a summary and a
//       plot
#include <signal.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "shoal/store.hpp"
#include "swarm/net/codec.hpp"
#include "swarm/net/registry.hpp"
#include "swarm/train/data.hpp"
#include "swarm/train/local.hpp"
#include "swarm/train/settings.hpp"
#include "swarm/train/stage_server.hpp"
#include "swarm/train/trainer.hpp"

using namespace shoal;
using namespace shoal::swarm;

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

std::shared_ptr<Registry> open_registry(const SwarmSettings& c, bool may_host) {
  return swarm::open_registry(c.registry, may_host, std::chrono::seconds(60));
}

// ---- one process per role ----

int run_serve(SwarmSettings& c, ServerOptions& s, bool rebalance, double period_s) {
  torch::set_num_threads(c.threads);
  s.model = c.model;
  s.optim = c.optim;
  s.round_microbatches = c.global_batch;
  s.codec = parse_codec(c.codec);
  s.delayed_updates = c.delayed_updates;
  s.averaging_codec = parse_codec(c.averaging_codec);
  s.rebalance = rebalance;
  s.rebalance_period = std::chrono::milliseconds(static_cast<int64_t>(period_s * 1000));
  StageServer server(s, open_registry(c, true));
  server.run(g_stop);
  auto st = server.stats();
  std::fprintf(
      stderr,
      "server done: stage %d round %u forwards %lu backwards %lu duplicates %lu moves %lu\n",
      st.stage, st.round, (unsigned long)st.forwards, (unsigned long)st.backwards,
      (unsigned long)st.duplicates, (unsigned long)st.moves);
  return 0;
}

int run_train(SwarmSettings& c, TrainerOptions& t) {
  torch::set_num_threads(c.threads);
  t.model = c.model;
  t.corpus = c.corpus;
  t.micro_batch = c.micro_batch;
  t.round_microbatches = c.global_batch;
  t.data_seed = c.data_seed;
  t.codec = parse_codec(c.codec);
  t.delayed_updates = c.delayed_updates;
  Trainer trainer(t, open_registry(c, true));
  trainer.run(g_stop);
  auto st = trainer.stats();
  std::fprintf(stderr, "trainer done: %lu micro-batches, %lu requests, %lu retries\n",
               (unsigned long)st.microbatches, (unsigned long)st.requests,
               (unsigned long)st.retries);
  return 0;
}

// The plot of a local run (matplotlib through Debian's python3); a missing matplotlib only
// costs the PNG.
void plot(const std::string& out) {
  namespace fs = std::filesystem;
  const auto bin = fs::read_symlink("/proc/self/exe").parent_path();
  for (const auto& script :
       {bin / "../../bench/swarm_plot.py", fs::path(SHOAL_SOURCE_DIR) / "bench/swarm_plot.py"})
    if (fs::exists(script)) {
      const std::string cmd =
          "/usr/bin/python3 " + script.string() + " " + out + " >/dev/null 2>&1";
      if (std::system(cmd.c_str()) == 0)
        std::printf("plot: %s\n", (fs::path(out) / "swarm.png").c_str());
      return;
    }
}

int run_reference(SwarmSettings& c, int rounds) {
  torch::set_num_threads(c.threads);
  ByteCorpus corpus(c.corpus);
  auto losses = train_reference(c.model, c.optim, corpus, rounds, c.global_batch, c.micro_batch,
                                c.data_seed, c.delayed_updates);
  for (size_t r = 0; r < losses.size(); ++r) std::printf("%zu %.9f\n", r, losses[r]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "shoal-swarm: SWARM pipeline training over unreliable, heterogeneous peers (docs/swarm.md)"};
  app.require_subcommand(1);
  ::signal(SIGTERM, on_signal);
  ::signal(SIGINT, on_signal);
  ::signal(SIGPIPE, SIG_IGN);

  SwarmSettings c;
  auto* reg = app.add_subcommand("registry", "host the embedded registry (a shoal TCP store)");
  std::string reg_host = "0.0.0.0";
  uint16_t reg_port = 29600;
  reg->add_option("--host", reg_host, "address to listen on");
  reg->add_option("--port", reg_port, "port");

  ServerOptions s;
  double period = 10;
  auto* serve = app.add_subcommand("serve", "serve one stage (a replica)");
  add_swarm_options(serve, c);
  serve->add_option("--stage", s.stage, "stage to serve")->required();
  serve->add_option("--id", s.id, "peer id (default peer-<pid>-<n>)");
  serve->add_option("--host", s.host, "address to listen on and announce");
  serve->add_option("--port", s.port, "port (0: any)");
  serve->add_option("--slowdown", s.slowdown, "emulated device slowdown (1 = full speed)");
  serve->add_option(
      "--bandwidth", s.bandwidth,
      "MB/s this peer's link carries: its share of a compressed averaging (0: equal)");
  serve->add_option("--device-ms", s.device_ms,
                    "emulated accelerator time per forward, ms (backward: 2x)");
  serve->add_flag("--device-per-block", s.device_per_block,
                  "--device-ms is per transformer block of the stage served, not per request");
  auto* rp = serve->add_option("--rebalance-period", period,
                               "seconds between rebalancing checks (enables it)");
  serve->add_option("--rebalance-threshold", s.rebalance_threshold,
                    "relative bottleneck gain a move needs");
  serve->add_option("--exit-after-claim", s.exit_after_claim,
                    "fault injection for tests: die between claiming a micro-batch from this one "
                    "on and counting it");
  serve->add_option("--exit-in-averaging", s.exit_in_averaging,
                    "fault injection for tests: die inside the averaging of this round");

  TrainerOptions t;
  std::string routing = "swarm";
  double request_timeout = 20;
  auto* train = app.add_subcommand("train", "drive micro-batches through the stages");
  add_swarm_options(train, c);
  train->add_option("--rounds", t.rounds, "optimizer steps");
  train->add_option("--inflight", t.inflight, "micro-batches in flight");
  train->add_option("--id", t.id, "trainer id");
  train->add_option("--routing", routing, "swarm (stochastic wiring) or static (fixed pipelines)")
      ->check(CLI::IsMember({"swarm", "static"}));
  train->add_option("--request-timeout", request_timeout,
                    "seconds before a request is retried elsewhere");

  int ref_rounds = 20;
  auto* ref =
      app.add_subcommand("reference", "train the same model on the same batches in one process");
  add_swarm_options(ref, c);
  ref->add_option("--rounds", ref_rounds, "optimizer steps");

  LocalOptions o;
  auto* local = app.add_subcommand("local", "run a whole swarm on this host");
  add_swarm_options(local, c);
  local->add_option("--peers", o.peers, "stage servers");
  local->add_option("--trainers", o.trainers, "trainers");
  local->add_option("--rounds", o.rounds, "optimizer steps");
  local->add_option("--inflight", o.inflight, "micro-batches in flight per trainer");
  local->add_option("--slowdown", o.slowdown,
                    "comma list of slowdowns dealt to peers in turn, e.g. 1,2,4");
  local->add_option("--placement", o.placement,
                    "comma list: stage of each peer (default round-robin)");
  local->add_option("--kill-at", o.kill_at,
                    "comma list of seconds: at each, kill one random server");
  local->add_option("--device-ms", o.device_ms, "emulated accelerator time per forward, ms");
  local
      ->add_option("--netns", o.netns,
                   "run the peers in these network namespaces (scripts/netcluster.sh hosts), "
                   "server i in the (i mod n)-th; the registry address must reach them "
                   "(--registry 198.18.0.254:0)")
      ->delimiter(',');
  local->add_flag("--device-per-block", o.device_per_block,
                  "--device-ms per transformer block of a stage: stages of unequal depth cost "
                  "unequally");
  local->add_option("--rebalance-period", o.rebalance_period,
                    "seconds between rebalancing checks (0: off)");
  local->add_option("--rebalance-threshold", o.threshold, "relative bottleneck gain a move needs");
  local->add_option("--routing", o.routing, "swarm or static")
      ->check(CLI::IsMember({"swarm", "static"}));
  local->add_option("--request-timeout", o.request_timeout,
                    "seconds before a request is retried elsewhere");
  local->add_option("--time-limit", o.time_limit, "seconds before the run is cut short");
  local->add_option(
      "--exit-in-averaging", o.exit_in_averaging,
      "fault injection for tests, PEER:ROUND: that server dies inside that round's averaging");
  local->add_option(
      "--exit-after-claim", o.exit_after_claim,
      "fault injection for tests, PEER:MB: that server dies between claiming a micro-batch "
      "from MB on and counting it");
  local->add_option("--out", o.out,
                    "directory for progress.csv, rounds.csv, summary.json, swarm.png, logs/");
  local->add_flag("--check-reference", o.check_reference,
                  "compare the loss of every round with single-process training (1 replica per "
                  "stage, codec none)");

  CLI11_PARSE(app, argc, argv);
  try {
    if (*reg) {
      TcpStore::Options so;
      so.is_server = true;
      TcpStore store(reg_host, reg_port, so);
      std::printf("shoal-swarm registry on %s:%u\n", reg_host.c_str(), store.port());
      std::fflush(stdout);
      while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      return 0;
    }
    if (*serve) return run_serve(c, s, rp->count() > 0, period);
    if (*train) {
      t.routing = routing == "static" ? Routing::static_pipeline : Routing::swarm;
      t.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(request_timeout * 1000));
      return run_train(c, t);
    }
    if (*ref) return run_reference(c, ref_rounds);
    if (*local) {
      o.swarm_exe = std::filesystem::read_symlink("/proc/self/exe").string();
      const int rc = run_local(c, o, g_stop);
      plot(o.out);
      return rc;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shoal-swarm: %s\n", e.what());
    return 1;
  }
  return 0;
}
