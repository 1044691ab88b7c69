// shoal-swarm: SWARM training (docs/swarm.md).
//   shoal-swarm registry --port P            host the embedded registry (shoal's TCP store)
//   shoal-swarm serve --stage K --registry H:P   one stage server (replica)
//   shoal-swarm train --registry H:P          one trainer
//   shoal-swarm reference                     single-process training of the same model and batches
//   shoal-swarm local --stages S --peers P --trainers T   a whole swarm on this host, with
//       progress, fault injection (--kill-at), heterogeneity (--slowdown), a CSV, a summary and a
//       plot
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "shoal/error.hpp"
#include "shoal/store.hpp"
#include "swarm/net/codec.hpp"
#include "swarm/net/rebalance.hpp"
#include "swarm/net/registry.hpp"
#include "swarm/net/rpc.hpp"
#include "swarm/train/data.hpp"
#include "swarm/train/keys.hpp"
#include "swarm/train/stage_server.hpp"
#include "swarm/train/trainer.hpp"

using namespace shoal;
using namespace shoal::swarm;
using Clock = std::chrono::steady_clock;

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

struct Common {
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

void add_common(CLI::App* app, Common& c) {
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

std::vector<std::string> common_args(const Common& c) {
  std::vector<std::string> args{"--registry",     c.registry,
                                "--stages",       std::to_string(c.model.stages),
                                "--d-model",      std::to_string(c.model.d_model),
                                "--layers",       std::to_string(c.model.n_layers),
                                "--heads",        std::to_string(c.model.n_heads),
                                "--seq-len",      std::to_string(c.model.seq_len),
                                "--model-seed",   std::to_string(c.model.seed),
                                "--lr",           std::to_string(c.optim.lr),
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

std::shared_ptr<Registry> open_registry(const Common& c, bool may_host) {
  return swarm::open_registry(c.registry, may_host, std::chrono::seconds(60));
}

std::vector<double> parse_list(const std::string& text) {
  std::vector<double> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(std::stod(item));
  return out;
}

// ---- one process per role ----

int run_serve(Common& c, ServerOptions& s, bool rebalance, double period_s) {
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

int run_train(Common& c, TrainerOptions& t) {
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

int run_reference(Common& c, int rounds) {
  torch::set_num_threads(c.threads);
  ByteCorpus corpus(c.corpus);
  auto losses = train_reference(c.model, c.optim, corpus, rounds, c.global_batch, c.micro_batch,
                                c.data_seed, c.delayed_updates);
  for (size_t r = 0; r < losses.size(); ++r) std::printf("%zu %.9f\n", r, losses[r]);
  return 0;
}

// ---- local: a whole swarm on this host ----

struct Child {
  pid_t pid = -1;
  std::string name;
  int stage = -1;
  double slowdown = 1;
  bool trainer = false;
  bool killed = false;
  int status = 0;
  bool exited = false;
};

/// Collects `child`'s exit status if it has exited; true once it has.
bool reap(Child& child) {
  int status = 0;
  if (!child.exited && ::waitpid(child.pid, &status, WNOHANG) == child.pid) {
    child.exited = true;
    child.status = status;
  }
  return child.exited;
}

pid_t spawn(const std::vector<std::string>& args, const std::string& log_path) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw InternalError("shoal-swarm local: fork failed");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execv("/proc/self/exe", argv.data());
    ::_exit(127);
  }
  return pid;
}

struct LocalOptions {
  int peers = 4, trainers = 1, rounds = 30, inflight = 4;
  std::string slowdown = "1", placement, kill_at, routing = "swarm", out = "swarm-run";
  double device_ms = 0, rebalance_period = 0, threshold = 0.1, time_limit = 1800,
         request_timeout = 20;
  bool check_reference = false;
  std::string exit_in_averaging;  // "server3:2"
  std::string exit_after_claim;   // "server1:5"
};

int run_local(Common& c, LocalOptions& o) {
  namespace fs = std::filesystem;
  fs::create_directories(fs::path(o.out) / "logs");
  int S = c.model.stages;
  for (int k = 0; k < S; ++k) stage_blocks(c.model, k);  // a bad --stage-layers fails here, once
  if (o.peers < S)
    throw InvalidArgumentError("--peers " + std::to_string(o.peers) + " cannot cover " +
                               std::to_string(S) + " stages");
  // The embedded registry lives in this process for the whole run; an etcd one outlives it.
  std::shared_ptr<Registry> registry_owner;
  if (c.registry.rfind("etcd://", 0) == 0) {
    registry_owner = open_registry(c, false);
  } else {
    TcpStore::Options so;
    so.is_server = true;
    auto [host, want_port] = split_address(c.registry);
    auto hosted = std::make_shared<TcpStore>(host, want_port, so);
    c.registry = host + ":" + std::to_string(hosted->port());
    registry_owner = std::make_shared<StoreRegistry>(hosted);
  }
  Registry& registry = *registry_owner;
  auto store = registry.rendezvous();
  if (store->check({keys::kStages}))
    throw InvalidArgumentError("shoal-swarm local: registry " + c.registry +
                               " already holds a swarm; name a new one (etcd://.../NAME)");
  store->set(keys::kStages, std::to_string(S));

  auto slowdowns = parse_list(o.slowdown);
  auto placement = parse_list(o.placement);
  auto kill_times = parse_list(o.kill_at);
  std::sort(kill_times.begin(), kill_times.end());
  std::vector<Child> children;
  auto base = common_args(c);
  for (int i = 0; i < o.peers; ++i) {
    Child ch;
    ch.name = "server" + std::to_string(i);
    ch.stage = i < static_cast<int>(placement.size()) ? static_cast<int>(placement[i]) : i % S;
    ch.slowdown = slowdowns.empty() ? 1.0 : slowdowns[i % slowdowns.size()];
    auto args = base;
    args.insert(args.begin(), {"shoal-swarm", "serve"});
    for (const std::string& a : std::vector<std::string>{
             "--stage", std::to_string(ch.stage), "--id", ch.name, "--slowdown",
             std::to_string(ch.slowdown), "--device-ms", std::to_string(o.device_ms)})
      args.push_back(a);
    // Fault injection "PEER:N" goes to that peer only, as its own option.
    for (auto [flag, spec] : {std::pair{"--exit-in-averaging", &o.exit_in_averaging},
                              std::pair{"--exit-after-claim", &o.exit_after_claim}})
      if (auto colon = spec->find(':');
          colon != std::string::npos && spec->substr(0, colon) == ch.name) {
        args.push_back(flag);
        args.push_back(spec->substr(colon + 1));
      }
    if (o.rebalance_period > 0)
      for (const std::string& a :
           std::vector<std::string>{"--rebalance-period", std::to_string(o.rebalance_period),
                                    "--rebalance-threshold", std::to_string(o.threshold)})
        args.push_back(a);
    ch.pid = spawn(args, (fs::path(o.out) / "logs" / (ch.name + ".log")).string());
    children.push_back(ch);
  }
  // Trainers start once every server is registered, so the static baseline sees them all.
  auto registered_by = Clock::now() + std::chrono::seconds(120);
  while (registry.peers().size() < static_cast<size_t>(o.peers)) {
    if (Clock::now() > registered_by)
      throw TimeoutError("shoal-swarm local: servers did not all register");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (int i = 0; i < o.trainers; ++i) {
    Child ch;
    ch.name = "trainer" + std::to_string(i);
    ch.trainer = true;
    auto args = base;
    args.insert(args.begin(), {"shoal-swarm", "train"});
    for (const std::string& a : std::vector<std::string>{
             "--rounds", std::to_string(o.rounds), "--inflight", std::to_string(o.inflight), "--id",
             ch.name, "--routing", o.routing, "--request-timeout",
             std::to_string(o.request_timeout)})
      args.push_back(a);
    ch.pid = spawn(args, (fs::path(o.out) / "logs" / (ch.name + ".log")).string());
    children.push_back(ch);
  }
  std::printf(
      "swarm: %s, %d peers, %d trainers, global batch %d x %d samples, codec %s, routing %s%s -> "
      "%s/\n",
      c.model.describe().c_str(), o.peers, o.trainers, c.global_batch, c.micro_batch,
      c.codec.c_str(), o.routing.c_str(), c.delayed_updates ? ", delayed updates" : "",
      o.out.c_str());
  std::fflush(stdout);

  std::ofstream csv(fs::path(o.out) / "progress.csv");
  csv << "time_s,samples,samples_per_s,rounds_done,loss,live_peers,replicas_per_stage,capacity_per_"
         "stage,"
         "ideal_samples_per_s\n";
  std::ofstream peers_csv(fs::path(o.out) / "peers.csv");  // every live peer, every second
  peers_csv << "time_s,peer,stage,throughput,round\n";
  std::ofstream rounds_csv(fs::path(o.out) / "rounds.csv");
  rounds_csv << "round,time_s,loss\n";
  std::vector<double> round_loss;
  std::mt19937 rng(12345);
  auto start = Clock::now();
  size_t next_kill = 0;
  std::deque<std::pair<double, int64_t>> history{{0.0, 0}};  // (time, samples done)
  double last_t = 0, last_print = -1;
  nlohmann::json kills = nlohmann::json::array();
  std::vector<std::pair<double, double>> ideal_series;  // (time, bottleneck capacity)
  std::vector<double> round_time;
  std::map<uint32_t, double> stepped_at;

  auto trainers_running = [&] {
    return std::any_of(children.begin(), children.end(),
                       [](auto& ch) { return ch.trainer && !ch.exited; });
  };
  while (trainers_running() && !g_stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    double t = std::chrono::duration<double>(Clock::now() - start).count();
    for (auto& ch : children) reap(ch);
    // Fault injection: kill a random live server whose stage keeps another replica.
    if (next_kill < kill_times.size() && t >= kill_times[next_kill]) {
      ++next_kill;
      auto peers = registry.peers();
      std::map<int, int> per_stage;
      for (auto& p : peers) ++per_stage[p.stage];
      std::vector<Child*> candidates;
      for (auto& ch : children)
        if (!ch.trainer && !ch.exited && !ch.killed)
          for (auto& p : peers)
            if (p.id == ch.name && per_stage[p.stage] >= 2) candidates.push_back(&ch);
      if (!candidates.empty()) {
        Child* victim = candidates[rng() % candidates.size()];
        ::kill(victim->pid, SIGKILL);
        victim->killed = true;
        std::printf("t=%.1fs: killed %s\n", t, victim->name.c_str());
        kills.push_back({{"time_s", t}, {"peer", victim->name}});
      }
    }
    // Progress.
    int64_t samples = store->add(keys::kSamplesDone, 0);
    while (static_cast<int>(round_loss.size()) < o.rounds) {
      uint32_t r = static_cast<uint32_t>(round_loss.size());
      bool stepped = true;
      for (int k = 0; k < S; ++k) stepped = stepped && store->check({keys::stepped(k, r)});
      if (!stepped) break;
      // Trainers post a micro-batch's loss (sum, then count) after its last backward, which may
      // come after the step: wait for the whole round's, unless micro-batches were lost with a
      // trainer (then take what came within a grace period).
      if (!stepped_at.count(r)) stepped_at[r] = t;
      int64_t count = store->add(keys::loss_count(r), 0);
      if (count < c.global_batch && t - stepped_at[r] < 5.0) break;
      double loss = store->add(keys::loss_sum(r), 0) * 1e-6 / std::max<int64_t>(1, count);
      round_loss.push_back(loss);
      round_time.push_back(t);
      rounds_csv << r << ',' << t << ',' << loss << std::endl;  // flushed: watchers tail it
    }
    if (t - last_t >= 1.0) {
      // Samples/s over the last kRateWindow seconds: a micro-batch is a lump of samples, so a
      // one-second window would swing between 0 and twice the rate.
      constexpr double kRateWindow = 5.0;
      history.emplace_back(t, samples);
      while (history.size() > 2 && t - history[1].first >= kRateWindow) history.pop_front();
      double rate = history.size() > 1
                        ? (samples - history.front().second) / (t - history.front().first)
                        : 0.0;
      last_t = t;
      auto peers = registry.peers();
      for (auto& p : peers)
        peers_csv << t << ',' << p.id << ',' << p.stage << ',' << p.throughput << ',' << p.round
                  << '\n';
      std::vector<int> replicas(S, 0);
      for (auto& p : peers)
        if (p.stage >= 0 && p.stage < S) ++replicas[p.stage];
      auto capacity = stage_throughputs(peers, S);
      double ideal = capacity.empty() ? 0 : *std::min_element(capacity.begin(), capacity.end());
      ideal_series.emplace_back(t, ideal);
      std::string reps, caps;
      for (int k = 0; k < S; ++k) {
        reps += (k ? "/" : "") + std::to_string(replicas[k]);
        char buf[32];
        std::snprintf(buf, sizeof buf, "%s%.1f", k ? "/" : "", capacity[k]);
        caps += buf;
      }
      double loss = round_loss.empty() ? NAN : round_loss.back();
      csv << t << ',' << samples << ',' << rate << ',' << round_loss.size() << ',' << loss << ','
          << peers.size() << ',' << reps << ',' << caps << ',' << ideal << '\n';
      csv.flush();
      if (t - last_print >= 2.0) {
        last_print = t;
        std::printf(
            "t=%6.1fs  samples %7ld  %7.1f samples/s  round %3zu/%d  loss %.4f  replicas %s  "
            "(capacity %s)\n",
            t, (long)samples, rate, round_loss.size(), o.rounds, loss, reps.c_str(), caps.c_str());
        std::fflush(stdout);
      }
    }
    if (t > o.time_limit) {
      std::printf("time limit %.0f s reached\n", o.time_limit);
      break;
    }
  }
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  nlohmann::json final_peers = nlohmann::json::array();
  for (auto& p : registry.peers())
    final_peers.push_back(
        {{"id", p.id}, {"stage", p.stage}, {"throughput", p.throughput}, {"round", p.round}});
  // Stop the servers (and any trainer left), then reap everyone.
  for (auto& ch : children)
    if (!ch.exited) ::kill(ch.pid, SIGTERM);
  auto reap_by = Clock::now() + std::chrono::seconds(10);
  for (auto& ch : children) {
    while (!reap(ch)) {
      if (Clock::now() > reap_by) ::kill(ch.pid, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // Trainers that failed (a static pipeline that lost a peer stops).
  int trainer_failures = 0;
  for (auto& ch : children)
    if (ch.trainer && !(WIFEXITED(ch.status) && WEXITSTATUS(ch.status) == 0)) ++trainer_failures;

  int64_t samples = store->add(keys::kSamplesDone, 0);
  int64_t bytes = store->add(keys::kBytesSent, 0);
  nlohmann::json summary;
  summary["model"] = c.model.describe();
  summary["peers"] = o.peers;
  summary["trainers"] = o.trainers;
  summary["routing"] = o.routing;
  summary["codec"] = c.codec;
  summary["delayed_updates"] = c.delayed_updates;
  summary["averaging_codec"] = c.averaging_codec;
  if (int64_t member_rounds = store->add(keys::kAveragingMemberRounds, 0))
    summary["averaging_bytes_per_member_round"] =
        static_cast<double>(store->add(keys::kAveragingBytes, 0)) / member_rounds;
  summary["slowdown"] = o.slowdown;
  summary["rounds_done"] = round_loss.size();
  summary["rounds"] = o.rounds;
  summary["samples"] = samples;
  summary["elapsed_s"] = elapsed;
  summary["samples_per_s"] = samples / elapsed;
  summary["bytes_between_stages_per_sample"] = samples ? static_cast<double>(bytes) / samples : 0.0;
  // Steady state: from the end of the first round (start-up, first connections) to the last.
  if (round_time.size() >= 3) {
    double t0 = round_time.front(), t1 = round_time.back();
    double steady =
        (round_time.size() - 1) * static_cast<double>(c.global_batch) * c.micro_batch / (t1 - t0);
    double ideal_sum = 0;
    int ideal_n = 0;
    for (auto& [t, ideal] : ideal_series)
      if (t >= t0 && t <= t1) ideal_sum += ideal, ++ideal_n;
    summary["steady_samples_per_s"] = steady;
    if (ideal_n) {
      summary["ideal_samples_per_s"] = ideal_sum / ideal_n;
      summary["fraction_of_ideal"] = steady / (ideal_sum / ideal_n);
    }
  }
  summary["round_time_s"] = round_time;
  summary["round_loss"] = round_loss;
  summary["kills"] = kills;
  summary["final_peers"] = final_peers;
  summary["rebalance_period_s"] = o.rebalance_period;
  summary["trainer_failures"] = trainer_failures;
  summary["completed"] = static_cast<int>(round_loss.size()) == o.rounds && trainer_failures == 0;
  summary["moves"] = store->add(keys::kMovesDone, 0);

  int rc = summary["completed"] ? 0 : 1;
  if (o.check_reference) {
    ByteCorpus corpus(c.corpus);
    auto ref = train_reference(c.model, c.optim, corpus, static_cast<int>(round_loss.size()),
                               c.global_batch, c.micro_batch, c.data_seed, c.delayed_updates);
    double worst = 0;
    for (size_t r = 0; r < ref.size(); ++r)
      worst = std::max(worst, std::fabs(ref[r] - round_loss[r]));
    summary["reference_loss"] = ref;
    summary["reference_max_abs_diff"] = worst;
    std::printf("single-process reference: max |loss difference| over %zu rounds = %.3g\n",
                ref.size(), worst);
    if (worst > 1e-4) rc = 1;
  }
  std::ofstream(fs::path(o.out) / "summary.json") << summary.dump(2) << '\n';
  csv.close();
  rounds_csv.close();
  peers_csv.close();
  std::printf(
      "done: %zu/%d rounds, %ld samples in %.1f s (%.1f samples/s), %.0f bytes/sample between "
      "stages, "
      "loss %.4f -> %.4f%s\n",
      round_loss.size(), o.rounds, (long)samples, elapsed, samples / elapsed,
      samples ? static_cast<double>(bytes) / samples : 0.0,
      round_loss.empty() ? NAN : round_loss.front(), round_loss.empty() ? NAN : round_loss.back(),
      trainer_failures ? "  (a trainer failed)" : "");
  // The plot (matplotlib through Debian's python3); a missing matplotlib only costs the PNG.
  std::string plot = (fs::path(o.out) / "swarm.png").string();
  auto self = fs::read_symlink("/proc/self/exe").parent_path();
  for (auto script :
       {self / "../../bench/swarm_plot.py", fs::path(SHOAL_SOURCE_DIR) / "bench/swarm_plot.py"})
    if (fs::exists(script)) {
      std::string cmd = "/usr/bin/python3 " + script.string() + " " + o.out + " >/dev/null 2>&1";
      if (std::system(cmd.c_str()) == 0) std::printf("plot: %s\n", plot.c_str());
      break;
    }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "shoal-swarm: SWARM pipeline training over unreliable, heterogeneous peers (docs/swarm.md)"};
  app.require_subcommand(1);
  ::signal(SIGTERM, on_signal);
  ::signal(SIGINT, on_signal);
  ::signal(SIGPIPE, SIG_IGN);

  Common c;
  auto* reg = app.add_subcommand("registry", "host the embedded registry (a shoal TCP store)");
  std::string reg_host = "0.0.0.0";
  uint16_t reg_port = 29600;
  reg->add_option("--host", reg_host, "address to listen on");
  reg->add_option("--port", reg_port, "port");

  ServerOptions s;
  double period = 10;
  auto* serve = app.add_subcommand("serve", "serve one stage (a replica)");
  add_common(serve, c);
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
  add_common(train, c);
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
  add_common(ref, c);
  ref->add_option("--rounds", ref_rounds, "optimizer steps");

  LocalOptions o;
  auto* local = app.add_subcommand("local", "run a whole swarm on this host");
  add_common(local, c);
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
    if (*local) return run_local(c, o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shoal-swarm: %s\n", e.what());
    return 1;
  }
  return 0;
}
