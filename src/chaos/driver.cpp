#include "chaos/driver.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "chaos/worker.hpp"
#include "shoal/store.hpp"
#include "transport/shm/segment.hpp"

namespace shoal::chaos {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;

struct Proc {
  pid_t pid = -1;
  int gen = -1;
  bool frozen = false;
  bool running = false;
  double restart_at = 0;  // seconds since start; 0: none pending
  std::vector<int> exit_codes;
};

struct Status {
  int gen = -1;
  int64_t epoch = -1, size = 0, next_op = 0;
};

struct Fault {
  int index = 0;
  std::string kind;
  double t_inject = 0;       // wall ms
  std::vector<int> victims;  // stable ids
  int victim_gen = -1;       // kill, freeze: the victim's generation
  std::string detail;
  int64_t epoch_before = 0, size_before = 0, next_op_before = 0;
  bool recovered = false;
  double recover_ms = -1;
  int64_t size_after = 0, epoch_after = 0, next_op_after = 0;
  double t_end = 0;  // wall ms: the next fault's injection or the end
};

std::string sh(const std::string& cmd, int* rc = nullptr) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  if (rc) *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

// shoal's segments in /dev/shm; with `made_by`, only those whose header names one of those
// processes or none yet (a creator killed before writing it): other jobs' segments are theirs.
std::set<std::string> shm_segments(const std::set<pid_t>* made_by = nullptr) {
  std::set<std::string> s;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      if (std::strncmp(e->d_name, "shoal-", 6) != 0) continue;
      if (made_by) {
        const auto owner = shoal::transport::shm::segment_owner(e->d_name);
        if (owner && owner->pid != 0 && !made_by->count(owner->pid)) continue;
      }
      s.insert(e->d_name);
    }
    closedir(d);
  }
  return s;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}
json stats(const std::vector<double>& v) {
  if (v.empty()) return json{{"n", 0}};
  return json{{"n", v.size()},
              {"median", std::round(median(v) * 10) / 10},
              {"max", std::round(*std::max_element(v.begin(), v.end()) * 10) / 10}};
}

class Driver {
 public:
  explicit Driver(RunArgs a) : a_(std::move(a)), rng_(a_.seed * 7919 + 17) {}

  int main(const std::string& self) {
    self_ = self;
    mkdir(a_.out.c_str(), 0755);
    {
      std::stringstream ss(a_.faults);
      for (std::string k; std::getline(ss, k, ',');)
        if (!k.empty()) kinds_.push_back(k);
    }
    for (const auto& k : kinds_)
      if (k != "kill" && k != "freeze" && k != "cut") {
        std::fprintf(stderr, "shoal-chaos: unknown fault kind '%s' (kill, freeze, cut)\n",
                     k.c_str());
        return kExitUsage;
      }
    shm_before_ = shm_segments();
    {
      std::random_device rd;
      char key[40];
      std::snprintf(key, sizeof key, "chaos-%08x%08x", rd(), rd());
      auth_key_ = key;
    }
    shoal::TcpStore::Options so;
    so.is_server = true;
    so.timeout = 30s;
    so.auth_key = auth_key_;  // the workers prove it to the store as to each other
    store_ = std::make_shared<shoal::TcpStore>("127.0.0.1", 0, so);
    store_addr_ = "127.0.0.1:" + std::to_string(store_->port());
    faults_log_ = std::fopen((a_.out + "/faults.jsonl").c_str(), "w");
    std::printf(
        "shoal-chaos: %d ranks, %.0f s, faults %s every ~%.1f s, seed %llu, store %s, transport "
        "%s, "
        "timeout %.0f s -> %s\n",
        a_.ranks, a_.duration, a_.faults.c_str(), a_.fault_every,
        static_cast<unsigned long long>(a_.seed), store_addr_.c_str(), a_.transport.c_str(),
        a_.timeout, a_.out.c_str());
    std::fflush(stdout);
    procs_.resize(a_.ranks);
    t0_ = Steady::now();
    for (int i = 0; i < a_.ranks; ++i) spawn(i, false);
    run_loop();
    finish();
    return report();
  }

 private:
  double now_s() const { return std::chrono::duration<double>(Steady::now() - t0_).count(); }
  double recover_bound_s() const { return 2 * a_.timeout + a_.shrink_wait + 20; }

