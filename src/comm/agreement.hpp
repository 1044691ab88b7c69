// A communicator's creation succeeds on every rank or on none. Without this, a rank frozen or
// killed half-way through set-up could leave some ranks with a communicator and the others
// with an error; they would then recover apart (the ones with it shrink the new communicator,
// the others the old one) and the job would split.
//
// After its own set-up each rank votes in the store, on one counter: yes adds 1, no adds 2^32
// (so the counter tells both how many voted and whether anyone said no). The vote that makes
// the count complete decides for everyone and publishes the outcome. A yes-voter that gives up
// waiting turns its yes into a no (adding 2^32 - 1, which keeps the count) unless the count was
// already complete, in which case it follows the decision that was made.
//
// Once created, the ranks compare the settings that must be equal on all of them
// (config::Agreement: those that decide which algorithm or path a call takes, and the tuning
// file's contents): every rank gathers every rank's fingerprints and finds the same first
// difference, if any, so all of them break the communicator alike and its first call raises
// MismatchError naming the rank and the setting, instead of a mismatch at some later call of
// a size where the picks part, or a hang.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/engine.hpp"
#include "shoal/store.hpp"

namespace shoal::comm {

/// Votes yes for the communicator whose keys live under `prefix` and waits, until `deadline`,
/// for every rank's vote. Returns when all voted yes. Throws PeerFailureError (with the first
/// no-voter's reason) when one voted no, TimeoutError when not every rank voted in time.
void vote_for_creation(Store& store, const std::string& prefix, int rank, int size,
                       Clock::time_point deadline);

/// Votes no (this rank's set-up failed with `why`). Never throws: without the store, the
/// others time out, which is the same outcome.
void vote_against_creation(Store& store, const std::string& prefix, int rank, int size,
                           const std::string& why) noexcept;

struct Disagreement {
  int rank = -1;  // the lowest rank whose settings differ from rank 0's
  std::string message;
};
/// `gathered` holds config::agreed_fingerprints() of every rank, rank by rank (`per_rank` each,
/// in config::agreed_settings() order). The first difference from rank 0's, or nullopt.
std::optional<Disagreement> first_disagreement(const std::vector<uint64_t>& gathered,
                                               size_t per_rank);

}  // namespace shoal::comm
