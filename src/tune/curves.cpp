#include "tune/curves.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/check.hpp"
#include "core/config.hpp"

namespace shoal::tune {

namespace {

constexpr double kPointsPerOctave = 8;

// The smoothed fit of one column at log2(size) `x`: the intercept of the weighted least-squares
// line of log(seconds) over log2(size) - x. Weights are taken relative to the nearest measured
// size's (which weighs 1), so a narrow width never underflows them all; with one size, or all
// the weight on one, the fit is the weighted mean.
double fit_log_seconds(const std::vector<double>& xs, const std::vector<double>& log_seconds,
                       double x, double octaves) {
  double nearest = std::numeric_limits<double>::infinity();
  for (double xi : xs) nearest = std::min(nearest, std::abs(xi - x));
  const double u0 = nearest / octaves;
  double sw = 0, sd = 0, sy = 0, sdd = 0, sdy = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double d = xs[i] - x, u = d / octaves;
    const double w = std::exp(-0.5 * (u * u - u0 * u0));
    sw += w;
    sd += w * d;
    sy += w * log_seconds[i];
    sdd += w * d * d;
    sdy += w * d * log_seconds[i];
  }
  const double det = sw * sdd - sd * sd;
  if (det <= 1e-12 * sw * sw) return sy / sw;
  return (sy * sdd - sd * sdy) / det;
}

}  // namespace

Reading Reading::from_environment() {
  const std::string v = config::get("SHOAL_TUNE_SMOOTHING");
  const auto octaves = config::parse_number(v);
  SHOAL_CHECK(octaves && *octaves >= 0 && *octaves <= 64, InvalidArgument,
              "SHOAL_TUNE_SMOOTHING='"
                  << v << "' is not a width in octaves from 0 (log-linear) to 64 (example: 2)");
  if (*octaves == 0) return Reading{Interpolation::log_linear, 0};
  return Reading{Interpolation::smoothed, *octaves};
}

std::string Reading::describe() const {
  switch (interpolation) {
    case Interpolation::smoothed: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "smoothed over %g octaves", octaves);
      return buf;
    }
    case Interpolation::log_linear:
      return "log-linear between neighbours";
    case Interpolation::nearest:
      return "nearest measured size";
  }
  return "?";
}

Curves::Curves(const Measurements& m, Reading reading) {
  SHOAL_CHECK(!m.sizes.empty(), Internal, "a tuning table without sizes");
  std::vector<double> xs;
  for (uint64_t s : m.sizes) xs.push_back(std::log2(static_cast<double>(s)));
  if (m.simulated && reading.interpolation == Interpolation::smoothed)
    reading.interpolation = Interpolation::log_linear;
  nearest_ = reading.interpolation == Interpolation::nearest;
  if (reading.interpolation != Interpolation::smoothed) {
    x_ = xs;
    for (const auto& [row, seconds] : m.times) rows_.push_back(seconds);
    hierarchical_ = m.hierarchical;
    return;
  }
  SHOAL_CHECK(reading.octaves > 0, InvalidArgument,
              "a smoothed reading needs a width above 0 octaves");
  in_log_ = true;
  const double first = xs.front(), last = xs.back();
  for (int k = 0; first + k / kPointsPerOctave < last - 1e-9; ++k)
    x_.push_back(first + k / kPointsPerOctave);
  x_.push_back(last);
  auto curve = [&](const std::vector<double>& seconds) {
    std::vector<double> log_seconds, fitted;
    for (double t : seconds) log_seconds.push_back(std::log(t));
    for (double x : x_) fitted.push_back(fit_log_seconds(xs, log_seconds, x, reading.octaves));
    return fitted;
  };
  for (const auto& [row, seconds] : m.times) rows_.push_back(curve(seconds));
  if (!m.hierarchical.empty()) hierarchical_ = curve(m.hierarchical);
}

Curves::Point Curves::locate(uint64_t bytes) const {
  const double x = std::clamp(std::log2(static_cast<double>(std::max<uint64_t>(bytes, 1))),
                              x_.front(), x_.back());
  const size_t hi = static_cast<size_t>(std::lower_bound(x_.begin(), x_.end(), x) - x_.begin());
  if (x_[hi] == x) return {hi, hi, 0};
  const size_t lo = hi - 1;
  double w = (x - x_[lo]) / (x_[hi] - x_[lo]);
  if (nearest_) w = w < 0.5 ? 0 : 1;
  return {lo, hi, w};
}

double Curves::at(const Point& p, const std::vector<double>& v) const {
  const double y = (1 - p.w) * v[p.lo] + p.w * v[p.hi];
  return in_log_ ? std::exp(y) : y;
}

}  // namespace shoal::tune
