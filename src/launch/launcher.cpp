// See launcher.hpp.
#include "launch/launcher.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "shoal/store.hpp"

extern char** environ;

extern char** environ;

namespace shoal::launch {
namespace {

using Clock = std::chrono::steady_clock;
using Args = LaunchArgs;

constexpr size_t kMaxLine = 64 * 1024;  // tag_output: a longer line is cut into pieces
constexpr auto kDrainTime = std::chrono::seconds(2);  // output of grandchildren after the ranks
constexpr auto kReapTime = std::chrono::seconds(2);   // wait for groups to vanish after SIGKILL

void write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // e.g. EPIPE when the reader left: nothing useful to do
    data += n;
    size -= static_cast<size_t>(n);
  }
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "unknown signal";
}

/// "exited with status 3" or "killed by signal 9 (SIGKILL)".
std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  int sig = WTERMSIG(status);
  std::string s = "killed by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")";
  if (WCOREDUMP(status)) s += ", core dumped";
  return s;
}

int exit_code_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string format_seconds(double s) {
  std::ostringstream os;
  os << s << "s";
  return os.str();
}

/// execvp's search, done once before forking so that a missing program is one clear error.
std::optional<std::string> find_program(const std::string& name, std::string& why) {
  auto check = [&](const std::string& path) -> int {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return errno;
    if (S_ISDIR(st.st_mode)) return EISDIR;
    if (::access(path.c_str(), X_OK) != 0) return errno;
    return 0;
  };
  if (name.find('/') != std::string::npos) {
    int err = check(name);
    if (err == 0) return name;
    why = "cannot execute '" + name + "': " + std::strerror(err);
    return std::nullopt;
  }
  const char* path_env = std::getenv("PATH");
  std::string path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  int first_err = ENOENT;
  for (size_t begin = 0; begin <= path.size();) {
    size_t end = path.find(':', begin);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(begin, end - begin);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    int err = check(candidate);
    if (err == 0) return candidate;
    if (err != ENOENT && err != ENOTDIR && first_err == ENOENT) first_err = err;
    begin = end + 1;
  }
  why = first_err == ENOENT ? "program '" + name + "' not found in PATH"
                            : "cannot execute '" + name + "': " + std::strerror(first_err);
  return std::nullopt;
}

/// One of a rank's output pipes under --tag-output: complete lines go out with "[rank] ".
struct TaggedPipe {
  int fd = -1;   // read end; -1 once closed
  int dest = 1;  // our stdout or stderr
  std::string prefix;
  std::string pending;

  void emit(const char* data, size_t size) {
    std::string line = prefix;
    line.append(data, size);
    line.push_back('\n');
    write_all(dest, line.data(), line.size());
  }
  /// Reads what is available; false at end of file.
  bool drain() {
    char buf[65536];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (n <= 0) {
      if (!pending.empty()) emit(pending.data(), pending.size());
      pending.clear();
      return false;
    }
    pending.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1)
      emit(pending.data() + start, nl - start);
    pending.erase(0, start);
    while (pending.size() >= kMaxLine) {
      emit(pending.data(), kMaxLine);
      pending.erase(0, kMaxLine);
    }
    return true;
  }
  void close_pipe() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

struct Rank {
  int rank = 0;
  pid_t pid = -1;  // also the id of its process group
  bool running = false;
  bool group_gone = false;  // its process group is empty: never signal that id again
  int status = 0;
  TaggedPipe out, err;
};

/// Everything the child needs, prepared before fork: after fork only async-signal-safe calls
/// are allowed, because the store server runs threads in this process.
struct ChildPlan {
  const char* path = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  pid_t parent = 0;
  sigset_t mask;             // the mask shoal-run started with
  struct sigaction sigpipe;  // and its SIGPIPE disposition (ignored dispositions survive exec)
  int stdin_fd = -1;         // -1: inherit
  int stdout_fd = -1;
  int stderr_fd = -1;
  int exec_error_fd = -1;  // write end of a close-on-exec pipe: a ChildError if the start fails
  int netns_fd = -1;       // enter this network namespace first (-1: stay)
  const char* netns_name = nullptr;
  bool bind = false;  // bind to `cpus` (--bind-to)
  cpu_set_t cpus;
};

