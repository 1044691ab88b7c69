#include "chaos/worker.hpp"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "chaos/workload.hpp"
#include "core/config.hpp"
#include "shoal/communicator.hpp"
#include "shoal/error.hpp"
#include "shoal/store.hpp"

namespace shoal::chaos {

using json = nlohmann::json;
using namespace std::chrono_literals;

double wall_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {

using Steady = std::chrono::steady_clock;
double since_ms(Steady::time_point t) {
  return std::chrono::duration<double, std::milli>(Steady::now() - t).count();
}

int count_dir(const char* path) {
  DIR* d = opendir(path);
  if (!d) return -1;
  int n = 0;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n - (std::strcmp(path, "/proc/self/fd") == 0 ? 1 : 0);  // the DIR's own descriptor
}

std::shared_ptr<shoal::TcpStore> connect_store(const std::string& addr) {
  const auto colon = addr.rfind(':');
  if (colon == std::string::npos) throw std::runtime_error("--store wants host:port, got " + addr);
  shoal::TcpStore::Options o;
  o.timeout = 60s;
  o.connect_timeout = 30s;
  return std::make_shared<shoal::TcpStore>(
      addr.substr(0, colon), static_cast<uint16_t>(std::stoi(addr.substr(colon + 1))), o);
}

// =====================================================================================
// worker
// =====================================================================================

// What the worker is doing, for SIGUSR1 (the driver asks before it kills a hung worker).
char g_doing[512] = "starting";
template <class... A>
void doing(const char* fmt, A... args) {
  std::snprintf(g_doing, sizeof g_doing, fmt, args...);
}
void on_usr1(int) {
  char buf[600];
  const int n = std::snprintf(buf, sizeof buf, "\nSIGUSR1: %s\n", g_doing);
  if (n > 0) (void)!::write(2, buf, static_cast<size_t>(n));
}

class Worker {
 public:
  explicit Worker(WorkerArgs a) : a_(std::move(a)) {}

  int main() {
    const std::string path =
        a_.out + "/worker-" + std::to_string(a_.id) + "-" + std::to_string(a_.gen) + ".jsonl";
    log_ = std::fopen(path.c_str(), "a");
    if (!log_) {
      std::fprintf(stderr, "cannot open %s\n", path.c_str());
      return kExitCannot;
    }
    try {
      base_ = connect_store(a_.store);
    } catch (const std::exception& e) {
      event({{"ev", "error"}, {"what", std::string("store: ") + e.what()}});
      return kExitCannot;
    }
    signal(SIGUSR1, on_usr1);
    fds_base_ = count_dir("/proc/self/fd");
    threads_base_ = count_dir("/proc/self/task");
    event({{"ev", "start"},
           {"joiner", a_.joiner},
           {"pid", getpid()},
           {"fds", fds_base_},
           {"threads", threads_base_}});
    const int rc = loop();
    comm_.reset();  // destroy whatever is left
    const int fds = count_dir("/proc/self/fd"), threads = count_dir("/proc/self/task");
    event({{"ev", "exit"},
           {"code", rc},
           {"ops_verified", verified_},
           {"next_op", next_op_},
           {"epoch", epoch_},
           {"redone", redone_},
           {"fds", fds},
           {"threads", threads},
           {"fds_base", fds_base_},
           {"threads_base", threads_base_},
           {"members", members_},
           {"transitions", transitions_}});
    std::fclose(log_);
    return rc;
  }

 private:
  void event(json j) {
    j["t"] = wall_ms();
    j["id"] = a_.id;
    j["gen"] = a_.gen;
    const std::string s = j.dump() + "\n";
    std::fwrite(s.data(), 1, s.size(), log_);
    std::fflush(log_);
  }

  shoal::Options options() const { return {}; }  // SHOAL_TIMEOUT from the environment
  // The job's store (grow() and join() meet there): the driver's, under chaos/init/.
  std::shared_ptr<shoal::Store> job_store() const {
    return std::make_shared<shoal::PrefixStore>("chaos/init", base_);
  }

  // The joiner's way in: a ticket, then the grow name rank 0 gives it, then join().
  bool join_job() {
    const int64_t ticket = base_->add("chaos/tickets", 1);
    event({{"ev", "ticket"}, {"ticket", ticket}});
    const std::string key = "chaos/ticket/" + std::to_string(ticket);
    const auto t0 = Steady::now();
    while (!base_->check({key})) {
      if (base_->check({"chaos/stop"})) {
        event({{"ev", "not_admitted"}});
        return false;
      }
      if (since_ms(t0) > 600000) throw std::runtime_error("no admission within 10 minutes");
      std::this_thread::sleep_for(50ms);
    }
    const std::string name = base_->get_string(key);
    doing("join %s (ticket %lld)", name.c_str(), static_cast<long long>(ticket));
    const auto t1 = Steady::now();
    comm_.emplace(shoal::Communicator::join(job_store(), name, options()));
    event({{"ev", "joined"},
           {"name", name},
           {"ms", since_ms(t1)},
           {"rank", comm_->rank()},
           {"size", comm_->size()}});
    return true;
  }

  // After every new communicator: agree on the epoch and the next op, learn the members.
  void sync() {
    doing("sync (epoch %lld, next op %lld, rank %d of %d)", static_cast<long long>(epoch_),
          static_cast<long long>(next_op_), comm_->rank(), comm_->size());
    int64_t a[2] = {epoch_, fresh_ ? INT64_MIN : -next_op_};
    comm_->all_reduce(a, 2, shoal::DataType::int64, shoal::ReduceOp::max);
    const int64_t agreed = -a[1];
    if (!fresh_) {
      if (agreed > next_op_) skipped_ += agreed - next_op_;  // would be lost: never expected
      redone_ += next_op_ - agreed;
    }
    std::vector<int32_t> ids(comm_->size());
    int32_t mine = a_.id;
    comm_->all_gather(&mine, ids.data(), 1, shoal::DataType::int32);
    epoch_ = a[0] + 1;
    next_op_ = agreed;
    fresh_ = false;
    members_.assign(ids.begin(), ids.end());
    ++transitions_;
    const int fds = count_dir("/proc/self/fd"), threads = count_dir("/proc/self/task");
    event({{"ev", "membership"},
           {"epoch", epoch_},
           {"rank", comm_->rank()},
           {"size", comm_->size()},
           {"members", members_},
           {"next_op", next_op_},
           {"fds", fds},
           {"threads", threads},
           {"skipped", skipped_}});
    base_->set("chaos/status/" + std::to_string(a_.id),
               std::to_string(a_.gen) + " " + std::to_string(epoch_) + " " +
                   std::to_string(comm_->size()) + " " + std::to_string(next_op_));
  }

  // Rank 0 reads the stop flag and the waiting joiners; everyone learns them by broadcast.
  // Returns true to stop.
  bool checkpoint() {
    doing("checkpoint at op %lld epoch %lld rank %d of %d", static_cast<long long>(next_op_),
          static_cast<long long>(epoch_), comm_->rank(), comm_->size());
    int64_t b[3] = {0, 0, 0};  // stop, joining, first ticket - 1
    if (comm_->rank() == 0) {
      b[0] = base_->check({"chaos/stop"}) ? 1 : 0;
      const int64_t tickets = base_->add("chaos/tickets", 0),
                    admitted = base_->add("chaos/admitted", 0);
      b[1] = std::max<int64_t>(0, std::min<int64_t>(tickets - admitted, a_.ranks - comm_->size()));
      b[2] = admitted;
      if (b[0]) b[1] = 0;
      base_->set("chaos/progress", std::to_string(next_op_));
    }
    if (trace_) std::fprintf(stderr, "checkpoint at op %lld\n", static_cast<long long>(next_op_));
    comm_->broadcast(b, 3, shoal::DataType::int64, 0);
    if (trace_)
      std::fprintf(stderr, "checkpoint done: stop %lld joining %lld\n",
                   static_cast<long long>(b[0]), static_cast<long long>(b[1]));
    if (b[0]) return true;
    if (Steady::now() - last_progress_ > 1s) {
      last_progress_ = Steady::now();
      event({{"ev", "progress"},
             {"next_op", next_op_},
             {"ops_verified", verified_},
             {"epoch", epoch_}});
    }
    if (b[1] == 0) return false;
    // (built with += : "literal" + std::string trips g++ 12's -Wrestrict false positive)
    std::string name = "g";
    name += std::to_string(epoch_) + "-" + std::to_string(b[2] + 1);
    if (comm_->rank() == 0) {
      base_->add("chaos/admitted", b[1]);
      for (int64_t t = b[2] + 1; t <= b[2] + b[1]; ++t)
        base_->set("chaos/ticket/" + std::to_string(t), name);
    }
    const auto t0 = Steady::now();
    doing("grow %s by %lld", name.c_str(), static_cast<long long>(b[1]));
    event({{"ev", "grow_begin"}, {"name", name}, {"joining", b[1]}, {"size", comm_->size()}});
    shoal::Communicator grown = comm_->grow(static_cast<int>(b[1]), name);
    comm_.reset();  // the old one
    comm_.emplace(std::move(grown));
    event({{"ev", "grow"},
           {"name", name},
           {"joining", b[1]},
           {"size", comm_->size()},
           {"ms", since_ms(t0)}});
    need_sync_ = true;
    return false;
  }

  int loop() {
    try {
      if (a_.joiner) {
        fresh_ = true;
        if (!join_job()) return kExitDone;
      } else {
        fresh_ = false;
        comm_.emplace(shoal::Communicator::create(job_store(), a_.id, a_.ranks, options()));
      }
    } catch (const std::exception& e) {
      event({{"ev", "error"}, {"stage", a_.joiner ? "join" : "create"}, {"what", e.what()}});
      return kExitCannot;
    }
    need_sync_ = true;
    int64_t ckpt_op = -1;  // the op index whose checkpoint ran on this communicator
    int64_t failed_op = -1;
    double detect_t = 0;
    for (;;) {
      try {
        if (need_sync_) {
          sync();
          need_sync_ = false;
          ckpt_op = -1;
          if (detect_t > 0) {
            event({{"ev", "recovered"},
                   {"since_detect_ms", wall_ms() - detect_t},
                   {"epoch", epoch_},
                   {"size", comm_->size()}});
            detect_t = 0;
          }
        }
        if (next_op_ % a_.grow_every == 0 && ckpt_op != next_op_) {
          if (checkpoint()) {
            event({{"ev", "stop"}, {"next_op", next_op_}, {"epoch", epoch_}});
            return kExitDone;
          }
          ckpt_op = next_op_;
          continue;  // a grow asks for a sync first
        }
        const OpSpec s = derive_op(a_.seed, epoch_, next_op_, comm_->size());
        doing("op %lld epoch %lld rank %d of %d: %s count %zu dtype %d op %d root %d",
              static_cast<long long>(next_op_), static_cast<long long>(epoch_), comm_->rank(),
              comm_->size(), kind_name(s.kind), s.count, static_cast<int>(s.dtype),
              static_cast<int>(s.op), s.root(comm_->size()));
        if (trace_)
          std::fprintf(stderr, "op %lld epoch %lld: %s count %zu dtype %d op %d root %d\n",
                       static_cast<long long>(next_op_), static_cast<long long>(epoch_),
                       kind_name(s.kind), s.count, static_cast<int>(s.dtype),
                       static_cast<int>(s.op), s.root(comm_->size()));
        const std::string bad = run_op(*comm_, s, members_, epoch_, next_op_);
        if (!bad.empty()) {
          event({{"ev", "corrupt"},
                 {"op", next_op_},
                 {"epoch", epoch_},
                 {"what", bad},
                 {"members", members_}});
          std::fprintf(stderr, "CORRUPT op %lld epoch %lld: %s\n", static_cast<long long>(next_op_),
                       static_cast<long long>(epoch_), bad.c_str());
          return kExitCorrupt;
        }
        if (failed_op == next_op_) event({{"ev", "reissued"}, {"op", next_op_}, {"epoch", epoch_}});
        ++verified_;
        ++next_op_;
      } catch (const shoal::Error& e) {
        const double t = wall_ms();
        if (detect_t == 0) detect_t = t;
        failed_op = next_op_;
        event({{"ev", "detect"},
               {"code", std::string(shoal::to_string(e.code()))},
               {"peer", e.peer()},
               {"op", next_op_},
               {"epoch", epoch_},
               {"size", comm_->size()},
               {"what", e.what()}});
        const auto t0 = Steady::now();
        doing("shrink after op %lld epoch %lld failed", static_cast<long long>(next_op_),
              static_cast<long long>(epoch_));
        std::optional<shoal::Communicator> next;
        try {
          next.emplace(comm_->shrink());
        } catch (const shoal::Error& e2) {
          const bool excluded =
              e2.code() == shoal::ErrorCode::PeerFailure && e2.peer() == comm_->rank() &&
              std::string(e2.what()).find("without this rank") != std::string::npos;
          event({{"ev", excluded ? "excluded" : "shrink_failed"},
                 {"code", std::string(shoal::to_string(e2.code()))},
                 {"ms", since_ms(t0)},
                 {"what", e2.what()}});
          return excluded ? kExitExcluded : kExitCannot;
        }
        const double shrink_ms = since_ms(t0);
        const int old_size = comm_->size();
        const auto t1 = Steady::now();
        comm_.reset();  // the old communicator
        comm_.emplace(std::move(*next));
        event({{"ev", "shrink"},
               {"ms", shrink_ms},
               {"destroy_ms", since_ms(t1)},
               {"from", old_size},
               {"to", comm_->size()},
               {"since_detect_ms", wall_ms() - detect_t}});
        need_sync_ = true;
      } catch (const std::exception& e) {
        event({{"ev", "error"}, {"stage", "loop"}, {"what", e.what()}});
        return kExitCannot;
      }
    }
  }

  WorkerArgs a_;
  FILE* log_ = nullptr;
  std::shared_ptr<shoal::TcpStore> base_;
  std::optional<shoal::Communicator>
      comm_;  // (optional: Communicator() does not compile outside the library)
  std::vector<int> members_;
  int64_t epoch_ = 0, next_op_ = 0, verified_ = 0, skipped_ = 0, redone_ = 0;
  int transitions_ = 0, fds_base_ = 0, threads_base_ = 0;
  bool fresh_ = false, need_sync_ = false;
  const bool trace_ = shoal::config::get_int("SHOAL_CHAOS_TRACE") != 0;
  Steady::time_point last_progress_ = Steady::now();
};

}  // namespace

int run_worker(const WorkerArgs& args) { return Worker(args).main(); }

}  // namespace shoal::chaos
