// From a launcher's environment to (rank, size, local rank, store). See docs/launchers.md.
#include "store/bootstrap.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/auth.hpp"
#include "core/check.hpp"
#include "core/config.hpp"

namespace shoal::bootstrap {
namespace {

constexpr int kSlurmBasePort = 29500;
constexpr const char* kFallbackDirPrefix = "/tmp/shoal-";
// Counters of the one-host file store, for deleting it when the last rank leaves (as torch's
// FileStore does): joined by open_store, left by the store's destructor.
constexpr const char* kJoinedKey = "shoal/file_store/joined";
constexpr const char* kLeftKey = "shoal/file_store/left";

// Environment access that treats empty values as unset.
class Env {
 public:
  explicit Env(const EnvLookup& lookup) : lookup_(lookup) {}
  std::optional<std::string> get(const std::string& name) const {
    auto v = lookup_(name);
    if (v && v->empty()) return std::nullopt;
    return v;
  }
  bool has(const std::string& name) const { return get(name).has_value(); }
  // A SHOAL_* setting: the environment's value, else the default from the config table.
  std::string setting(const char* name) const {
    if (auto v = get(name)) return *v;
    for (const auto& s : config::settings())
      if (std::strcmp(s.name, name) == 0) return s.default_value;
    SHOAL_THROW(Internal, "setting " << name << " is not declared in config.cpp");
  }

