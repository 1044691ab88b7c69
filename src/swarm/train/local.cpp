#include "swarm/train/local.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "shoal/error.hpp"
#include "shoal/store.hpp"
#include "swarm/net/rebalance.hpp"
#include "swarm/net/registry.hpp"
#include "swarm/net/rpc.hpp"
#include "swarm/train/keys.hpp"

namespace shoal::swarm {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<double> parse_list(const std::string& text) {
  std::vector<double> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(std::stod(item));
  return out;
}

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

pid_t spawn(const std::string& exe, const std::vector<std::string>& args,
            const std::string& log_path) {
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
    ::execv(exe.c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

/// The IPv4 address of network namespace `ns` (its first global one), for a peer started there.
std::string address_of_netns(const std::string& ns) {
  if (ns.find('\'') != std::string::npos)
    throw InvalidArgumentError("shoal-swarm local --netns: bad namespace name '" + ns + "'");
  const std::string cmd = "ip -n '" + ns + "' -4 -o addr show scope global 2>/dev/null";
  std::string out;
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, f)) out += buf;
    ::pclose(f);
  }
  // "2: eth0    inet 198.18.0.1/24 brd ..." -> 198.18.0.1
  const auto inet = out.find(" inet ");
  if (inet == std::string::npos)
    throw InvalidArgumentError("shoal-swarm local --netns: no address in network namespace '" + ns +
                               "' (scripts/netcluster.sh up makes them)");
  const auto begin = inet + 6, end = out.find('/', begin);
  return out.substr(begin, end - begin);
}

/// `args` (argv[0] first) run by `exe` inside network namespace `ns` (none: here).
std::pair<std::string, std::vector<std::string>> in_netns(const std::string& exe,
                                                          std::vector<std::string> args,
                                                          const std::string& ns) {
  if (ns.empty()) return {exe, args};
  args.erase(args.begin());
  args.insert(args.begin(), {"ip", "netns", "exec", ns, exe});
  for (const char* ip : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (::access(ip, X_OK) == 0) return {ip, args};
  throw InvalidArgumentError("shoal-swarm local --netns: no ip command (iproute2)");
}

}  // namespace

int run_local(SwarmSettings c, const LocalOptions& o, const std::atomic<bool>& stop) {
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
    registry_owner = open_registry(c.registry, false, std::chrono::seconds(60));
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
  // Each namespace's address, looked up once, before anything starts.
  std::vector<std::string> netns_address;
  for (const auto& ns : o.netns) netns_address.push_back(address_of_netns(ns));
  std::vector<Child> children;
  auto base = swarm_args(c);
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
    if (o.device_per_block) args.push_back("--device-per-block");
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
    // Consecutive stages on consecutive hosts, a stage's replicas on different ones (its
    // averaging crosses the links too).
    const size_t host = o.netns.empty() ? 0 : (i + i / S) % o.netns.size();
    const std::string ns = o.netns.empty() ? "" : o.netns[host];
    if (!ns.empty()) {
      args.push_back("--host");
      args.push_back(netns_address[host]);
    }
    auto [exe, argv] = in_netns(o.swarm_exe, args, ns);
    ch.pid = spawn(exe, argv, (fs::path(o.out) / "logs" / (ch.name + ".log")).string());
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
    const size_t n = o.netns.size();
    auto [exe, argv] =
        in_netns(o.swarm_exe, args, n ? o.netns[(n - 1 - i % n) % n] : std::string());
    ch.pid = spawn(exe, argv, (fs::path(o.out) / "logs" / (ch.name + ".log")).string());
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
  while (trainers_running() && !stop) {
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
  const auto alive = registry.peers();
  for (auto& p : alive)
    final_peers.push_back({{"id", p.id},
                           {"stage", p.stage},
                           {"throughput", p.throughput},
                           {"speed", p.speed},
                           {"round", p.round}});
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
  {
    // Where rebalancing ended against the best placement of the peers alive at the end (their
    // speeds over the stages' measured costs).
    auto capacity = stage_throughputs(alive, S);
    summary["stage_costs"] = stage_costs(alive, S);
    summary["final_bottleneck"] =
        capacity.empty() ? 0.0 : *std::min_element(capacity.begin(), capacity.end());
    summary["best_bottleneck"] = best_bottleneck(alive, S);
  }

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
  return rc;
}

}  // namespace shoal::swarm
