// The store keys a swarm coordinates through (one place, so servers, trainers and the launcher
// agree on them).
#pragma once

#include <cstdint>
#include <string>

namespace shoal::swarm::keys {

inline std::string round_base(int stage, uint32_t round) {
  return "swarm/s" + std::to_string(stage) + "/r" + std::to_string(round);
}
/// Backward of micro-batch `mb` counted by the first replica to finish it (add() == 1).
inline std::string claim(int stage, uint32_t round, uint64_t mb) {
  return round_base(stage, round) + "/mb/" + std::to_string(mb);
}
/// Micro-batches of the round whose backward this stage finished.
inline std::string done_count(int stage, uint32_t round) {
  return round_base(stage, round) + "/done";
}
/// Set when the count reaches the global batch: the replicas average.
inline std::string full(int stage, uint32_t round) { return round_base(stage, round) + "/full"; }
inline std::string averaging(int stage, uint32_t round) {
  return round_base(stage, round) + "/avg";
}
/// Set by the first replica that has stepped: the stage serves the next round.
inline std::string stepped(int stage, uint32_t round) { return averaging(stage, round) + "/done"; }
/// The stage's latest round, for a replica that finds no live peer to take state from.
inline std::string stage_round(int stage) { return "swarm/s" + std::to_string(stage) + "/round"; }

/// Trainers: claims on the micro-batches of a round, samples finished, loss sums per round.
inline std::string claimed(uint32_t round) { return "swarm/claimed/r" + std::to_string(round); }
inline const char* kSamplesDone = "swarm/samples_done";
/// A micro-batch's loss is posted once (first add() == 1); unfinished ones are redone after a
/// stall.
inline std::string finished(uint32_t round, uint64_t mb) {
  return "swarm/finished/r" + std::to_string(round) + "/" + std::to_string(mb);
}
inline std::string reclaim(uint32_t round, uint64_t mb, int epoch) {
  return "swarm/reclaim/r" + std::to_string(round) + "/" + std::to_string(mb) + "/" +
         std::to_string(epoch);
}
inline std::string loss_sum(uint32_t round) {
  return "swarm/loss/r" + std::to_string(round) + "/sum_micro";
}
inline std::string loss_count(uint32_t round) {
  return "swarm/loss/r" + std::to_string(round) + "/n";
}
inline const char* kBytesSent = "swarm/bytes_between_stages";
/// Averaging: bytes every member sent to the others, and the member-rounds they cover.
inline const char* kAveragingBytes = "swarm/averaging_bytes";
inline const char* kAveragingMemberRounds = "swarm/averaging_member_rounds";
/// Rebalancing: moves made so far, and the claim on acting on a given placement.
inline const char* kMovesDone = "swarm/moves_done";
inline std::string move_claim(int64_t moves_done) {
  return "swarm/move_claim/" + std::to_string(moves_done);
}
/// The swarm's shape, published by whoever starts it.
inline const char* kStages = "swarm/stages";

}  // namespace shoal::swarm::keys
