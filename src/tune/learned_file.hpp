// What learning on the job settled, kept across jobs (SHOAL_TUNE_SAVE): per communicator shape
// and size bucket, the row that won, the candidates' best times (each the slowest rank's) and
// what exploring cost. A job whose every rank reads the same bucket starts from its winner
// instead of exploring; at its end rank 0 of each communicator merges what it learned in.
//
//   {"format": "shoal-learned 1",
//    "buckets": [{"collective": "all_reduce", "world": 4, "ranks_per_host": 1,
//                 "transport": "tcp", "log2_bytes": 26, "pick": "rabenseifner",
//                 "alternative": "ring", "winner": "ring", "pick_us": 9030000.0,
//                 "alternative_us": 4490000.0, "exploration_us": 9600000.0}]}
//
// A bucket with a third candidate (a row the model priced close to its pick) also has
// "runner_up" and "runner_up_us".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "algorithms/registry.hpp"
#include "tune/tuning_file.hpp"

namespace shoal::tune {

struct LearnedBucket {
  algorithms::Collective collective = algorithms::Collective::all_reduce;
  int world = 1;
  int ranks_per_host = 1;
  Transport transport = Transport::tcp;
  int log2_bytes = 0;  // the bucket: calls of [2^k, 2^(k+1)) bytes (algorithms::model_bytes)
  const algorithms::AlgorithmInfo* pick = nullptr;         // the cost model's
  const algorithms::AlgorithmInfo* alternative = nullptr;  // the ring
  const algorithms::AlgorithmInfo* runner_up = nullptr;    // priced close to the pick; or none
  const algorithms::AlgorithmInfo* winner = nullptr;       // one of them
  // Each candidate's fastest explored call.
  double pick_s = 0, alternative_s = 0, runner_up_s = 0;
  double exploration_s = 0;  // the explored calls' time beyond the winner's
};

/// Whether two buckets are the same entry of a file (the shape, the collective, the bucket).
bool same_bucket(const LearnedBucket& a, const LearnedBucket& b);

/// Parses the file's JSON text; `source` names it in errors. InvalidArgumentError naming the
/// source and the problem: not JSON, another format, a missing or mistyped field, an unknown
/// collective, transport or row, a winner that is none of the candidates, a time that is negative.
std::vector<LearnedBucket> parse_learned_file(std::string_view text, std::string_view source);
std::string learned_to_json(const std::vector<LearnedBucket>& buckets);

/// `path`'s buckets; none when it does not exist. InvalidArgumentError when it cannot be read
/// or parsed.
std::vector<LearnedBucket> read_learned_file(const std::string& path);
/// Merges `mine` into `path` (an entry of the same bucket is replaced) under an exclusive lock
/// of the file, written whole to a temporary beside it and renamed over it, so that
/// communicators of one job ending together lose nothing and a reader never sees half a file.
/// A file that cannot be parsed is left as it is: InvalidArgumentError.
void save_learned_file(const std::string& path, const std::vector<LearnedBucket>& mine);

}  // namespace shoal::tune
