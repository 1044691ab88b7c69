// The test harness's own gate (support/test_main.cpp): a skipped test fails its program under
// SHOAL_TEST_NO_SKIP=1, naming the test and what it lacked, and is logged to $SHOAL_SKIP_LOG
// otherwise; *Child tests run only in the child a parent starts.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Outcome {
  int exit_code = -1;
  std::string output;
};

// Runs this binary on `filter` with the environment `env` ("NAME=value" pairs) added.
Outcome run_self(const std::string& filter, const std::vector<std::string>& env) {
  std::array<int, 2> pipe_fds{};
  if (::pipe(pipe_fds.data()) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipe_fds[1], STDOUT_FILENO);
    ::dup2(pipe_fds[1], STDERR_FILENO);
    ::close(pipe_fds[0]);
    ::unsetenv("SHOAL_TEST_NO_SKIP");
    ::unsetenv("SHOAL_SKIP_LOG");
    for (const auto& kv : env) ::putenv(const_cast<char*>(kv.c_str()));
    const std::string arg = "--gtest_filter=" + filter;
    ::execl("/proc/self/exe", "test_harness", arg.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  Outcome run;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) run.output.append(buf, n);
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

// The probe: skips whenever it runs (only in a child, by its name).
TEST(SkipGate, ProbeChild) { GTEST_SKIP() << "the probe lacks a widget"; }

TEST(SkipGate, ASkipFailsTheProgramUnderNoSkip) {
  const Outcome run =
      run_self("SkipGate.ProbeChild", {"SHOAL_TEST_CHILD=1", "SHOAL_TEST_NO_SKIP=1"});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(
      run.output.find("FAIL: test_harness SkipGate.ProbeChild would skip, and SHOAL_TEST_NO_SKIP=1 "
                      "allows none: the probe lacks a widget"),
      std::string::npos)
      << run.output;
}

TEST(SkipGate, ASkipIsLoggedOtherwise) {
  const std::string log =
      std::filesystem::temp_directory_path() / ("shoal-skips-" + std::to_string(::getpid()));
  std::filesystem::remove(log);
  const Outcome run =
      run_self("SkipGate.ProbeChild", {"SHOAL_TEST_CHILD=1", "SHOAL_SKIP_LOG=" + log});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(read_file(log), "test_harness SkipGate.ProbeChild: the probe lacks a widget\n");
  std::filesystem::remove(log);
}

TEST(SkipGate, ChildTestsRunOnlyInAChild) {
  // Without SHOAL_TEST_CHILD the probe is filtered out even when the filter names it: nothing
  // runs, nothing skips, under the strict switch too.
  const Outcome run = run_self("SkipGate.ProbeChild", {"SHOAL_TEST_NO_SKIP=1"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output.find("SkipGate.ProbeChild"), std::string::npos) << run.output;
}