/// What a child that could not start reports through its exec-error pipe.
struct ChildError {
  int stage = 0;  // kStageExec or kStageNetns
  int err = 0;    // errno
};
constexpr int kStageExec = 0;
constexpr int kStageNetns = 1;

void move_fd(int from, int to) {
  if (from < 0) return;
  if (from == to) {
    ::fcntl(to, F_SETFD, 0);  // keep it across exec
  } else {
    ::dup2(from, to);  // the copy does not inherit O_CLOEXEC
  }
}

[[noreturn]] void child_fails(const ChildPlan& plan, int stage, int err) {
  ChildError e{stage, err};
  ssize_t ignored = ::write(plan.exec_error_fd, &e, sizeof e);
  (void)ignored;
  ::_exit(kExitCannotRun);
}

[[noreturn]] void run_child(const ChildPlan& plan) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The launcher may have died between fork and prctl; then nobody would kill us.
  if (::getppid() != plan.parent) ::_exit(kExitCannotRun);
  if (plan.netns_fd >= 0) {
    if (::setns(plan.netns_fd, CLONE_NEWNET) != 0) child_fails(plan, kStageNetns, errno);
    // As `ip netns exec` does: a private mount namespace with a sysfs of the new network
    // namespace on /sys, so that /sys/class/net lists this host's NICs. Best effort: without
    // it only /sys/class/net is wrong, sockets and getifaddrs() are right.
    if (::unshare(CLONE_NEWNS) == 0 &&
        ::mount(nullptr, "/", nullptr, MS_SLAVE | MS_REC, nullptr) == 0)
      ::mount(plan.netns_name, "/sys", "sysfs", 0, nullptr);
  }
  // Best effort, as mpirun's binding: a rank the kernel will not bind runs unbound.
  if (plan.bind) ::sched_setaffinity(0, sizeof plan.cpus, &plan.cpus);
  // Dispositions are as shoal-run found them (it only blocks signals), except SIGPIPE.
  ::sigaction(SIGPIPE, &plan.sigpipe, nullptr);
  ::sigprocmask(SIG_SETMASK, &plan.mask, nullptr);
  move_fd(plan.stdin_fd, 0);
  move_fd(plan.stdout_fd, 1);
  move_fd(plan.stderr_fd, 2);
  ::execve(plan.path, plan.argv, plan.envp);
  child_fails(plan, kStageExec, errno);
}

/// Runs fn inside the network namespace open at fd, then returns to ours; false with errno set
/// when the namespace cannot be entered. Only the calling thread moves: sockets created
/// meanwhile stay in that namespace (and threads started meanwhile start there).
template <typename Fn>
bool in_netns(int fd, Fn&& fn) {
  int self = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (self < 0) return false;
  if (::setns(fd, CLONE_NEWNET) != 0) {
    int err = errno;
    ::close(self);
    errno = err;
    return false;
  }
  try {
    fn();
  } catch (...) {
    ::setns(self, CLONE_NEWNET);
    ::close(self);
    throw;
  }
  ::setns(self, CLONE_NEWNET);
  ::close(self);
  return true;
}

/// The IPv4 address of the first interface (lowest index) that is up and not loopback, in the
/// calling thread's network namespace; empty when there is none.
std::string first_ipv4_address() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return {};
  std::string found;
  unsigned best = 0;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_UP) == 0 || (a->ifa_flags & IFF_LOOPBACK) != 0) continue;
    unsigned index = ::if_nametoindex(a->ifa_name);  // 0 for a label such as eth0:1: last
    if (index == 0) index = ~0u;
    if (!found.empty() && index >= best) continue;
    char buf[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof buf);
    found = buf;
    best = index;
  }
  ::freeifaddrs(list);
  return found;
}

class Launcher {
 public:
  explicit Launcher(Args args) : args_(std::move(args)) { ranks_.resize(args_.nproc); }
  ~Launcher() {
    if (signal_fd_ >= 0) ::close(signal_fd_);
    if (null_fd_ >= 0) ::close(null_fd_);
    for (auto& h : args_.hosts)
      if (h.fd >= 0) ::close(h.fd);
    for (auto& r : ranks_) {
      r.out.close_pipe();
      r.err.close_pipe();
    }
  }

