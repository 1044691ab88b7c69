// Runs N ranks as forked processes that rendezvous through a FileStore in a fresh directory.
// Each rank's function returns an exit code and may write a line of text that the parent reads
// (its error message, a timestamp). The parent kills every child after `limit`.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "shoal/shoal.hpp"

namespace shoal::testing {

struct RankResult {
  int exit_code = -1;  // or 128 + signal
  std::string report;  // what the rank wrote with report()
};

class ProcessJob {
 public:
  explicit ProcessJob(int n) : n_(n) {
    char tmpl[] = "/tmp/shoal-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  ~ProcessJob() { std::filesystem::remove_all(dir_); }

  std::shared_ptr<Store> store() const {
    return std::make_shared<FileStore>(dir_ + "/store", std::chrono::seconds(30));
  }
  void report(int rank, const std::string& text) const {
    std::ofstream(dir_ + "/report." + std::to_string(rank)) << text;
  }

  /// Forks the ranks, waits for all (killing them after `limit`), returns their results.
  std::vector<RankResult> run(const std::function<int(int rank, const ProcessJob&)>& fn,
                              std::chrono::seconds limit = std::chrono::seconds(60)) {
    std::vector<pid_t> pids;
    for (int r = 0; r < n_; ++r) {
      pid_t pid = fork();
      if (pid == 0) {
        int code = 99;
        try {
          code = fn(r, *this);
        } catch (const std::exception& e) {
          report(r, std::string("uncaught: ") + e.what());
          code = 98;
        }
        std::_Exit(code);
      }
      pids.push_back(pid);
    }
    std::vector<RankResult> results(n_);
    auto deadline = std::chrono::steady_clock::now() + limit;
    int left = n_;
    while (left > 0) {
      for (int r = 0; r < n_; ++r) {
        if (pids[r] <= 0) continue;
        int status = 0;
        if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
          results[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          pids[r] = 0;
          --left;
        }
      }
      if (left > 0 && std::chrono::steady_clock::now() > deadline) {
        for (pid_t p : pids)
          if (p > 0) kill(p, SIGKILL);
        for (int r = 0; r < n_; ++r)
          if (pids[r] > 0) {
            waitpid(pids[r], nullptr, 0);
            results[r].exit_code = 200;  // hung: killed by the test
            pids[r] = 0;
          }
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (int r = 0; r < n_; ++r) {
      std::ifstream in(dir_ + "/report." + std::to_string(r));
      std::getline(in, results[r].report, '\0');
    }
    return results;
  }

  const std::string& dir() const { return dir_; }

 private:
  int n_;
  std::string dir_;
};

/// CPU seconds used so far by this process's threads (all of them, and only this process's).
inline double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

inline double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace shoal::testing
