// Tuning files: the times shoal-tune measured for every algorithm of a collective at a list of
// sizes, per (collective, world size, ranks per host, transport). The dispatcher picks from them.
//
//   {"format": "shoal-tune 1",
//    "tables": [{"collective": "all_reduce", "world": 4, "ranks_per_host": 4, "transport": "shm",
//                "sizes": [1024, 4096, ...],                       // bytes, strictly increasing
//                "times_us": {"ring": [12.5, 20.1, ...], ...}}]}   // one per size, > 0
//
// Sizes count bytes as the cost models do (algorithms::model_bytes): the whole vector of
// all_reduce, the gathered output of all_gather, the input of reduce_scatter. A table may say
// "source": "simulated" (written by `shoal-sim tune`: the simulator's prediction for a world
// larger than any measured); "measured" is the default. A measured table may hold the cost
// constants its communicator calibrated at creation, "calibration": {"alpha_us": 5.1,
// "beta_ns_per_byte": 0.4, "gamma_ns_per_byte": 0.02, "busy_gamma_ns_per_byte": 0.9} (the last
// optional; shoal-tune --report judges the cost model with them; the dispatcher uses its own
// communicator's), and "cores_per_host": the fewest CPUs a host gave its ranks (optional; the
// cost model's context in --report). Other fields (host, command, date,
// iterations) are kept for people and ignored here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "algorithms/registry.hpp"

namespace shoal::tune {

/// The slowest link a communicator's calls cross: shm when every rank shares one host's
/// memory, tcp otherwise.
enum class Transport : uint8_t { shm, tcp };
std::string_view to_string(Transport t);

/// The measurements of one (collective, world, ranks per host, transport).
struct Measurements {
  algorithms::Collective collective = algorithms::Collective::all_reduce;
  int world = 1;
  int ranks_per_host = 1;
  Transport transport = Transport::shm;
  int cores_per_host = 0;                             // as tune::Context's; 0: not recorded
  bool simulated = false;                             // predicted by shoal-sim, not measured
  std::optional<algorithms::CostParams> calibration;  // seconds, as calibrated at creation
  std::vector<uint64_t> sizes;                        // strictly increasing, >= 1
  /// Seconds per call of each measured algorithm at each size, in registry order.
  std::vector<std::pair<const algorithms::AlgorithmInfo*, std::vector<double>>> times;
  /// Seconds per call of the hierarchical composition at each size; empty when not measured.
  std::vector<double> hierarchical;
};

/// Whether two tables have the same key (collective, world, ranks per host, transport): a file
/// holds one table per key.
inline bool same_key(const Measurements& a, const Measurements& b) {
  return a.collective == b.collective && a.world == b.world &&
         a.ranks_per_host == b.ranks_per_host && a.transport == b.transport;
}

struct TuningFile {
  std::string source;  // where it came from, for messages
  std::vector<Measurements> tables;
};

/// Parses a tuning file's JSON text; `source` names it in errors. Raises InvalidArgumentError
/// naming the source and the problem: not JSON, a missing or mistyped field, an unknown
/// collective, transport or algorithm, sizes not increasing, a time list of the wrong length, a
/// time that is not positive, a calibration constant that is not positive, two tables for the
/// same key.
TuningFile parse_tuning_file(std::string_view text, std::string_view source);

/// Reads and parses `path` (an unreadable file is an InvalidArgumentError as well).
/// `keep_simulated` false drops the simulated tables (SHOAL_TUNE_SIM=off).
TuningFile load_tuning_file(const std::string& path, bool keep_simulated = true);

/// The JSON text of `file`; `extra` (a JSON object's text, or "") adds top-level fields.
std::string to_json(const TuningFile& file, std::string_view extra = "");

}  // namespace shoal::tune