  /// Runs the job; returns shoal-run's exit status. Sets `fatal_signal` when shoal-run should
  /// die by that signal itself (it was interrupted), after everything is cleaned up.
  int run(int& fatal_signal);

 private:
  enum class Reason { None, Failure, CannotStart, Signal, Timeout };

  bool setup_signals();
  int launch(const std::string& path, uint16_t port);
  void on_signals();
  void reap();
  void shutdown(Reason reason, int sig);
  void signal_groups(int sig);
  bool any_running() const;
  bool group_alive(Rank& r);
  bool any_group_alive();
  std::string unfinished_ranks() const;

  Args args_;
  std::vector<Rank> ranks_;
  sigset_t original_mask_;
  struct sigaction original_sigpipe_ {};
  int signal_fd_ = -1;
  int null_fd_ = -1;

  Reason reason_ = Reason::None;
  int exit_code_ = 0;
  int received_signal_ = 0;
  int sigint_count_ = 0;
  bool killed_ = false;
  Clock::time_point kill_deadline_;  // SIGKILL when the grace period ends
  Clock::time_point killed_at_;
};

bool Launcher::setup_signals() {
  // Blocked before the store starts its threads, so that they inherit the mask and every
  // signal arrives on the signalfd.
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&set, sig);
  if (::sigprocmask(SIG_BLOCK, &set, &original_mask_) != 0) return false;
  // A closed stdout must not kill the launcher before its ranks.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  if (::sigaction(SIGPIPE, &ignore, &original_sigpipe_) != 0) return false;
  signal_fd_ = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  // Orphans of the ranks become our children, so that we reap them at once: a zombie left to
  // a lazy init would keep its rank's process group looking alive during a shutdown.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  return signal_fd_ >= 0;
}

