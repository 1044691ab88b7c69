// The table of algorithms: one row per (algorithm, collective), with a one-line description.
// The dispatcher (today: the first row that serves the collective) picks from it.
#pragma once

#include <string_view>
#include <vector>

#include "algorithms/schedule.hpp"

namespace shoal::algorithms {

struct AlgorithmInfo {
  std::string_view name;
  Collective collective;
  std::string_view description;
  std::string_view constraints;
  void (*build)(Schedule&, const CollectiveArgs&);
};

/// Every algorithm, in order of preference per collective.
const std::vector<AlgorithmInfo>& registry();

}  // namespace shoal::algorithms