  void spawn(int id, bool joiner) {
    Proc& p = procs_[id];
    ++p.gen;
    const std::string logp =
        a_.out + "/worker-" + std::to_string(id) + "-" + std::to_string(p.gen) + ".log";
    std::vector<std::string> argv = {"shoal-chaos",  "worker",
                                     "--id",         std::to_string(id),
                                     "--gen",        std::to_string(p.gen),
                                     "--ranks",      std::to_string(a_.ranks),
                                     "--store",      store_addr_,
                                     "--out",        a_.out,
                                     "--seed",       std::to_string(a_.seed),
                                     "--grow-every", std::to_string(a_.grow_every)};
    if (joiner) argv.push_back("--joiner");
    const pid_t driver = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != driver) _exit(127);
      const int fd = open(logp.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
      }
      setenv("SHOAL_TIMEOUT", std::to_string(static_cast<int>(a_.timeout)).c_str(), 1);
      setenv("SHOAL_SHRINK_WAIT", std::to_string(static_cast<int>(a_.shrink_wait)).c_str(), 1);
      setenv("SHOAL_TRANSPORT", a_.transport.c_str(), 1);
      setenv("SHOAL_AUTH_KEY", auth_key_.c_str(), 1);
      std::vector<char*> cargv;
      for (auto& s : argv) cargv.push_back(s.data());
      cargv.push_back(nullptr);
      execv(self_.c_str(), cargv.data());
      _exit(127);
    }
    p.pid = pid;
    spawned_.insert(pid);
    p.running = pid > 0;
    p.frozen = false;
    p.restart_at = 0;
    if (joiner) ++restarts_;
  }

  bool any_running() const {
    for (const auto& p : procs_)
      if (p.running) return true;
    return false;
  }
  // Reaps until no worker runs or `end` (now_s()) passes, looking every `period`.
  void reap_until(double end, std::chrono::milliseconds period) {
    for (reap(); any_running() && now_s() <= end; reap()) std::this_thread::sleep_for(period);
  }

  void reap() {
    for (;;) {
      int st = 0;
      const pid_t pid = waitpid(-1, &st, WNOHANG);
      if (pid <= 0) return;
      for (int id = 0; id < a_.ranks; ++id) {
        Proc& p = procs_[id];
        if (p.pid != pid) continue;
        p.running = false;
        p.pid = -1;
        const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        p.exit_codes.push_back(code);
        exits_.push_back({{"id", id}, {"gen", p.gen}, {"code", code}, {"t", now_s()}});
        if (code == kExitCorrupt) corrupt_exit_ = true;
        if (!stopping_)
          p.restart_at =
              now_s() + (code == 128 + SIGKILL ? a_.restart_delay * (0.7 + 0.6 * uni()) : 1.0);
      }
    }
  }

  double uni() { return std::uniform_real_distribution<double>(0, 1)(rng_); }

  std::map<int, Status> statuses() {
    std::map<int, Status> m;
    for (int id = 0; id < a_.ranks; ++id) {
      const std::string key = "chaos/status/" + std::to_string(id);
      if (!store_->check({key})) continue;
      std::istringstream is(store_->get_string(key));
      Status s;
      is >> s.gen >> s.epoch >> s.size >> s.next_op;
      if (s.gen == procs_[id].gen && procs_[id].running) m[id] = s;
    }
    return m;
  }

  // The current group: the highest epoch whose every member reports it, with its size.
  bool current_group(int64_t* epoch, int64_t* size, int64_t* next_op, std::vector<int>* ids) {
    const auto st = statuses();
    std::map<int64_t, std::vector<int>> by_epoch;
    for (const auto& [id, s] : st) by_epoch[s.epoch].push_back(id);
    for (auto it = by_epoch.rbegin(); it != by_epoch.rend(); ++it) {
      const Status& s = st.at(it->second.front());
      if (static_cast<int64_t>(it->second.size()) == s.size) {
        *epoch = it->first;
        *size = s.size;
        *next_op = s.next_op;
        if (ids) *ids = it->second;
        return true;
      }
    }
    return false;
  }

  int64_t progress() {
    if (!store_->check({"chaos/progress"})) return 0;
    return std::stoll(store_->get_string("chaos/progress"));
  }

  void log_fault(const json& j) {
    const std::string s = j.dump() + "\n";
    std::fwrite(s.data(), 1, s.size(), faults_log_);
    std::fflush(faults_log_);
  }

  // One TCP connection between two live member workers: {local addr, local port, peer addr, peer
  // port, pid a, pid b}.
  bool pick_connection(const std::set<pid_t>& pids, std::string* cmd, int* a_id, int* b_id) {
    struct Sock {
      std::string laddr, paddr;
      int lport, pport;
      pid_t pid;
    };
    std::vector<Sock> socks;
    std::istringstream is(sh("ss -tnpH state established 2>/dev/null"));
    for (std::string line; std::getline(is, line);) {
      std::istringstream ls(line);
      std::vector<std::string> tok;
      for (std::string t; ls >> t;) tok.push_back(t);
      size_t u = 0;
      while (u < tok.size() && tok[u].rfind("users:", 0) != 0) ++u;
      if (u == tok.size() || u < 2) continue;
      const auto pidpos = tok[u].find("pid=");
      if (pidpos == std::string::npos) continue;
      const pid_t pid = std::atoi(tok[u].c_str() + pidpos + 4);
      if (!pids.count(pid)) continue;
      auto split = [](const std::string& s, std::string* addr, int* port) {
        const auto c = s.rfind(':');
        if (c == std::string::npos) return false;
        *addr = s.substr(0, c);
        *port = std::atoi(s.c_str() + c + 1);
        return true;
      };
      Sock k;
      k.pid = pid;
      if (!split(tok[u - 2], &k.laddr, &k.lport) || !split(tok[u - 1], &k.paddr, &k.pport))
        continue;
      socks.push_back(k);
    }
    std::map<std::pair<std::string, int>, pid_t> owner;
    for (const auto& k : socks) owner[{k.laddr, k.lport}] = k.pid;
    std::vector<Sock> cands;
    for (const auto& k : socks) {
      auto it = owner.find({k.paddr, k.pport});
      if (it != owner.end() && it->second != k.pid) cands.push_back(k);
    }
    if (cands.empty()) return false;
    const Sock& k = cands[rng_() % cands.size()];
    auto strip = [](std::string s) {
      if (s.size() > 2 && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
      return s;
    };
    *cmd = "ss -K dst " + strip(k.paddr) + " dport = :" + std::to_string(k.pport) + " src " +
           strip(k.laddr) + " sport = :" + std::to_string(k.lport);
    const pid_t other = owner[{k.paddr, k.pport}];
    *a_id = *b_id = -1;
    for (int id = 0; id < a_.ranks; ++id) {
      if (procs_[id].pid == k.pid) *a_id = id;
      if (procs_[id].pid == other) *b_id = id;
    }
    return *a_id >= 0 && *b_id >= 0;
  }

  bool inject(const std::string& kind) {
    int64_t epoch = 0, size = 0, next_op = 0;
    std::vector<int> ids;
    if (!current_group(&epoch, &size, &next_op, &ids) || ids.empty()) return false;
    Fault f;
    f.kind = kind;
    f.epoch_before = epoch;
    f.size_before = size;
    f.next_op_before = next_op;
    if (kind == "kill" || kind == "freeze") {
      if (size < 3) return false;  // keep a group to shrink to
      const int id = ids[rng_() % ids.size()];
      f.victims = {id};
      f.victim_gen = procs_[id].gen;
      f.t_inject = wall_ms();
      if (kind == "kill") {
        kill(procs_[id].pid, SIGKILL);
      } else {
        kill(procs_[id].pid, SIGSTOP);
        procs_[id].frozen = true;
        frozen_id_ = id;
      }
      f.detail = "pid " + std::to_string(procs_[id].pid);
    } else {
      std::set<pid_t> pids;
      for (int id : ids) pids.insert(procs_[id].pid);
      std::string cmd;
      int a = -1, b = -1;
      if (!pick_connection(pids, &cmd, &a, &b)) return false;
      f.t_inject = wall_ms();
      int rc = 0;
      const std::string out = sh(cmd + " 2>&1", &rc);
      f.victims = {a, b};
      f.detail = cmd;
      // Gone? (ss -K prints a harmless "Invalid argument" for the other address family.)
      std::string filter = cmd.substr(std::strlen("ss -K "));
      if (!sh("ss -tnH state established " + filter + " 2>/dev/null").empty()) {
        ++cuts_failed_;
        log_fault({{"event", "cut_failed"}, {"detail", cmd}, {"output", out}});
        return false;
      }
    }
    f.index = static_cast<int>(faults_.size());
    if (!faults_.empty() && faults_.back().t_end == 0) faults_.back().t_end = f.t_inject;
    faults_.push_back(f);
    log_fault({{"event", "inject"},
               {"index", f.index},
               {"kind", kind},
               {"t", f.t_inject},
               {"victims", f.victims},
               {"detail", f.detail},
               {"epoch_before", epoch},
               {"size_before", size}});
    std::printf("[%6.1fs] fault %d: %s %s (group of %lld at epoch %lld)\n", now_s(), f.index,
                kind.c_str(),
                kind == "cut"
                    ? (std::to_string(f.victims[0]) + "<->" + std::to_string(f.victims[1])).c_str()
                    : std::to_string(f.victims[0]).c_str(),
                static_cast<long long>(size), static_cast<long long>(epoch));
    std::fflush(stdout);
    return true;
  }

  // Is the last fault recovered: a complete group at a later epoch, without the killed or frozen
  // one?
  void check_recovery() {
    if (faults_.empty()) return;
    Fault& f = faults_.back();
    if (f.recovered || pending_done_) return;
    int64_t epoch = 0, size = 0, next_op = 0;
    std::vector<int> ids;
    const double waited = (wall_ms() - f.t_inject) / 1000;
    if (current_group(&epoch, &size, &next_op, &ids) && epoch > f.epoch_before) {
      bool victim_in = false;
      if (f.kind != "cut")
        for (int id : ids) victim_in |= id == f.victims[0] && procs_[id].frozen;
      if (!victim_in) {
        f.recovered = true;
        f.recover_ms = wall_ms() - f.t_inject;
        f.size_after = size;
        f.epoch_after = epoch;
        f.next_op_after = next_op;
        pending_done_ = true;
        log_fault({{"event", "recovered"},
                   {"index", f.index},
                   {"ms", f.recover_ms},
                   {"epoch", epoch},
                   {"size", size},
                   {"members", ids}});
        std::printf("[%6.1fs]   recovered in %.0f ms: group of %lld at epoch %lld\n", now_s(),
                    f.recover_ms, static_cast<long long>(size), static_cast<long long>(epoch));
        std::fflush(stdout);
      }
    }
    if (!f.recovered && waited > recover_bound_s()) {
      pending_done_ = true;
      json st = json::object();
      for (const auto& [id, x] : statuses())
        st[std::to_string(id)] = {
            {"gen", x.gen}, {"epoch", x.epoch}, {"size", x.size}, {"next_op", x.next_op}};
      log_fault(
          {{"event", "not_recovered"}, {"index", f.index}, {"waited_s", waited}, {"statuses", st}});
      dump_stacks("fault not recovered");
      std::printf("[%6.1fs]   fault %d NOT recovered within %.0f s\n", now_s(), f.index, waited);
      std::fflush(stdout);
    }
    if (pending_done_ && frozen_id_ >= 0) thaw();
  }

  // What every running worker is doing (SIGUSR1 into its .log) and, with gdb, its stacks.
  void dump_stacks(const char* why) {
    const bool gdb = std::system("command -v gdb >/dev/null 2>&1") == 0;
    for (int id = 0; id < a_.ranks; ++id) {
      const Proc& p = procs_[id];
      if (!p.running) continue;
      kill(p.pid, SIGCONT);
      kill(p.pid, SIGUSR1);
      if (gdb)
        sh("timeout -s KILL 20 gdb -p " + std::to_string(p.pid) +
           " -batch -ex 'thread apply all bt' > " + a_.out + "/stacks-" + std::to_string(id) + "-" +
           std::to_string(p.gen) + ".txt 2>&1");
    }
    std::printf("[%6.1fs] %s: stacks and SIGUSR1 notes of the running workers are in %s\n", now_s(),
                why, a_.out.c_str());
    std::fflush(stdout);
  }

  void thaw() {
    Proc& p = procs_[frozen_id_];
    if (p.running) kill(p.pid, SIGCONT);
    p.frozen = false;
    thawed_id_ = frozen_id_;
    thawed_pid_ = p.pid;
    thawed_at_ = now_s();
    log_fault({{"event", "thaw"}, {"id", frozen_id_}, {"t", wall_ms()}});
    frozen_id_ = -1;
  }

  void run_loop() {
    double next_fault = a_.fault_every * (0.7 + 0.6 * uni());
    size_t kind_i = 0;
    std::vector<std::string> order = kinds_;
    std::shuffle(order.begin(), order.end(), rng_);
    int64_t last_progress = -1;
    double last_progress_t = 0;
    pending_done_ = true;
    while (now_s() < a_.duration) {
      reap();
      for (int id = 0; id < a_.ranks; ++id)
        if (!procs_[id].running && procs_[id].restart_at > 0 && now_s() >= procs_[id].restart_at)
          spawn(id, true);
      check_recovery();
      const int64_t p = progress();
      if (p != last_progress) last_progress = p, last_progress_t = now_s();
      if (now_s() - last_progress_t > recover_bound_s() + 10) {
        stalled_ = true;
        dump_stacks("stalled");
        std::printf("[%6.1fs] no progress for %.0f s: stopping\n", now_s(),
                    now_s() - last_progress_t);
        break;
      }
      if (corrupt_exit_) break;
      if (pending_done_ && thaw_settled() && now_s() >= next_fault && !kinds_.empty()) {
        if (kind_i == order.size()) {
          kind_i = 0;
          std::shuffle(order.begin(), order.end(), rng_);
        }
        if (inject(order[kind_i])) {
          ++kind_i;
          pending_done_ = false;
          next_fault = now_s() + a_.fault_every * (0.6 + 0.8 * uni());
        } else {
          next_fault = now_s() + 0.5;  // no suitable target now (e.g. the group is still growing)
        }
      }
      std::this_thread::sleep_for(50ms);
    }
  }

  void finish() {
    // Settle: the last fault recovers, restarted workers come back, the group regrows to full size.
    const double settle_end = now_s() + recover_bound_s() + 20;
    bool full = false;
    while (now_s() < settle_end && !corrupt_exit_ && !stalled_) {
      reap();
      for (int id = 0; id < a_.ranks; ++id)
        if (!procs_[id].running && procs_[id].restart_at > 0 && now_s() >= procs_[id].restart_at)
          spawn(id, true);
      check_recovery();
      int64_t epoch = 0, size = 0, next_op = 0;
      if (pending_done_ && frozen_id_ < 0 && thaw_settled() &&
          current_group(&epoch, &size, &next_op, nullptr) && size == a_.ranks) {
        full = true;
        final_epoch_ = epoch;
        break;
      }
      std::this_thread::sleep_for(50ms);
    }
    if (frozen_id_ >= 0) thaw();
    regrown_ = full;
    if (!faults_.empty() && faults_.back().t_end == 0) faults_.back().t_end = wall_ms();
    std::printf("[%6.1fs] stopping (%s)\n", now_s(),
                full ? "group back at full size" : "group NOT back at full size");
    std::fflush(stdout);
    stopping_ = true;
    store_->set("chaos/stop", "1");
    const double stop_end = now_s() + 2 * a_.timeout + a_.shrink_wait + 15;
    reap_until(stop_end, 50ms);
    if (any_running()) dump_stacks("hung");
    for (int id = 0; id < a_.ranks; ++id)
      if (procs_[id].running) {
        hung_.push_back(id);
        kill(procs_[id].pid, SIGCONT);
        kill(procs_[id].pid, SIGKILL);
      }
    reap_until(now_s() + 5, 20ms);
    // Any process of this job left (a worker that forked, or one not reaped)?
    if (DIR* d = opendir("/proc")) {
      while (dirent* e = readdir(d)) {
        if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
        std::ifstream in(std::string("/proc/") + e->d_name + "/cmdline");
        std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::replace(cmd.begin(), cmd.end(), '\0', ' ');
        if (cmd.find("worker") != std::string::npos &&
            cmd.find(store_addr_ + " ") != std::string::npos && std::atoi(e->d_name) != getpid())
          leftover_procs_.push_back(std::atoi(e->d_name));
      }
      closedir(d);
    }
  }

  int report() {
    // Read every worker's events.
    std::vector<json> events;
    if (DIR* d = opendir(a_.out.c_str())) {
      while (dirent* e = readdir(d)) {
        const std::string n = e->d_name;
        if (n.rfind("worker-", 0) != 0 || n.size() < 6 || n.substr(n.size() - 6) != ".jsonl")
          continue;
        std::ifstream in(a_.out + "/" + n);
        for (std::string line; std::getline(in, line);) {
          try {
            events.push_back(json::parse(line));
          } catch (...) {
          }
        }
      }
      closedir(d);
    }
    std::sort(events.begin(), events.end(), [](const json& x, const json& y) {
      return x["t"].get<double>() < y["t"].get<double>();
    });

    int64_t ops_verified = 0, ops_skipped = 0, corrupt = 0, reissued = 0, grows = 0, joins = 0,
            excluded = 0;
    int64_t final_next_op = 0;
    std::vector<double> shrink_ms, detect_all, recover_all;
    std::map<std::string, std::vector<double>> detect_by_kind, shrink_by_kind, recover_by_kind;
    std::map<std::string, int> detect_codes;
    json leaks = json::array();
    std::map<std::pair<int, int>, json>
        first_at_size;  // (id*1000+gen, size) -> first membership record
    std::map<std::pair<int, int>, int> last_skipped;
    int spurious = 0;
    json dropped = json::array();  // live workers a shrink left out
    std::set<std::string> grow_names;
    std::set<std::pair<int, int>> seen_detect;  // (id*1000+gen, fault index)
    for (const auto& j : events) {
      const std::string ev = j.value("ev", "");
      const int id = j.value("id", -1), gen = j.value("gen", -1);
      if (ev == "exit") {
        ops_verified += j.value("ops_verified", 0);
        final_next_op = std::max<int64_t>(final_next_op, j.value("next_op", 0));
        if (j.value("code", -1) == kExitDone && j.value("transitions", 0) > 0) {
          const int dfd = j.value("fds", 0) - j.value("fds_base", 0),
                    dth = j.value("threads", 0) - j.value("threads_base", 0);
          if (dfd > 0 || dth > 0)
            leaks.push_back({{"id", id},
                             {"gen", gen},
                             {"kind", "after the last communicator"},
                             {"fds_more", dfd},
                             {"threads_more", dth}});
        }
      } else if (ev == "membership") {
        last_skipped[{id, gen}] = j.value("skipped", 0);
        const auto key = std::make_pair(id * 1000 + gen, j.value("size", 0));
        auto it = first_at_size.find(key);
        if (it == first_at_size.end()) {
          first_at_size[key] = j;
        } else {
          const int dfd = j.value("fds", 0) - it->second.value("fds", 0),
                    dth = j.value("threads", 0) - it->second.value("threads", 0);
          if (dfd > 2 || dth > 1)
            leaks.push_back({{"id", id},
                             {"gen", gen},
                             {"kind", "growth at world size " + std::to_string(key.second)},
                             {"epoch", j.value("epoch", 0)},
                             {"fds_more", dfd},
                             {"threads_more", dth}});
        }
      } else if (ev == "corrupt") {
        ++corrupt;
      } else if (ev == "reissued") {
        ++reissued;
      } else if (ev == "grow") {
        grow_names.insert(j.value("name", ""));
      } else if (ev == "joined") {
        ++joins;
      } else if (ev == "excluded") {
        ++excluded;
        // A frozen worker is excluded by design; any other excluded worker was alive and dropped.
        const double t = j["t"].get<double>();
        const Fault* f = nullptr;
        bool frozen_victim = false;
        for (const auto& x : faults_) {
          if (x.t_inject <= t + 1) f = &x;
          frozen_victim |= x.kind == "freeze" && x.victims.front() == id && x.victim_gen == gen &&
                           x.t_inject <= t + 1;
        }
        if (!frozen_victim)
          dropped.push_back({{"id", id},
                             {"gen", gen},
                             {"fault", f ? f->index : -1},
                             {"kind", f ? f->kind : "none"}});
      } else if (ev == "detect" || ev == "shrink") {
        // Which fault? The latest injected at or before it.
        const double t = j["t"].get<double>();
        const Fault* f = nullptr;
        for (const auto& x : faults_)
          if (x.t_inject <= t + 1) f = &x;
        bool victim = f && f->kind != "cut" &&
                      std::find(f->victims.begin(), f->victims.end(), id) != f->victims.end();
        for (const auto& x : faults_)
          victim |= x.kind == "freeze" && x.victims.front() == id && x.victim_gen == gen &&
                    x.t_inject <= t + 1;  // thawed
        const bool outside = !f || (f->recovered && t > f->t_inject + f->recover_ms + 2000) ||
                             (!f->recovered && f->t_end > 0 && t > f->t_end);
        if (ev == "shrink") {
          shrink_ms.push_back(j.value("ms", 0.0));
          if (f && !outside && !victim) shrink_by_kind[f->kind].push_back(j.value("ms", 0.0));
          continue;
        }
        detect_codes[j.value("code", "?")]++;
        if (outside && !victim) {
          ++spurious;
        } else if (!victim && seen_detect.insert({id * 1000 + gen, f->index}).second) {
          const double d =
              std::max(0.0, t - f->t_inject);  // the first detection of this worker for this fault
          detect_all.push_back(d);
          detect_by_kind[f->kind].push_back(d);
        }
      }
    }
    for (const auto& [k, v] : last_skipped) ops_skipped += v;
    grows = static_cast<int64_t>(grow_names.size());

    json by_kind = json::object();
    int survived = 0, injected = 0;
    std::map<std::string, int> inj, surv;
    for (auto& f : faults_) {
      ++injected;
      inj[f.kind]++;
      // survived: a complete group formed without the victim and the job went on past it
      const bool ok = f.recovered && final_next_op > f.next_op_after;
      if (ok) ++survived, surv[f.kind]++;
      if (f.recovered)
        recover_all.push_back(f.recover_ms), recover_by_kind[f.kind].push_back(f.recover_ms);
    }
    for (const auto& k : kinds_)
      by_kind[k] = {{"injected", inj[k]},
                    {"survived", surv[k]},
                    {"detect_ms", stats(detect_by_kind[k])},
                    {"shrink_ms", stats(shrink_by_kind[k])},
                    {"recover_ms", stats(recover_by_kind[k])}};
    const auto shm_after = shm_segments(&spawned_);
    json shm_leaked = json::array();
    for (const auto& s : shm_after)
      if (!shm_before_.count(s)) shm_leaked.push_back(s);
    json faults = json::array();
    for (const auto& f : faults_)
      faults.push_back({{"index", f.index},
                        {"kind", f.kind},
                        {"victims", f.victims},
                        {"detail", f.detail},
                        {"size_before", f.size_before},
                        {"size_after", f.size_after},
                        {"recovered", f.recovered},
                        {"recover_ms", f.recover_ms}});
    json exits = exits_;
    const int64_t lost = ops_skipped;
    const bool ok = (injected > 0 || kinds_.empty()) && survived == injected && lost == 0 &&
                    corrupt == 0 && !corrupt_exit_ && leaks.empty() && shm_leaked.empty() &&
                    hung_.empty() && leftover_procs_.empty() && !stalled_ && regrown_ &&
                    (!a_.strict || dropped.empty());
    json s = {
        {"ok", ok},
        {"ranks", a_.ranks},
        {"duration_s", a_.duration},
        {"wall_s", now_s()},
        {"seed", a_.seed},
        {"transport", a_.transport},
        {"timeout_s", a_.timeout},
        {"shrink_wait_s", a_.shrink_wait},
        {"faults_injected", injected},
        {"faults_survived", survived},
        {"faults_by_kind", by_kind},
        {"detect_ms", stats(detect_all)},
        {"shrink_ms", stats(shrink_ms)},
        {"recover_ms", stats(recover_all)},
        {"detect_codes", detect_codes},
        {"errors_outside_faults", spurious},
        {"ops_verified", ops_verified},
        {"ops_completed", final_next_op},
        {"ops_reissued", reissued},
        {"ops_lost", lost},
        {"ops_corrupt", corrupt + (corrupt_exit_ && corrupt == 0 ? 1 : 0)},
        {"grows", grows},
        {"joins", joins},
        {"restarts", restarts_},
        {"cuts_failed", cuts_failed_},
        {"excluded_by_shrink", excluded},
        {"live_workers_dropped", dropped},
        {"regrown_to_full_size", regrown_},
        {"leaks", leaks},
        {"shm_segments_left", shm_leaked},
        {"hung_workers", hung_},
        {"leftover_processes", leftover_procs_},
        {"stalled", stalled_},
        {"exits", exits},
        {"faults", faults},
    };
    std::ofstream(a_.out + "/summary.json") << s.dump(2) << "\n";
    auto ms = [](const json& st) {
      if (st.value("n", 0) == 0) return std::string("-");
      char b[64];
      std::snprintf(b, sizeof b, "median %.0f ms, max %.0f ms", st["median"].get<double>(),
                    st["max"].get<double>());
      return std::string(b);
    };
    std::printf("\n== shoal-chaos summary (%s) ==\n", ok ? "PASS" : "FAIL");
    for (const auto& k : kinds_)
      std::printf("  %-7s injected %d, survived %d; detect %s; shrink %s\n", k.c_str(), inj[k],
                  surv[k], ms(by_kind[k]["detect_ms"]).c_str(),
                  ms(by_kind[k]["shrink_ms"]).c_str());
    std::printf("  faults: %d injected, %d survived\n", injected, survived);
    std::printf("  time to detect: %s (%zu detections)\n", ms(s["detect_ms"]).c_str(),
                detect_all.size());
    std::printf("  time to shrink: %s; fault to new group: %s\n", ms(s["shrink_ms"]).c_str(),
                ms(s["recover_ms"]).c_str());
    std::printf(
        "  ops: %lld verified (%lld distinct op indices), %lld re-issued after a failure, %lld "
        "lost, %lld corrupt\n",
        static_cast<long long>(ops_verified), static_cast<long long>(final_next_op),
        static_cast<long long>(reissued), static_cast<long long>(lost),
        static_cast<long long>(s["ops_corrupt"].get<int64_t>()));
    std::printf(
        "  restarts %d, grows %lld, joins %lld, excluded by shrink %lld (%zu of them alive, not "
        "frozen), "
        "errors outside faults %d, back at full size: %s\n",
        restarts_, static_cast<long long>(grows), static_cast<long long>(joins),
        static_cast<long long>(excluded), dropped.size(), spurious, regrown_ ? "yes" : "NO");
    std::printf(
        "  leaks: %zu fd/thread, %zu shm segments, %zu hung workers, %zu leftover processes\n",
        leaks.size(), shm_leaked.size(), hung_.size(), leftover_procs_.size());
    if (!dropped.empty())
      std::printf(
          "  WARNING: %zu live worker(s) left out by a shrink (%s): %s\n", dropped.size(),
          a_.strict ? "fails the run (--strict)" : "restarted as joiners; --strict fails the run",
          dropped.dump().c_str());
    std::printf("  details: %s/summary.json\n", a_.out.c_str());
    return ok ? 0 : 1;
  }

  RunArgs a_;
  std::mt19937_64 rng_;
  std::string self_, store_addr_, auth_key_;
  std::vector<std::string> kinds_;
  std::shared_ptr<shoal::TcpStore> store_;
  FILE* faults_log_ = nullptr;
  std::vector<Proc> procs_;
  std::vector<Fault> faults_;
  Steady::time_point t0_;
  int frozen_id_ = -1, restarts_ = 0, cuts_failed_ = 0;
  int thawed_id_ = -1;  // a thawed worker that has not exited yet: the freeze is not over
  pid_t thawed_pid_ = -1;
  double thawed_at_ = 0;
  // The thawed worker left (or the bound passed): the fault is over.
  bool thaw_settled() {
    if (thawed_id_ < 0) return true;
    if (procs_[thawed_id_].pid != thawed_pid_ || !procs_[thawed_id_].running ||
        now_s() - thawed_at_ > 2 * a_.timeout + 5) {
      if (procs_[thawed_id_].pid == thawed_pid_ && procs_[thawed_id_].running)
        log_fault({{"event", "thawed_worker_still_running"},
                   {"id", thawed_id_},
                   {"waited_s", now_s() - thawed_at_}});
      thawed_id_ = -1;
      return true;
    }
    return false;
  }
  bool pending_done_ = true, stopping_ = false, corrupt_exit_ = false, stalled_ = false,
       regrown_ = false;
  int64_t final_epoch_ = 0;
  std::set<std::string> shm_before_;
  std::set<pid_t> spawned_;  // every worker process started, for the /dev/shm check
  std::vector<int> hung_, leftover_procs_;
  json exits_ = json::array();
};
}  // namespace

int run_driver(const RunArgs& args, const std::string& worker_exe) {
  return Driver(args).main(worker_exe);
}

}  // namespace shoal::chaos