/// Starts every rank; returns 0, or the exit status of shoal-run when not all could start.
int Launcher::launch(const std::string& path, uint16_t port) {
  std::mt19937_64 rng(std::random_device{}());
  char run_id[64];
  std::snprintf(run_id, sizeof run_id, "shoal-run-%d-%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(rng()));
  const int n = args_.nproc;

  // The host (namespace) of each rank: contiguous blocks, as torchrun numbers the ranks of
  // its nodes; without --netns one host, ours.
  std::vector<const Host*> host_of(n, nullptr);
  for (const Host& h : args_.hosts)
    for (int i = h.first; i < h.first + h.count; ++i) host_of[i] = &h;
  const int num_hosts = args_.hosts.empty() ? 1 : static_cast<int>(args_.hosts.size());

  // The parent's environment minus what we set, then ours (as torchrun 1.13 sets them).
  auto make_env = [&](int rank) {
    const Host* h = host_of[rank];
    const int local_rank = h ? rank - h->first : rank;
    const int local_size = h ? h->count : n;
    const int group_rank = h ? static_cast<int>(h - args_.hosts.data()) : 0;
    std::vector<std::pair<std::string, std::string>> ours = {
        {"RANK", std::to_string(rank)},
        {"WORLD_SIZE", std::to_string(n)},
        {"LOCAL_RANK", std::to_string(local_rank)},
        {"LOCAL_WORLD_SIZE", std::to_string(local_size)},
        {"GROUP_RANK", std::to_string(group_rank)},
        {"GROUP_WORLD_SIZE", std::to_string(num_hosts)},
        {"ROLE_NAME", "default"},
        {"ROLE_RANK", std::to_string(rank)},
        {"ROLE_WORLD_SIZE", std::to_string(n)},
        {"MASTER_ADDR", args_.master_addr},
        {"MASTER_PORT", std::to_string(port)},
        {"TORCHELASTIC_RESTART_COUNT", "0"},
        {"TORCHELASTIC_MAX_RESTARTS", "0"},
        {"TORCHELASTIC_RUN_ID", run_id},
        {"TORCHELASTIC_USE_AGENT_STORE", "True"},
    };
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      std::string_view kv(*e);
      std::string_view key = kv.substr(0, kv.find('='));
      bool replaced = false;
      for (const auto& [k, v] : ours) replaced = replaced || key == k;
      if (!replaced) env.emplace_back(kv);
    }
    for (const auto& [k, v] : ours) env.push_back(k + "=" + v);
    // --bind-to none means unbound: the library must not bind (SHOAL_BIND=auto) in its place.
    if (args_.bind_to == "none" && !std::getenv("SHOAL_BIND")) env.push_back("SHOAL_BIND=none");
    return env;
  };
  auto pointers = [](std::vector<std::string>& strings) {
    std::vector<char*> p;
    for (auto& s : strings) p.push_back(s.data());
    p.push_back(nullptr);
    return p;
  };

  std::vector<std::string> argv_strings = args_.command;
  std::vector<char*> argv = pointers(argv_strings);

  // Rank 0 reads our stdin, unless it is a terminal: ranks are not in the terminal's
  // foreground process group, so reading it would stop them (SIGTTIN).
  null_fd_ = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd_ < 0) {
    say(std::string("cannot open /dev/null: ") + std::strerror(errno));
    return 1;
  }
  const bool stdin_is_tty = ::isatty(0);

  // --bind-to: rank i to the i-th core shoal-run may use (round robin when there are fewer).
  // Emulated hosts (--netns) share this machine's cores, so ranks are counted across them.
  std::vector<int> cores;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &allowed)) cores.push_back(c);
  const bool bind =
      !cores.empty() &&
      (args_.bind_to == "core" || (args_.bind_to == "auto" && n <= static_cast<int>(cores.size())));

  for (int i = 0; i < n; ++i) {
    Rank& r = ranks_[i];
    r.rank = i;
    std::vector<std::string> env_strings = make_env(i);
    std::vector<char*> envp = pointers(env_strings);

    ChildPlan plan;
    plan.path = path.c_str();
    plan.argv = argv.data();
    plan.envp = envp.data();
    plan.parent = ::getpid();
    plan.mask = original_mask_;
    plan.sigpipe = original_sigpipe_;
    plan.stdin_fd = (i == 0 && !stdin_is_tty) ? -1 : null_fd_;
    if (host_of[i]) {
      plan.netns_fd = host_of[i]->fd;
      plan.netns_name = host_of[i]->name.c_str();
    }
    plan.bind = bind;
    CPU_ZERO(&plan.cpus);
    if (bind) CPU_SET(cores[static_cast<size_t>(i) % cores.size()], &plan.cpus);

    int exec_pipe[2], out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
    bool ok = ::pipe2(exec_pipe, O_CLOEXEC) == 0;
    if (ok && args_.tag_output)
      ok = ::pipe2(out_pipe, O_CLOEXEC) == 0 && ::pipe2(err_pipe, O_CLOEXEC) == 0;
    if (!ok) {
      say(std::string("cannot create a pipe: ") + std::strerror(errno));
      for (int fd : {exec_pipe[0], exec_pipe[1], out_pipe[0], out_pipe[1]})
        if (fd >= 0) ::close(fd);
      return 1;
    }
    plan.exec_error_fd = exec_pipe[1];
    plan.stdout_fd = out_pipe[1];
    plan.stderr_fd = err_pipe[1];

    pid_t pid = ::fork();
    if (pid == 0) run_child(plan);
    int fork_errno = errno;
    for (int fd : {exec_pipe[1], out_pipe[1], err_pipe[1]})
      if (fd >= 0) ::close(fd);
    if (pid < 0) {
      ::close(exec_pipe[0]);
      for (int fd : {out_pipe[0], err_pipe[0]})
        if (fd >= 0) ::close(fd);
      say("cannot start rank " + std::to_string(i) + ": fork: " + std::strerror(fork_errno));
      return 1;
    }
    ::setpgid(pid, pid);  // also here, so that the group exists before we ever signal it
    r.pid = pid;
    r.running = true;
    if (args_.tag_output) {
      std::string prefix = "[" + std::to_string(i) + "] ";
      r.out = TaggedPipe{out_pipe[0], 1, prefix, {}};
      r.err = TaggedPipe{err_pipe[0], 2, prefix, {}};
    }

    // The exec pipe closes on a successful execve, or carries the child's errno. Waiting for
    // it keeps one descriptor open at a time, and stops the launch at the first failure.
    ChildError err;
    ssize_t got;
    do got = ::read(exec_pipe[0], &err, sizeof err);
    while (got < 0 && errno == EINTR);
    ::close(exec_pipe[0]);
    if (got == static_cast<ssize_t>(sizeof err)) {
      std::string who = "rank " + std::to_string(i) + " (pid " + std::to_string(pid) + ") ";
      if (err.stage == kStageNetns) {
        say(who + "could not enter network namespace '" + host_of[i]->name +
            "': " + std::strerror(err.err) + (err.err == EPERM ? " (--netns needs root)" : ""));
        return 1;
      }
      say(who + "could not execute '" + path + "': " + std::strerror(err.err));
      return kExitCannotRun;
    }
  }
  return 0;
}

