// The launcher behind shoal-run (tools/shoal_run.cpp): starts N local ranks of a program,
// torchrun-style, hosts their rendezvous store, and with emulated hosts (network namespaces)
// spreads them over those. One thread (plus the store server's threads) around a poll() loop
// over a signalfd and, with tag_output, the ranks' output pipes. Each rank leads its own process
// group so that a signal reaches the whole tree the rank started; every rank dies with the
// launcher (PR_SET_PDEATHSIG). The first rank to fail, a signal to the launcher or the timeout
// starts the shutdown: SIGTERM (or the received signal) to every group, SIGKILL after the grace.
#pragma once

#include <string>
#include <vector>

namespace shoal::launch {

constexpr int kMaxRanks = 65536;     // one host: a larger -n is a typo
constexpr int kExitUsage = 2;        // bad arguments
constexpr int kExitTimeout = 124;    // as timeout(1)
constexpr int kExitCannotRun = 127;  // as a shell for a command it cannot run

/// One emulated host of --netns: a network namespace and the block of ranks it runs.
struct Host {
  std::string name;  // as given: a name in /var/run/netns, or a path
  std::string path;  // the namespace file
  int count = -1;    // ranks on it; -1 until assigned
  int first = 0;     // its first rank
  int fd = -1;       // the open namespace file (close-on-exec)
};

/// What to run and how (shoal-run's options).
struct LaunchArgs {
  int nproc = 0;
  std::string master_addr = "127.0.0.1";
  bool master_addr_given = false;
  int master_port = 0;
  std::vector<Host> hosts;  // empty: every rank in shoal-run's own namespace
  double grace = 5;
  double timeout = 0;
  bool tag_output = false;
  std::string bind_to = "auto";  // core, none, or auto: core when every rank gets a core of its own
  std::vector<std::string> command;
};

/// Runs the job; returns the launcher's exit status (the first failed rank's, 124 on timeout,
/// 127 when PROGRAM cannot run). Sets `fatal_signal` when the caller should die by that signal
/// itself (it was interrupted), after everything is cleaned up. Takes over the hosts' fds.
int run_job(LaunchArgs args, int& fatal_signal);

/// Parses --netns entries ("NS" or "NS:K") for `nproc` ranks into `hosts` (opening each
/// namespace); returns why they are wrong, or "" when they are fine.
std::string setup_hosts(std::vector<std::string> entries, int nproc, std::vector<Host>& hosts);

/// Reads a hosts file (one "NS [K]" a line, # comments) into --netns entries; false and `why`
/// when it cannot.
bool read_hosts_file(const std::string& path, std::vector<std::string>& entries, std::string& why);

/// One line to stderr, prefixed "shoal-run: ", written whole.
void say(const std::string& line);

}  // namespace shoal::launch
