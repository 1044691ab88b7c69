// How the dispatcher reads a tuning table at a call's size: every column's time (each row's,
// and the hierarchy's where timed) as a curve over log2(size).
//
// Measured times are noisy: one point of one row can be 10-40% off between two runs of the same
// sweep (docs/algorithms.md, "How well it picks"). The default reading is a
// smoothed one: at each size, a local-linear fit of log(time) over log2(size) through *every*
// measured size, each weighted by a Gaussian of width `octaves` around the size. It is exact
// for a power law (time = a x size^b: latency- and bandwidth-bound rows alike), moves one noisy
// point's pull down, and at a measured size it may disagree with that size's raw time. The fit
// is evaluated once, at 8 points per octave across the measured sizes, and read between them
// linearly in log(time). The other readings go through the two measured neighbours: time
// linear in log(size), or the nearer one's. Outside the measured sizes every reading takes the
// nearest end. Simulated tables (shoal-sim tune) have no noise and are read log-linearly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tune/tuning_file.hpp"

namespace shoal::tune {

enum class Interpolation : uint8_t {
  smoothed,    // the Gaussian-weighted local-linear fit through every measured size
  log_linear,  // time linear in log(size) between the two measured neighbours
  nearest,     // the neighbour nearer in log(size)
};

struct Reading {
  static constexpr double kDefaultOctaves = 2;
  Interpolation interpolation = Interpolation::smoothed;
  double octaves =
      kDefaultOctaves;  // smoothed: the Gaussian's standard deviation, in octaves of size

  /// SHOAL_TUNE_SMOOTHING: the width in octaves (default 2); 0 reads log-linearly between the
  /// neighbours. InvalidArgumentError when it is not a number from 0 to 64.
  static Reading from_environment();
  /// "smoothed over 2 octaves", "log-linear between neighbours", "nearest measured size".
  std::string describe() const;
  bool operator==(const Reading&) const = default;
};

class Curves {
 public:
  Curves() = default;
  /// The curves of `m`'s columns (copied: `m` may go). Simulated tables are read log-linearly
  /// whatever `reading` says.
  Curves(const Measurements& m, Reading reading);

  /// Where `bytes` falls among the curves' points: the neighbours and the weight of the upper.
  struct Point {
    size_t lo = 0, hi = 0;
    double w = 0;
  };
  Point locate(uint64_t bytes) const;
  /// Seconds per call of the table's `row`-th row (Measurements::times order) at `p`.
  double row_time(const Point& p, size_t row) const { return at(p, rows_[row]); }
  /// Seconds per call of the hierarchical composition at `p`; the table must time it.
  double hierarchical_time(const Point& p) const { return at(p, hierarchical_); }

 private:
  std::vector<double> x_;  // log2(bytes) of the points, increasing
  std::vector<std::vector<double>> rows_;
  std::vector<double> hierarchical_;
  bool in_log_ = false;   // values are log(seconds), interpolated as such
  bool nearest_ = false;  // the nearer point's value, no interpolation
  double at(const Point& p, const std::vector<double>& v) const;
};

}  // namespace shoal::tune