bool Launcher::any_running() const {
  for (const auto& r : ranks_)
    if (r.running) return true;
  return false;
}

bool Launcher::group_alive(Rank& r) {
  if (r.pid <= 0 || r.group_gone) return false;
  if (r.running || ::kill(-r.pid, 0) == 0 || errno == EPERM) return true;
  // Once empty, the id may be reused by an unrelated process group: forget it.
  r.group_gone = true;
  return false;
}

bool Launcher::any_group_alive() {
  bool alive = false;
  for (auto& r : ranks_) alive = group_alive(r) || alive;
  return alive;
}

std::string Launcher::unfinished_ranks() const {
  std::string s;
  for (const auto& r : ranks_)
    if (r.running) s += (s.empty() ? "" : ",") + std::to_string(r.rank);
  return s;
}

void Launcher::signal_groups(int sig) {
  // A group outlives its leader while the rank's children live; its id stays reserved then.
  for (auto& r : ranks_)
    if (group_alive(r)) ::kill(-r.pid, sig);
}

void Launcher::shutdown(Reason reason, int sig) {
  if (reason_ == Reason::None) {
    reason_ = reason;
    kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(args_.grace));
  }
  if (!killed_) signal_groups(sig);
  if (sig == SIGKILL && !killed_) {
    killed_ = true;
    killed_at_ = Clock::now();
  }
}

void Launcher::reap() {
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;  // (a pid that is no rank was an orphan of one: nothing to note)
    for (auto& r : ranks_) {
      if (r.pid != pid || !r.running) continue;
      r.running = false;
      r.status = status;
      group_alive(r);  // notes an empty group while its id cannot have been reused yet
      bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
      if (failed && reason_ == Reason::None) {
        say("rank " + std::to_string(r.rank) + " (pid " + std::to_string(pid) + ") " +
            describe(status));
        exit_code_ = exit_code_of(status);
        shutdown(Reason::Failure, SIGTERM);
      }
    }
  }
}

void Launcher::on_signals() {
  signalfd_siginfo info;
  while (::read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) {
      reap();
      continue;
    }
    if (received_signal_ == 0) received_signal_ = sig;
    if (sig == SIGINT && ++sigint_count_ >= 2) {
      say("second SIGINT: killing all ranks");
      shutdown(Reason::Signal, SIGKILL);
    } else {
      if (reason_ == Reason::None)
        say("received " + signal_name(sig) + ", forwarding it to all ranks");
      shutdown(Reason::Signal, sig);
    }
  }
}