 private:
  const EnvLookup& lookup_;
};

std::optional<int64_t> parse_int(const std::string& text) {
  int64_t v = 0;
  auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (r.ec != std::errc() || r.ptr != text.data() + text.size() || text.empty())
    return std::nullopt;
  return v;
}

// An integer variable that must be present; `who` names the launcher for the message.
int require_int(const Env& env, const std::string& name, const std::string& who,
                const std::string& also_needed) {
  auto v = env.get(name);
  SHOAL_CHECK(v.has_value(), InvalidArgument,
              who << " launch detected, but " << name << " is not set (needed: " << also_needed
                  << "). Start the program with the launcher itself, or set " << name
                  << " yourself");
  auto x = parse_int(*v);
  SHOAL_CHECK(x && *x >= INT32_MIN && *x <= INT32_MAX, InvalidArgument,
              name << "='" << *v << "' is not an integer (" << who << " launch)");
  return static_cast<int>(*x);
}

std::optional<int> optional_int(const Env& env, const std::string& name, const std::string& who) {
  auto v = env.get(name);
  if (!v) return std::nullopt;
  auto x = parse_int(*v);
  SHOAL_CHECK(x && *x >= INT32_MIN && *x <= INT32_MAX, InvalidArgument,
              name << "='" << *v << "' is not an integer (" << who << " launch)");
  return static_cast<int>(*x);
}

int parse_port(const std::string& text, const std::string& what) {
  auto x = parse_int(text);
  SHOAL_CHECK(x && *x >= 1 && *x <= 65535, InvalidArgument,
              what << "='" << text << "' is not a TCP port (1-65535)");
  return static_cast<int>(*x);
}

// "host:port", "[v6::addr]:port".
std::pair<std::string, int> parse_host_port(const std::string& text, const char* name) {
  std::string host, port;
  if (!text.empty() && text[0] == '[') {
    auto close = text.find(']');
    SHOAL_CHECK(close != std::string::npos && close + 1 < text.size() && text[close + 1] == ':',
                InvalidArgument,
                name << "='" << text << "' is not host:port (IPv6 addresses: [addr]:port)");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    SHOAL_CHECK(colon != std::string::npos && colon > 0 && text.find(':') == colon, InvalidArgument,
                name << "='" << text << "' is not host:port (example: " << name
                     << "=node01:29500; IPv6 addresses: [addr]:port)");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  SHOAL_CHECK(!host.empty(), InvalidArgument, name << "='" << text << "' has an empty host");
  return {host, parse_port(port, name)};
}

std::string strip_brackets(const std::string& host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    return host.substr(1, host.size() - 2);
  return host;
}

std::string sanitize(const std::string& id) {
  std::string out;
  for (char c : id)
    out +=
        (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') ? c : '_';
  return out.substr(0, 128);
}

std::string fallback_path(const std::string& launcher, const std::string& job_id) {
  return std::string(kFallbackDirPrefix) + std::to_string(::getuid()) + "/store-" + launcher + "-" +
         sanitize(job_id);
}

// "4(x2),3" -> {4, 4, 3}
std::vector<int> expand_tasks_per_node(const std::string& text, const char* name) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    int reps = 1;
    auto paren = item.find('(');
    std::string count = item.substr(0, paren);
    if (paren != std::string::npos) {
      SHOAL_CHECK(item.size() > paren + 3 && item[paren + 1] == 'x' && item.back() == ')',
                  InvalidArgument,
                  name << "='" << text << "' is not a SLURM task count list (example: 4(x2),3)");
      auto r = parse_int(item.substr(paren + 2, item.size() - paren - 3));
      SHOAL_CHECK(r && *r >= 1 && *r <= 1000000, InvalidArgument,
                  name << "='" << text << "' is not a SLURM task count list (example: 4(x2),3)");
      reps = static_cast<int>(*r);
    }
    auto c = parse_int(count);
    SHOAL_CHECK(c && *c >= 1 && *c <= INT32_MAX, InvalidArgument,
                name << "='" << text << "' is not a SLURM task count list (example: 4(x2),3)");
    out.insert(out.end(), reps, static_cast<int>(*c));
  }
  SHOAL_CHECK(!out.empty(), InvalidArgument, name << " is empty");
  return out;
}

// What the launcher told us about the store, before the generic rules apply.
struct StoreHints {
  std::string launcher_name;                // for messages: "Open MPI (mpirun)"
  std::string fix;                          // the exact command-line fix for a missing address
  bool mpi_style = false;                   // may fall back to a one-host file store
  std::string job_id;                       // names the fallback file and the key prefix
  std::optional<std::string> default_host;  // SLURM: first node of the step
  std::optional<int> default_port;          // SLURM: 29500 + job id % 1000
};

// Applies, in order: SHOAL_STORE_PATH, SHOAL_STORE_ADDR, MASTER_ADDR/MASTER_PORT, the one-host
// file store (MPI launchers, SLURM), the launcher's own default (SLURM's node list).
void resolve_store(LaunchInfo& info, const Env& env, const StoreHints& hints) {
  if (auto path = env.get("SHOAL_STORE_PATH")) {
    info.file_store_path = *path;
    return;
  }
  const bool external = env.setting("SHOAL_STORE_EXTERNAL") == "1";
  if (auto addr = env.get("SHOAL_STORE_ADDR")) {
    auto [host, port] = parse_host_port(*addr, "SHOAL_STORE_ADDR");
    info.store_host = host;
    info.store_port = port;
    info.store_is_external = external;
    return;
  }
  auto master_addr = env.get("MASTER_ADDR");
  auto master_port = env.get("MASTER_PORT");
  if (master_addr && master_port) {
    info.store_host = strip_brackets(*master_addr);
    info.store_port = parse_port(*master_port, "MASTER_PORT");
    info.store_is_external = external;
    return;
  }
  if (!hints.mpi_style) {
    // torchrun / shoal-run / plain env: the address is part of the contract.
    const char* missing = !master_addr && !master_port ? "MASTER_ADDR and MASTER_PORT"
                          : !master_addr               ? "MASTER_ADDR"
                                                       : "MASTER_PORT";
    SHOAL_THROW(InvalidArgument,
                hints.launcher_name
                    << " launch detected (RANK=" << info.rank << ", WORLD_SIZE=" << info.size
                    << "), but " << missing << (master_addr || master_port ? " is" : " are")
                    << " not set, so the ranks cannot find the rendezvous store. " << hints.fix);
  }
  const bool one_host = info.local_size == info.size;
  if (!master_addr && !master_port && one_host) {
    info.file_store_path = fallback_path(info.launcher, hints.job_id);
    return;
  }
  // SLURM: the first node of the step and a port derived from the job id fill the gaps.
  std::optional<std::string> host = master_addr ? strip_brackets(*master_addr) : hints.default_host;
  std::optional<int> port =
      master_port ? parse_port(*master_port, "MASTER_PORT") : hints.default_port;
  if (host && port) {
    info.store_host = *host;
    info.store_port = *port;
    info.store_is_external = external;
    return;
  }
  std::string missing = !master_addr && !master_port ? "MASTER_ADDR and MASTER_PORT are"
                        : !master_addr               ? "MASTER_ADDR is"
                                                     : "MASTER_PORT is";
  SHOAL_THROW(
      InvalidArgument, hints.launcher_name
                           << " launch detected (rank " << info.rank << " of " << info.size << ", "
                           << info.local_size << " on this host), but " << missing
                           << " not set (nor SHOAL_STORE_ADDR), "
                           << "so the ranks on different hosts cannot find the rendezvous store. "
                           << hints.fix
                           << " Alternatively set SHOAL_STORE_ADDR=host:port, or SHOAL_STORE_PATH "
                              "to a file on a file "
                           << "system every host shares");
}

void validate(const LaunchInfo& info, const std::string& rank_var, const std::string& size_var,
              const std::string& local_rank_var, const std::string& local_size_var) {
  SHOAL_CHECK(
      info.size >= 1, InvalidArgument,
      size_var << "=" << info.size << " must be at least 1 (" << info.launcher << " launch)");
  SHOAL_CHECK(info.rank >= 0 && info.rank < info.size, InvalidArgument,
              rank_var << "=" << info.rank << " is outside [0, " << info.size << ") given by "
                       << size_var << "=" << info.size << " (" << info.launcher << " launch)");
  SHOAL_CHECK(info.local_size >= 1 && info.local_size <= info.size, InvalidArgument,
              local_size_var << "=" << info.local_size << " must be in [1, " << size_var << "="
                             << info.size << "] (" << info.launcher << " launch)");
  SHOAL_CHECK(info.local_rank >= 0 && info.local_rank < info.local_size, InvalidArgument,
              local_rank_var << "=" << info.local_rank << " is outside [0, " << info.local_size
                             << ") given by " << local_size_var << " (" << info.launcher
                             << " launch)");
}

LaunchInfo detect_torchrun(const Env& env) {
  LaunchInfo info;
  auto run_id = env.get("TORCHELASTIC_RUN_ID");
  auto restart = env.get("TORCHELASTIC_RESTART_COUNT");
  info.launcher = run_id && run_id->rfind("shoal-run-", 0) == 0 ? "shoal-run"
                  : run_id || restart                           ? "torchrun"
                                                                : "env";
  const std::string who = info.launcher == "env" ? "RANK/WORLD_SIZE environment" : info.launcher;
  const std::string needed = "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT";
  info.rank = require_int(env, "RANK", who, needed);
  info.size = require_int(env, "WORLD_SIZE", who, needed);
  // Without LOCAL_*, claim nothing about the host (the communicator finds out who shares it).
  info.local_rank = optional_int(env, "LOCAL_RANK", who).value_or(0);
  info.local_size =
      optional_int(env, "LOCAL_WORLD_SIZE", who).value_or(std::max(1, info.local_rank + 1));
  validate(info, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");

  StoreHints hints;
  hints.launcher_name = who;
  hints.fix =
      "torchrun and shoal-run set both; when launching by hand, export MASTER_ADDR=<host of rank "
      "0> "
      "MASTER_PORT=<free port> on every rank (or SHOAL_STORE_ADDR=host:port, or "
      "SHOAL_STORE_PATH=file).";
  const bool has_addr = env.has("SHOAL_STORE_ADDR");
  resolve_store(info, env, hints);
  // torchrun (static rendezvous) and shoal-run host the store in the agent: connect, never bind.
  if (!has_addr && info.file_store_path.empty() &&
      env.get("TORCHELASTIC_USE_AGENT_STORE") == "True")
    info.store_is_external = true;
  // The agent's store outlives restarts and may serve several runs: keep each attempt apart.
  if (run_id || restart)
    info.key_prefix = "shoal/" + (run_id ? *run_id : std::string("run")) + "/attempt_" +
                      (restart ? *restart : "0");
  return info;
}

// The parent pid is a usable job id only on one host (the ranks share their launcher proxy);
// with a TCP store, a guessed id would split ranks on different hosts, so it is left out.
std::string prefix_for(const std::string& base, const std::string& job_id, const LaunchInfo& info) {
  if (job_id.rfind("ppid", 0) == 0 && info.file_store_path.empty()) return base;
  return base + "/" + job_id;
}

LaunchInfo detect_openmpi(const Env& env) {
  LaunchInfo info;
  info.launcher = "openmpi";
  const std::string who = "Open MPI (mpirun)";
  const std::string needed = "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE";
  info.rank = require_int(env, "OMPI_COMM_WORLD_RANK", who, needed);
  info.size = require_int(env, "OMPI_COMM_WORLD_SIZE", who, needed);
  info.local_rank = optional_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", who).value_or(0);
  info.local_size = optional_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", who)
                        .value_or(std::max(1, info.local_rank + 1));
  validate(info, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
           "OMPI_COMM_WORLD_LOCAL_SIZE");
  StoreHints hints;
  hints.launcher_name = who;
  hints.mpi_style = true;
  hints.fix = "Fix: mpirun -x MASTER_ADDR=<host of rank 0> -x MASTER_PORT=29500 ...";
  if (auto id = env.get("OMPI_MCA_ess_base_jobid"))
    hints.job_id = *id;
  else if (auto ns = env.get("PMIX_NAMESPACE"))
    hints.job_id = *ns;
  else if (auto j = env.get("OMPI_MCA_orte_ess_jobid"))
    hints.job_id = *j;
  else
    hints.job_id = "ppid" + std::to_string(::getppid());
  resolve_store(info, env, hints);
  info.key_prefix = prefix_for("shoal/openmpi", hints.job_id, info);
  return info;
}

LaunchInfo detect_mpich(const Env& env) {
  LaunchInfo info;
  info.launcher = "mpich";
  const std::string who = "MPICH/Hydra (mpiexec)";
  const std::string needed = "PMI_RANK, PMI_SIZE";
  info.rank = require_int(env, "PMI_RANK", who, needed);
  info.size = require_int(env, "PMI_SIZE", who, needed);
  auto lr = optional_int(env, "MPI_LOCALRANKID", who);
  auto ls = optional_int(env, "MPI_LOCALNRANKS", who);
  // Without Hydra's local variables we do not know who shares the host (the communicator finds
  // out).
  info.local_rank = lr.value_or(0);
  info.local_size = ls.value_or(std::max(1, info.local_rank + 1));
  validate(info, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS");
  StoreHints hints;
  hints.launcher_name = who;
  hints.mpi_style = true;
  hints.fix = "Fix: mpiexec -genv MASTER_ADDR <host of rank 0> -genv MASTER_PORT 29500 ...";
  hints.job_id = env.get("PMI_KVSNAME").value_or("ppid" + std::to_string(::getppid()));
  resolve_store(info, env, hints);
  info.key_prefix = prefix_for("shoal/mpich", hints.job_id, info);
  return info;
}

LaunchInfo detect_slurm(const Env& env) {
  LaunchInfo info;
  info.launcher = "slurm";
  const std::string who = "SLURM (srun)";
  const std::string needed = "SLURM_PROCID, SLURM_NTASKS";
  info.rank = require_int(env, "SLURM_PROCID", who, needed);
  info.size = env.has("SLURM_NTASKS") || !env.has("SLURM_NPROCS")
                  ? require_int(env, "SLURM_NTASKS", who, needed)
                  : require_int(env, "SLURM_NPROCS", who, needed);
  info.local_rank = optional_int(env, "SLURM_LOCALID", who).value_or(0);
  std::string local_size_var = "SLURM_NTASKS_PER_NODE";
  if (auto n = optional_int(env, "SLURM_NTASKS_PER_NODE", who)) {
    info.local_size = *n;
  } else {
    const char* list_var =
        env.has("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
    local_size_var = list_var;
    if (auto list = env.get(list_var)) {
      auto counts = expand_tasks_per_node(*list, list_var);
      int node = optional_int(env, "SLURM_NODEID", who).value_or(0);
      SHOAL_CHECK(node >= 0 && node < static_cast<int>(counts.size()), InvalidArgument,
                  "SLURM_NODEID=" << node << " is outside the " << counts.size() << " nodes of "
                                  << list_var << "='" << *list << "'");
      info.local_size = counts[static_cast<size_t>(node)];
    } else {
      info.local_size = info.size == 1 ? 1 : std::max(1, info.local_rank + 1);
    }
  }
  validate(info, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", local_size_var);

  auto job = env.get("SLURM_JOB_ID");
  if (!job) job = env.get("SLURM_JOBID");
  auto step = env.get("SLURM_STEP_ID");
  if (!step) step = env.get("SLURM_STEPID");
  StoreHints hints;
  hints.launcher_name = who;
  hints.mpi_style = true;
  hints.fix = "Fix: export MASTER_ADDR=<first node> MASTER_PORT=<free port> before srun.";
  hints.job_id = job.value_or("nojob") + "." + step.value_or("0");
  std::optional<std::string> nodelist = env.get("SLURM_STEP_NODELIST");
  if (!nodelist) nodelist = env.get("SLURM_JOB_NODELIST");
  if (!nodelist) nodelist = env.get("SLURM_NODELIST");
  if (nodelist) hints.default_host = first_slurm_host(*nodelist);
  if (job) {
    auto id = parse_int(*job);
    SHOAL_CHECK(id && *id >= 0, InvalidArgument,
                "SLURM_JOB_ID='" << *job << "' is not an integer (SLURM launch)");
    hints.default_port = kSlurmBasePort + static_cast<int>(*id % 1000);
  }
  if (!hints.default_host || !hints.default_port)
    hints.fix = std::string(hints.default_host
                                ? "SLURM_JOB_ID"
                                : "The node list (SLURM_STEP_NODELIST or SLURM_JOB_NODELIST)") +
                " is not set either; with the node list and SLURM_JOB_ID, shoal would use the "
                "first node and port "
                "29500 + SLURM_JOB_ID % 1000. " +
                hints.fix;
  resolve_store(info, env, hints);
  info.key_prefix = "shoal/slurm/" + hints.job_id;
  return info;
}

// Seconds since the epoch at which this process started, or 0 when /proc cannot tell.
int64_t process_start_epoch() {
  std::ifstream stat_file("/proc/self/stat");
  std::string line;
  if (!std::getline(stat_file, line)) return 0;
  auto close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  unsigned long long start_ticks = 0;
  for (int i = 3; i <= 22 && rest >> field; ++i)
    if (i == 22) start_ticks = std::strtoull(field.c_str(), nullptr, 10);
  std::ifstream proc_stat("/proc/stat");
  std::string key;
  long long btime = 0;
  while (proc_stat >> key)
    if (key == "btime") {
      proc_stat >> btime;
      break;
    }
  long hz = ::sysconf(_SC_CLK_TCK);
  if (btime == 0 || hz <= 0 || start_ticks == 0) return 0;
  return btime + static_cast<int64_t>(start_ticks / static_cast<unsigned long long>(hz));
}

// The one-host fallback lives in /tmp/shoal-<uid>/, which must be ours and private. A file
// left there by a crashed job with the same id (job ids come from pids, which get reused) is
// emptied, under flock so that it cannot race with a rank of this job writing it: the file
// counts as stale when it was last written well before this process started (ranks of one
// host start together; a rank later than the store timeout has failed anyway).
void prepare_fallback(const std::string& path, Milliseconds timeout) {
  const std::string dir = path.substr(0, path.rfind('/'));
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    SHOAL_THROW(InvalidArgument,
                "cannot create " << dir << " for the one-host file store: " << std::strerror(errno)
                                 << "; set SHOAL_STORE_PATH to a writable file, or "
                                    "MASTER_ADDR/MASTER_PORT for a TCP store");
  struct stat st {};
  SHOAL_CHECK(
      ::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::getuid() &&
          (st.st_mode & 077) == 0,
      InvalidArgument,
      dir << " exists but is not a private directory of this user (mode 0700); remove it, or set "
          << "SHOAL_STORE_PATH to another file");
  int fd = ::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;  // no leftover
  const int64_t started = process_start_epoch();
  const int64_t margin =
      std::max<int64_t>(600, 2 * std::chrono::duration_cast<std::chrono::seconds>(timeout).count());
  if (::flock(fd, LOCK_EX) == 0 && ::fstat(fd, &st) == 0 && st.st_nlink > 0 && st.st_size > 0 &&
      started > 0 && st.st_mtime < started - margin) {
    SHOAL_WARN("emptying the stale file store "
               << path << " (last written " << (started - st.st_mtime)
               << " s before this process started; a crashed earlier job left it)");
    if (::ftruncate(fd, 0) != 0)
      SHOAL_WARN("could not empty " << path << ": " << std::strerror(errno));
  }
  ::close(fd);
}

// The file store of a job: deletes its file when the last rank that opened it leaves.
class JobFileStore : public Store {
 public:
  JobFileStore(std::shared_ptr<FileStore> base, int size) : base_(std::move(base)), size_(size) {
    timeout_ = base_->timeout();
    base_->add(kJoinedKey, 1);
  }
  ~JobFileStore() override {
    try {
      const int64_t left = base_->add(kLeftKey, 1);
      const int64_t joined = base_->add(kJoinedKey, 0);
      if (left >= size_ && left == joined) {
        ::unlink(base_->path().c_str());
        SHOAL_TRACE("deleted the file store " << base_->path() << " (last of " << joined
                                              << " users)");
      }
    } catch (const std::exception& e) {
      SHOAL_WARN("could not clean up the file store " << base_->path() << ": " << e.what());
    }
  }
  void set(const std::string& key, const Bytes& value) override { base_->set(key, value); }
  Bytes get(const std::string& key) override {
    if (timeout_ != base_->timeout()) base_->wait({key}, timeout_);
    return base_->get(key);
  }
  int64_t add(const std::string& key, int64_t delta) override { return base_->add(key, delta); }
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override {
    base_->wait(keys, timeout);
  }
  bool check(const std::vector<std::string>& keys) override { return base_->check(keys); }
  bool remove(const std::string& key) override { return base_->remove(key); }
  using Store::set;
  using Store::wait;

 private:
  std::shared_ptr<FileStore> base_;
  int64_t size_;
};

}  // namespace

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

LaunchInfo detect(const EnvLookup& lookup) {
  Env env(lookup);
  // Precedence: a launcher that wraps another wins (torchrun inside an salloc, mpirun inside
  // sbatch: the SLURM variables are inherited, the inner launcher's are the truth).
  if (env.has("RANK") || env.has("WORLD_SIZE")) return detect_torchrun(env);
  if (env.has("OMPI_COMM_WORLD_RANK") || env.has("OMPI_COMM_WORLD_SIZE"))
    return detect_openmpi(env);
  if (env.has("PMI_RANK") || env.has("PMI_SIZE")) return detect_mpich(env);
  if (env.has("SLURM_PROCID")) return detect_slurm(env);
  SHOAL_THROW(
      InvalidArgument,
      "no launcher found in the environment: none of RANK/WORLD_SIZE (torchrun, shoal-run), "
      "OMPI_COMM_WORLD_RANK (Open MPI), PMI_RANK (MPICH/Hydra) or SLURM_PROCID (srun) is set"
          << (env.has("SLURM_JOB_ID")
                  ? " (this is a SLURM allocation, but the program was not started by srun)"
                  : "")
          << ". Start the program with shoal-run -n N, torchrun, mpirun or srun, or set RANK, "
             "WORLD_SIZE, "
             "MASTER_ADDR and MASTER_PORT yourself (see docs/launchers.md)");
}

std::string first_slurm_host(const std::string& nodelist) {
  size_t b = nodelist.find_first_not_of(" \t\n");
  size_t e = nodelist.find_last_not_of(" \t\n");
  SHOAL_CHECK(b != std::string::npos, InvalidArgument, "the SLURM node list is empty");
  const std::string list = nodelist.substr(b, e - b + 1);
  std::string host;
  int depth = 0;
  bool in_group_first = false;  // inside [...] and still in its first element
  for (size_t i = 0; i < list.size(); ++i) {
    const char c = list[i];
    if (c == '[') {
      SHOAL_CHECK(depth == 0, InvalidArgument,
                  "SLURM node list '" << nodelist << "' has nested brackets");
      depth = 1;
      in_group_first = true;
    } else if (c == ']') {
      SHOAL_CHECK(depth == 1, InvalidArgument,
                  "SLURM node list '" << nodelist << "' has an unmatched ']'");
      depth = 0;
    } else if (depth == 1) {
      if (c == ',' || c == '-')
        in_group_first = false;  // the first host takes each range's start
      else if (in_group_first) {
        SHOAL_CHECK(std::isdigit(static_cast<unsigned char>(c)), InvalidArgument,
                    "SLURM node list '" << nodelist << "' has '" << c
                                        << "' inside brackets (expected digits, '-' or ',')");
        host += c;
      }
    } else if (c == ',') {
      break;  // end of the first item
    } else {
      host += c;
    }
  }
  SHOAL_CHECK(depth == 0, InvalidArgument,
              "SLURM node list '" << nodelist << "' has an unmatched '['");
  SHOAL_CHECK(!host.empty(), InvalidArgument,
              "SLURM node list '" << nodelist << "' has no host name");
  return host;
}

std::shared_ptr<Store> open_store(const LaunchInfo& info, Milliseconds timeout) {
  std::shared_ptr<Store> base;
  if (!info.file_store_path.empty()) {
    const std::string auto_prefix = fallback_path(info.launcher, "");
    if (info.file_store_path.rfind(auto_prefix.substr(0, auto_prefix.rfind('/') + 1), 0) == 0)
      prepare_fallback(info.file_store_path, timeout);  // only the files shoal named itself
    base = std::make_shared<JobFileStore>(
        std::make_shared<FileStore>(info.file_store_path, timeout), info.size);
  } else {
    SHOAL_CHECK(!info.store_host.empty() && info.store_port > 0 && info.store_port <= 65535,
                InvalidArgument,
                "open_store: no store address (host '"
                    << info.store_host << "', port " << info.store_port
                    << ") and no file store path; detect() fills them in");
    TcpStore::Options options;
    options.is_server = info.rank == 0 && !info.store_is_external;
    options.timeout = timeout;
    options.connect_timeout = timeout;
    if (info.launcher == "torchrun" && info.store_is_external) {
      // torchrun's agent hosts a torch TCPStore, which cannot authenticate: join it openly.
      options.auth_key = "";
      if (!auth::job_key(false).empty())
        SHOAL_WARN(
            "the store is torchrun's agent store (torch's TCPStore), which cannot authenticate: "
            "its "
            "traffic is open; the ranks' mesh connections still authenticate with SHOAL_AUTH_KEY "
            "(docs/reliability.md)");
    }
    base = std::make_shared<TcpStore>(info.store_host, static_cast<uint16_t>(info.store_port),
                                      options);
  }
  if (!info.key_prefix.empty()) return std::make_shared<PrefixStore>(info.key_prefix, base);
  return base;
}

}  // namespace shoal::bootstrap
