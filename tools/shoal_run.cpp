// shoal-run: starts N local ranks of a program, torchrun-style, and hosts their rendezvous store.
// With --netns the ranks are spread over network namespaces (emulated hosts, see
// scripts/netcluster.sh). The launcher is src/launch; this file is its command line.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "launch/launcher.hpp"

using namespace shoal::launch;

namespace {

class Formatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string name) const override {
    return "Usage: " + name + " -n N [OPTIONS] [--] PROGRAM [ARGS...]\n";
  }
};

constexpr const char* kFooter =
    R"(Each rank gets the variables torchrun sets: RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, GROUP_RANK=0, GROUP_WORLD_SIZE=1 (per host with --netns, see below),
ROLE_NAME=default, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
TORCHELASTIC_RESTART_COUNT=0, TORCHELASTIC_MAX_RESTARTS=0, TORCHELASTIC_RUN_ID (unique per
launch) and TORCHELASTIC_USE_AGENT_STORE=True. shoal-run itself hosts the rendezvous store
(a TCP store speaking torch's TCPStore protocol) at MASTER_ADDR:MASTER_PORT; ranks connect to
it as clients, so both shoal and torch.distributed's env:// initialization work unchanged.

Each rank runs in its own process group. SIGINT, SIGTERM and SIGHUP sent to shoal-run are
forwarded to every rank's group; a second SIGINT sends SIGKILL. Ranks die with shoal-run.
Rank 0 reads shoal-run's standard input unless it is a terminal; the other ranks read
/dev/null.

When a rank exits non-zero or is killed by a signal, shoal-run names it on stderr, sends
SIGTERM to the other ranks, SIGKILL after --grace seconds, and exits with the rank's status
(128+N for signal N).

Binding (--bind-to, as mpirun binds): with auto (the default), when there are at least as
many cores as ranks among those shoal-run may use (its affinity), rank i is bound to the i-th
of them; with more ranks, none is bound. core binds round robin whatever the count; none leaves
placement to the kernel (which may put two busy ranks on one core and keep them there: on 2
cores, 2 runs in 8 of a 2-rank shared-memory benchmark took 3x as long) and sets SHOAL_BIND=none,
so that the ranks do not bind themselves. Emulated hosts (--netns) share this machine's cores:
ranks are counted across them.

Exit status: 0 when every rank exits 0; the first failed rank's status; 124 after --timeout;
127 when PROGRAM cannot be found or executed; 128+N when shoal-run was stopped by signal N;
2 for bad arguments; 1 for other errors of shoal-run itself.

Several hosts on one machine (needs root): --netns NS0,NS1,... starts the ranks in those
network namespaces, in contiguous blocks (host 0 gets ranks 0..k-1, and so on; -n is split
evenly, the first hosts getting one more when it does not divide; NS:K gives a host K ranks).
A name is looked up in /var/run/netns (as `ip netns` creates them), a path is used as is;
--hosts-file reads the same list, one "NS [K]" per line. Each rank then gets LOCAL_RANK and
LOCAL_WORLD_SIZE of its host, GROUP_RANK = the host's index and GROUP_WORLD_SIZE = the number
of hosts. The store is hosted inside the first host at its first IPv4 address (lowest
interface index, up, not loopback), unless --master-addr is given: then it is hosted in
shoal-run's own namespace at that address, which every host must reach. scripts/netcluster.sh
builds such hosts; see docs/cluster.md.)";

/// Parses --netns / --hosts-file entries ("NAME" or "NAME:K"), splits nproc over them and opens
/// each namespace. Returns an empty string, or what is wrong.

}  // namespace

