// The main of every GoogleTest target (instead of GTest::gtest_main): it runs the tests, then
// accounts for the skipped ones (docs/reliability.md). Under SHOAL_TEST_NO_SKIP=1 (.ci/run) a
// skipped test fails the program, naming what it lacked; otherwise each goes to $SHOAL_SKIP_LOG
// (make test prints that file last).
//
// Tests named *Child are the bodies a test runs in a fresh process (a setting read once per
// process): they run only when SHOAL_TEST_CHILD is set, as the parent sets it for its child.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

std::string program_name(const char* argv0) {
  const std::string path = argv0 ? argv0 : "test";
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// "-*Child" added to the filter's negative patterns, which keeps its positive ones.
void exclude_children() {
  std::string filter = GTEST_FLAG_GET(filter);
  filter += filter.find('-') == std::string::npos ? "-*Child" : ":*Child";
  GTEST_FLAG_SET(filter, filter);
}

struct Skipped {
  std::string name;
  std::string reason;
};

std::vector<Skipped> skipped_tests() {
  std::vector<Skipped> out;
  const auto& unit = *testing::UnitTest::GetInstance();
  for (int s = 0; s < unit.total_test_suite_count(); ++s) {
    const auto& suite = *unit.GetTestSuite(s);
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const auto& info = *suite.GetTestInfo(t);
      if (!info.should_run() || !info.result()->Skipped()) continue;
      std::string reason;
      for (int p = 0; p < info.result()->total_part_count(); ++p)
        if (info.result()->GetTestPartResult(p).skipped())
          reason = info.result()->GetTestPartResult(p).message();
      out.push_back({std::string(suite.name()) + "." + info.name(),
                     reason.empty() ? "no reason given" : reason});
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string program = program_name(argc > 0 ? argv[0] : nullptr);
  testing::InitGoogleTest(&argc, argv);
  if (!std::getenv("SHOAL_TEST_CHILD")) exclude_children();
  int status = RUN_ALL_TESTS();
  const auto skipped = skipped_tests();
  if (skipped.empty()) return status;
  const char* no_skip = std::getenv("SHOAL_TEST_NO_SKIP");
  if (no_skip && std::string(no_skip) == "1") {
    for (const auto& s : skipped)
      std::printf("FAIL: %s %s would skip, and SHOAL_TEST_NO_SKIP=1 allows none: %s\n",
                  program.c_str(), s.name.c_str(), s.reason.c_str());
    return 1;
  }
  if (const char* log = std::getenv("SHOAL_SKIP_LOG")) {
    std::ofstream file(log, std::ios::app);
    for (const auto& s : skipped) file << program << " " << s.name << ": " << s.reason << "\n";
  }
  return status;
}