int Launcher::run(int& fatal_signal) {
  fatal_signal = 0;
  if (!setup_signals()) {
    say(std::string("cannot set up signal handling: ") + std::strerror(errno));
    return 1;
  }
  std::string why;
  std::optional<std::string> path = find_program(args_.command[0], why);
  if (!path) {
    say(why);
    return kExitCannotRun;
  }

  // The rendezvous store, hosted here as torchrun's agent does, for the whole job. With
  // --netns and no --master-addr, inside the first host (as torchrun's agent of node 0) at its
  // first address; with --master-addr, in our own namespace at that address.
  std::unique_ptr<shoal::TcpStore> store;
  auto make_store = [&] {
    store = std::make_unique<shoal::TcpStore>(args_.master_addr,
                                              static_cast<uint16_t>(args_.master_port),
                                              shoal::TcpStore::Options{.is_server = true});
  };
  try {
    if (!args_.hosts.empty() && !args_.master_addr_given) {
      const Host& h0 = args_.hosts.front();
      std::string addr;
      bool entered = in_netns(h0.fd, [&] {
        addr = first_ipv4_address();
        if (addr.empty()) return;
        args_.master_addr = addr;
        make_store();
      });
      if (!entered) {
        say("cannot enter network namespace '" + h0.name + "': " + std::strerror(errno) +
            (errno == EPERM ? " (--netns needs root)" : ""));
        return 1;
      }
      if (addr.empty()) {
        say("network namespace '" + h0.name +
            "' has no interface with an IPv4 address that is up, for the rendezvous store; "
            "give one with --master-addr");
        return 1;
      }
    } else {
      make_store();
    }
  } catch (const std::exception& e) {
    say("cannot host the rendezvous store on " + args_.master_addr + ":" +
        std::to_string(args_.master_port) + ": " + e.what());
    return 1;
  }

  const auto start = Clock::now();
  if (int code = launch(*path, store->port()); code != 0) {
    exit_code_ = code;
    shutdown(Reason::CannotStart, SIGTERM);  // the ranks that did start
  }
  const bool has_timeout = args_.timeout > 0;
  const auto timeout_at = start + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(args_.timeout));
  std::optional<Clock::time_point> drain_deadline;

  for (;;) {
    const auto now = Clock::now();
    const bool ranks_done = !any_running();
    bool pipes_open = false;
    for (const auto& r : ranks_) pipes_open = pipes_open || r.out.fd >= 0 || r.err.fd >= 0;

    if (ranks_done && pipes_open && !drain_deadline) drain_deadline = now + kDrainTime;
    if (drain_deadline && now >= *drain_deadline) {
      for (auto& r : ranks_) {
        r.out.close_pipe();
        r.err.close_pipe();
      }
      pipes_open = false;
    }
    // In a shutdown, also wait for what the ranks started (their groups) to go away.
    bool groups_alive = ranks_done && reason_ != Reason::None && any_group_alive();
    if (groups_alive && killed_ && now >= killed_at_ + kReapTime) groups_alive = false;
    if (ranks_done && !pipes_open && !groups_alive) break;

    if (reason_ == Reason::None && has_timeout && now >= timeout_at) {
      say("job exceeded --timeout " + format_seconds(args_.timeout) + ", terminating all ranks");
      exit_code_ = kExitTimeout;
      shutdown(Reason::Timeout, SIGTERM);
    }
    if (reason_ != Reason::None && !killed_ && now >= kill_deadline_) {
      std::string left = unfinished_ranks();
      say(left.empty() ? "processes started by the ranks are still running after --grace " +
                             format_seconds(args_.grace) + ", sending SIGKILL"
                       : "rank(s) " + left + " still running after --grace " +
                             format_seconds(args_.grace) + ", sending SIGKILL");
      shutdown(reason_, SIGKILL);
    }

    // Sleep until the next event or deadline.
    auto wake = now + std::chrono::seconds(3600);
    if (reason_ == Reason::None && has_timeout) wake = std::min(wake, timeout_at);
    if (reason_ != Reason::None && !killed_) wake = std::min(wake, kill_deadline_);
    if (drain_deadline) wake = std::min(wake, *drain_deadline);
    if (groups_alive) wake = std::min(wake, now + std::chrono::milliseconds(20));
    auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count() + 1;

    std::vector<pollfd> fds;
    std::vector<TaggedPipe*> pipes;
    fds.push_back({signal_fd_, POLLIN, 0});
    for (auto& r : ranks_)
      for (TaggedPipe* p : {&r.out, &r.err})
        if (p->fd >= 0) {
          fds.push_back({p->fd, POLLIN, 0});
          pipes.push_back(p);
        }
    int ready = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<long long>(0, wait_ms)));
    if (ready < 0 && errno != EINTR) {
      say(std::string("poll: ") + std::strerror(errno));
      shutdown(Reason::Failure, SIGKILL);
      exit_code_ = 1;
    }
    if (ready <= 0) continue;
    if (fds[0].revents) on_signals();
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents && !pipes[i - 1]->drain()) pipes[i - 1]->close_pipe();
  }

  store.reset();
  if (reason_ == Reason::Signal) {
    fatal_signal = received_signal_;
    return 128 + received_signal_;
  }
  return reason_ == Reason::None ? 0 : exit_code_;
}

}  // namespace