int main(int argc, char** argv) {
  // Our pipes and sockets must not land on 0-2 if the caller closed them.
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) < 0 && ::open("/dev/null", O_RDWR) < 0) return 1;

  LaunchArgs args;
  CLI::App app{
      "shoal-run: starts N local ranks of PROGRAM with torchrun's environment and hosts "
      "their rendezvous store.",
      "shoal-run"};
  app.formatter(std::make_shared<Formatter>());
  app.footer(kFooter);
  app.add_option("-n,--nproc", args.nproc, "number of ranks to start (at least 1)")
      ->required()
      ->type_name("N");
  app.add_option("--master-addr", args.master_addr,
                 "address the store listens on and ranks connect to (with --netns: default "
                 "the first host's first address)")
      ->capture_default_str()
      ->type_name("ADDR");
  std::vector<std::string> netns_entries;
  std::string hosts_file;
  auto* netns_opt =
      app.add_option("--netns", netns_entries,
                     "start the ranks in these network namespaces (emulated hosts), in "
                     "contiguous blocks; NS:K gives a host K ranks (needs root)")
          ->delimiter(',')
          ->allow_extra_args(false)  // one list per --netns: PROGRAM follows it
          ->type_name("NS[:K],...");
  app.add_option("--hosts-file", hosts_file,
                 "like --netns, from a file with one \"NS [K]\" per line")
      ->type_name("FILE")
      ->excludes(netns_opt);
  app.add_option("--master-port", args.master_port, "port of the store (0: a free port)")
      ->capture_default_str()
      ->type_name("PORT");
  app.add_option("--grace", args.grace,
                 "seconds between SIGTERM and SIGKILL when the job is stopped")
      ->capture_default_str()
      ->type_name("SECONDS");
  app.add_option("--timeout", args.timeout,
                 "stop the job and exit 124 after this many seconds (0: no limit)")
      ->capture_default_str()
      ->type_name("SECONDS");
  app.add_option("--bind-to", args.bind_to,
                 "bind each rank to a core: auto (when each gets its own), core, or none")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "core", "none"}));
  app.add_flag("--tag-output", args.tag_output,
               "prefix every output line with [rank] (default: ranks write to shoal-run's "
               "stdout and stderr directly)");
  app.prefix_command();  // everything from PROGRAM on belongs to PROGRAM
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;  // --help, or a message and the hint
  }

  // Checked here rather than with CLI11's validators, whose messages print DBL_MAX.
  auto usage_error = [](const std::string& message) {
    say(message + " (see shoal-run --help)");
    return kExitUsage;
  };
  if (args.nproc < 1 || args.nproc > kMaxRanks)
    return usage_error("-n/--nproc must be in 1.." + std::to_string(kMaxRanks) + ", not " +
                       std::to_string(args.nproc));
  if (args.master_port < 0 || args.master_port > 65535)
    return usage_error("--master-port must be in 0..65535, not " +
                       std::to_string(args.master_port));
  if (!(args.grace >= 0 && args.grace < 1e9))
    return usage_error("--grace must be a number of seconds >= 0");
  if (!(args.timeout >= 0 && args.timeout < 1e9))
    return usage_error("--timeout must be a number of seconds >= 0 (0: no limit)");
  args.master_addr_given = app.count("--master-addr") > 0;
  if (!hosts_file.empty()) {
    std::string why;
    if (!read_hosts_file(hosts_file, netns_entries, why)) return usage_error(why);
    if (netns_entries.empty()) return usage_error("--hosts-file " + hosts_file + " names no host");
  }
  if (!netns_entries.empty() || app.count("--netns") > 0) {
    std::string why = setup_hosts(netns_entries, args.nproc, args.hosts);
    if (!why.empty()) {
      for (auto& h : args.hosts)
        if (h.fd >= 0) ::close(h.fd);
      return usage_error(why);
    }
  }

  args.command = app.remaining();
  const bool after_dashes = !args.command.empty() && args.command[0] == "--";
  if (after_dashes) args.command.erase(args.command.begin());
  if (args.command.empty())
    return usage_error("missing PROGRAM to run: shoal-run -n N [OPTIONS] [--] PROGRAM [ARGS...]");
  if (!after_dashes && args.command[0].size() > 1 && args.command[0][0] == '-')
    return usage_error("unknown option '" + args.command[0] +
                       "'; put '--' before a PROGRAM whose name starts with '-'");

  int fatal_signal = 0;
  int code;
  code = run_job(std::move(args), fatal_signal);
  if (fatal_signal != 0) {
    // Die by the signal, as a well-behaved program does, so that our caller sees it.
    std::fflush(nullptr);
    ::signal(fatal_signal, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, fatal_signal);
    ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
    ::raise(fatal_signal);
  }
  return code;
}
