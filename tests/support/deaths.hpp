// Tests where a rank dies or a call must fail: how a rank reports the error it got, and the
// checks that every rank passed, that every survivor saw a victim's death soon, naming it, with
// no shared memory left.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "support/processes.hpp"
#include "transport/shm/segment.hpp"

namespace shoal::testing {

inline constexpr int kGotExpectedError = 0, kWrongError = 1, kNoError = 2;

/// Runs `call` and classifies the outcome (the rank's exit code); the report carries the time,
/// the culprit and the message of the expected error.
template <class ErrorType, class Call>
int expect_error(int rank, const ProcessJob& job, Call call) {
  try {
    call();
  } catch (const ErrorType& e) {
    std::ostringstream os;
    os << std::fixed << std::setprecision(6) << monotonic_seconds() << "\n"
       << e.peer() << "\n"
       << e.what();
    job.report(rank, os.str());
    return kGotExpectedError;
  } catch (const std::exception& e) {
    job.report(rank, std::string("wrong error: ") + e.what());
    return kWrongError;
  }
  job.report(rank, "no error");
  return kNoError;
}

/// Every rank exited 0; each failure names its rank and what it reported.
inline void expect_every_rank_passed(const std::vector<RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + results[r].report);
    EXPECT_EQ(results[r].exit_code, 0);
  }
}

/// The time at the head of a report (expect_error's, or a victim's).
inline double reported_time(const RankResult& r) {
  return std::stod(r.report.substr(0, r.report.find('\n')));
}

/// The segments of communicator `comm_id`'s `ranks` still in /dev/shm (other tests running at
/// the same time have theirs: only this job's count).
inline int segments_left(uint64_t comm_id, int ranks) {
  int n = 0;
  for (int r = 0; r < ranks; ++r)
    n += std::filesystem::exists("/dev/shm" + transport::shm::segment_name(comm_id, r));
  return n;
}

/// The victim's last words: the time and its communicator's id, then SIGKILL.
[[noreturn]] inline void report_and_die(const ProcessJob& job, int rank, uint64_t comm_id) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(6) << monotonic_seconds() << " " << comm_id;
  job.report(rank, os.str());
  raise(SIGKILL);
  std::abort();
}

/// After `victim` died with report_and_die while the others ran expect_error<PeerFailureError>:
/// every survivor got it within 5 s, naming the victim, and no segment is left in /dev/shm.
inline void expect_every_survivor_saw_the_death(const std::vector<RankResult>& results,
                                                int victim) {
  const int ranks = static_cast<int>(results.size());
  ASSERT_EQ(results[victim].exit_code, 128 + SIGKILL) << results[victim].report;
  std::istringstream victim_report(results[victim].report);
  double killed_at = 0;
  uint64_t comm_id = 0;
  victim_report >> killed_at >> comm_id;
  ASSERT_NE(comm_id, 0u) << "the victim's report: " << results[victim].report;
  for (int r = 0; r < ranks; ++r) {
    if (r == victim) continue;
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + results[r].report);
    ASSERT_EQ(results[r].exit_code, kGotExpectedError);
    EXPECT_NE(results[r].report.find("rank " + std::to_string(victim)), std::string::npos)
        << "the message must name the dead rank";
    EXPECT_LT(reported_time(results[r]) - killed_at, 5.0) << "detection took too long";
  }
  EXPECT_EQ(segments_left(comm_id, ranks), 0) << "shared memory left in /dev/shm";
}

}  // namespace shoal::testing