void say(const std::string& line) {
  std::string s = "shoal-run: " + line + "\n";
  write_all(2, s.data(), s.size());
}

int run_job(LaunchArgs args, int& fatal_signal) {
  Launcher launcher(std::move(args));
  return launcher.run(fatal_signal);
}

std::string setup_hosts(std::vector<std::string> entries, int nproc, std::vector<Host>& hosts) {
  int with_count = 0, assigned = 0;
  for (const std::string& e : entries) {
    Host h;
    size_t colon = e.rfind(':');
    h.name = e;
    const bool digits_after = colon != std::string::npos && colon + 1 < e.size() &&
                              e.find_first_not_of("0123456789", colon + 1) == std::string::npos;
    if (colon != std::string::npos && (digits_after || e.find('/') == std::string::npos)) {
      h.name = e.substr(0, colon);
      std::string k = e.substr(colon + 1);
      char* end = nullptr;
      long v = std::strtol(k.c_str(), &end, 10);
      if (k.empty() || *end != '\0' || v < 1 || v > kMaxRanks)
        return "bad rank count in '" + e + "' (NAME:K with K >= 1)";
      h.count = static_cast<int>(v);
      ++with_count;
      assigned += h.count;
    }
    if (h.name.empty()) return "an empty network namespace name in the host list";
    for (const Host& other : hosts)
      if (other.name == h.name) return "network namespace '" + h.name + "' is listed twice";
    h.path = h.name.find('/') == std::string::npos ? "/var/run/netns/" + h.name : h.name;
    hosts.push_back(h);
  }
  if (hosts.empty()) return "--netns/--hosts-file names no host";
  const int n_hosts = static_cast<int>(hosts.size());
  if (with_count == n_hosts) {
    if (assigned != nproc)
      return "the hosts' rank counts add up to " + std::to_string(assigned) + ", but -n is " +
             std::to_string(nproc);
  } else if (with_count != 0) {
    return "give a rank count (NAME:K) to every host or to none";
  } else {
    if (nproc < n_hosts)
      return "-n " + std::to_string(nproc) + " is fewer ranks than the " + std::to_string(n_hosts) +
             " hosts";
    for (int i = 0; i < n_hosts; ++i) hosts[i].count = nproc / n_hosts + (i < nproc % n_hosts);
  }
  int first = 0;
  for (Host& h : hosts) {
    h.first = first;
    first += h.count;
  }
  for (Host& h : hosts) {
    h.fd = ::open(h.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (h.fd < 0)
      return "cannot open network namespace '" + h.name + "' (" + h.path +
             "): " + std::strerror(errno) +
             (h.path.rfind("/var/run/netns/", 0) == 0
                  ? "; create it with `ip netns add` or scripts/netcluster.sh up"
                  : "");
  }
  return {};
}

/// Reads a hosts file: one "NAME [K]" per line; '#' starts a comment.
bool read_hosts_file(const std::string& path, std::vector<std::string>& entries, std::string& why) {
  std::ifstream in(path);
  if (!in) {
    why = "cannot read --hosts-file " + path + ": " + std::strerror(errno);
    return false;
  }
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string name, count, extra;
    if (!(words >> name)) continue;
    if (words >> count) {
      if (words >> extra) {
        why = path + ":" + std::to_string(number) + ": expected \"NAME [K]\", got '" + line + "'";
        return false;
      }
      name += ":" + count;
    }
    entries.push_back(name);
  }
  return true;
}

}  // namespace shoal::launch
