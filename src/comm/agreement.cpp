#include "comm/agreement.hpp"

#include <algorithm>

#include "core/check.hpp"
#include "core/config.hpp"

namespace shoal::comm {

namespace {

constexpr int64_t kNo = int64_t{1} << 32;

int64_t votes_cast(int64_t counter) { return counter % kNo + counter / kNo; }

struct Keys {
  std::string votes, outcome, why;
  explicit Keys(const std::string& prefix)
      : votes(prefix + "/create/votes"),
        outcome(prefix + "/create/outcome"),
        why(prefix + "/create/why") {}
};

// The vote whose counter value `after` completes the count decides, for everyone.
void decide_if_last(Store& store, const Keys& k, int size, int64_t after) {
  if (votes_cast(after) == size) store.set(k.outcome, after < kNo ? "ok" : "failed");
}

Milliseconds until(Clock::time_point deadline, Milliseconds at_least) {
  return std::max(at_least, std::chrono::duration_cast<Milliseconds>(deadline - Clock::now()));
}

}  // namespace

void vote_against_creation(Store& store, const std::string& prefix, int rank, int size,
                           const std::string& why) noexcept {
  if (size <= 1) return;
  const Keys k(prefix);
  try {
    store.set(k.why, "rank " + std::to_string(rank) + ": " + why);
    decide_if_last(store, k, size, store.add(k.votes, kNo));
  } catch (...) {
  }
}

void vote_for_creation(Store& store, const std::string& prefix, int rank, int size,
                       Clock::time_point deadline) {
  if (size <= 1) return;
  const Keys k(prefix);
  decide_if_last(store, k, size, store.add(k.votes, 1));
  try {
    store.wait({k.outcome}, until(deadline, Milliseconds(1)));
  } catch (const TimeoutError&) {
    const int64_t before = store.add(k.votes, kNo - 1) - (kNo - 1);
    if (votes_cast(before) < size)
      SHOAL_THROW(
          Timeout,
          "rank " << rank << ": creating a communicator of " << size << " ranks: "
                  << size - votes_cast(before) << " rank(s) did not finish setting up in time "
                  << "(killed, frozen, or creating other communicators first); it fails on "
                  << "every rank. Check that every rank is alive and creates the same "
                  << "communicators in the same order; if ranks start slowly, raise SHOAL_TIMEOUT");
    // The count was complete before this rank gave up: the last voter's decision stands.
    store.wait({k.outcome}, Milliseconds(10000));
  }
  if (store.get_string(k.outcome) == "ok") return;
  std::string why = "its log says why";
  try {
    if (store.check({k.why})) why = store.get_string(k.why);
  } catch (...) {
  }
  SHOAL_THROW(PeerFailure, "rank " << rank << ": creating a communicator of " << size
                                   << " ranks failed on another rank (" << why
                                   << "), so it fails on every rank");
}

std::optional<Disagreement> first_disagreement(const std::vector<uint64_t>& gathered,
                                               size_t per_rank) {
  const auto agreed = config::agreed_settings();
  SHOAL_CHECK(per_rank == agreed.size() && per_rank > 0 && gathered.size() % per_rank == 0,
              Internal,
              "settings fingerprints: " << gathered.size() << " values for " << agreed.size()
                                        << " settings");
  for (size_t r = 1; r < gathered.size() / per_rank; ++r)
    for (size_t i = 0; i < per_rank; ++i) {
      if (gathered[r * per_rank + i] == gathered[i]) continue;
      const config::Setting& s = *agreed[i];
      const char* what = s.agreed == config::Agreement::file_contents
                             ? " (the contents of the file it names, or whether it can be read)"
                             : "";
      return Disagreement{static_cast<int>(r),
                          "rank " + std::to_string(r) + "'s " + s.name + " differs from rank 0's" +
                              what +
                              ": it decides which algorithm or path a call takes and "
                              "must be the same on every rank of a communicator"};
    }
  return std::nullopt;
}

}  // namespace shoal::comm
