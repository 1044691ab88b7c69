// shoal-tune: measures every algorithm of all_reduce, all_gather and reduce_scatter at a list of
// sizes on the real job, and rank 0 writes a tuning file the dispatcher reads (SHOAL_TUNE_FILE).
//
//   shoal-run -n 4 shoal-tune -o tune.json [-b 1K -e 16M -f 2 | --sizes 1K,64K,4M] [-n 10] [-w 2]
//   shoal-tune --report tune.json [--picks-from other.json] [--cores N]   # no job: tables,
//   accuracy
//
// The sweep is library code (comm/tuning_sweep.hpp); this tool parses the options, writes the
// file (merging with --append) and reports on files (--report).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "algorithms/registry.hpp"
#include "comm/tuning_sweep.hpp"
#include "core/check.hpp"
#include "core/config.hpp"
#include "shoal/shoal.hpp"
#include "tune/dispatcher.hpp"

using namespace shoal;
using algorithms::AlgorithmInfo;
using algorithms::Collective;

namespace {

using Clock = std::chrono::steady_clock;

std::vector<uint64_t> parse_sizes(const std::string& list) {
  std::vector<uint64_t> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(config::parse_bytes(item, "--sizes"));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Measures on the job (comm/tuning_sweep.hpp); rank 0 writes the file.
int sweep(const std::string& out_path, comm::SweepOptions options, bool append,
          const std::string& command) {
  // The dispatcher decides schedules; the flat shared-slot path would hide them at small sizes.
  setenv("SHOAL_FLAT_MAX_BYTES", "0", 1);
  Communicator comm = Communicator::from_environment();
  for (int w : options.worlds)
    SHOAL_CHECK(
        w >= 2 && w <= comm.size(), InvalidArgument,
        "--worlds: " << w << " is not a world from 2 to the job's " << comm.size() << " ranks");
  const auto start = Clock::now();
  options.progress = [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  tune::TuningFile file = comm::measure_tuning_tables(comm, options);
  if (comm.rank() != 0) return 0;
  std::string keys;  // what this run measured, before --append adds the file's other tables
  for (const auto& t : file.tables)
    if (t.collective == Collective::all_reduce)
      keys += (keys.empty() ? "" : "; ") + std::to_string(t.world) + " ranks, " +
              std::to_string(t.ranks_per_host) + " per host, " +
              std::string(tune::to_string(t.transport));
  // --append keeps the other (collective, world, ranks per host, transport) tables of the file.
  if (append && access(out_path.c_str(), F_OK) == 0) {
    tune::TuningFile old = tune::load_tuning_file(out_path);
    for (auto& t : old.tables) {
      const bool replaced =
          std::any_of(file.tables.begin(), file.tables.end(),
                      [&](const tune::Measurements& n) { return tune::same_key(n, t); });
      if (!replaced) file.tables.push_back(std::move(t));
    }
  }
  // One order whatever the runs' order: by collective, world, ranks per host, transport.
  std::sort(file.tables.begin(), file.tables.end(),
            [](const tune::Measurements& a, const tune::Measurements& b) {
              return std::tuple(a.collective, a.world, a.ranks_per_host, a.transport) <
                     std::tuple(b.collective, b.world, b.ranks_per_host, b.transport);
            });
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  nlohmann::json extra = {{"host", host},
                          {"command", command},
                          {"iterations", options.iters},
                          {"warmup", options.warmup},
                          {"rounds", options.rounds},
                          {"seconds", std::chrono::duration<double>(Clock::now() - start).count()}};
  const std::string text = tune::to_json(file, extra.dump());
  tune::parse_tuning_file(text, out_path);  // what we write must load
  std::ofstream os(out_path);
  os << text << "\n";
  SHOAL_CHECK(os.good(), InvalidArgument, "cannot write the tuning file '" << out_path << "'");
  std::printf("shoal-tune: wrote %s (%s) in %.1f s\n", out_path.c_str(), keys.c_str(),
              std::chrono::duration<double>(Clock::now() - start).count());
  return 0;
}

// ---- --report: the tables of a file and the held-out accuracy of the decision table ----

// A file holding one table cut to the sizes whose index has parity `keep`.
std::shared_ptr<const tune::TuningFile> half_of(const tune::Measurements& m, size_t keep) {
  auto f = std::make_shared<tune::TuningFile>();
  tune::Measurements h = m;
  h.sizes.clear();
  h.hierarchical.clear();
  for (auto& [row, t] : h.times) t.clear();
  for (size_t i = keep; i < m.sizes.size(); i += 2) {
    h.sizes.push_back(m.sizes[i]);
    for (size_t a = 0; a < m.times.size(); ++a) h.times[a].second.push_back(m.times[a].second[i]);
    if (!m.hierarchical.empty()) h.hierarchical.push_back(m.hierarchical[i]);
  }
  f->tables.push_back(std::move(h));
  return f;
}

// A table's columns: its rows, then "hierarchical" when it was timed.
using Columns = std::vector<std::pair<std::string, const std::vector<double>*>>;
Columns columns_of(const tune::Measurements& m) {
  Columns cols;
  for (const auto& [row, t] : m.times) cols.emplace_back(std::string(row->name), &t);
  if (!m.hierarchical.empty()) cols.emplace_back("hierarchical", &m.hierarchical);
  return cols;
}

// What runs a call of `bytes`, as the communicator decides it: the hierarchy when
// SHOAL_HIERARCHICAL=auto takes it (the table's hierarchical times, else `hierarchy_sizes`,
// SHOAL_HIERARCHICAL_MIN_BYTES to _MAX_BYTES), else the dispatcher's row. `fallback`: not read
// from a measured size of the dispatcher's table (outside its sizes, or no table: the cost
// model and the size range).
struct Pick {
  std::string name;
  bool fallback = false;
};
Pick pick_of(const tune::Dispatcher& d, const tune::Measurements& m, uint64_t bytes,
             const tune::Dispatcher::SizeRange& hierarchy_sizes) {
  const tune::Measurements* t = d.table_for(m.collective);
  const bool fallback = !t || bytes < t->sizes.front() || bytes > t->sizes.back();
  if (!m.hierarchical.empty() && d.auto_hierarchy(m.collective, bytes, hierarchy_sizes).take)
    return {"hierarchical", fallback};
  return {std::string(d.choose(m.collective, bytes).algorithm->name), fallback};
}

double time_of(const Columns& cols, const std::string& name, size_t i) {
  for (const auto& [n, t] : cols)
    if (n == name) return (*t)[i];
  return 1e30;  // not measured: never "within 10%"
}

// `picks_path` (may be ""): a tuning file from another run, whose dispatcher (all of its sizes)
// picks at every size of `path`: the picks as they would be in use, judged on fresh times.
// `cores` >= 0: the cores per host of the cost model's context instead of each table's.
int report(const std::string& path, const std::string& picks_path, int cores) {
  tune::TuningFile file = tune::load_tuning_file(path);
  std::shared_ptr<const tune::TuningFile> other_run;
  if (!picks_path.empty())
    other_run = std::make_shared<const tune::TuningFile>(tune::load_tuning_file(picks_path));
  std::stable_sort(file.tables.begin(), file.tables.end(),
                   [](const tune::Measurements& a, const tune::Measurements& b) {
                     return std::tuple(a.collective, a.world) < std::tuple(b.collective, b.world);
                   });
  struct Tally {
    int hits = 0, total = 0;
  };
  const auto hierarchy_sizes = tune::Dispatcher::hierarchy_sizes_from_environment();
  // The reading in use first, then the others.
  std::vector<tune::Reading> readings = {tune::Reading::from_environment()};
  for (const tune::Reading r : {tune::Reading{}, tune::Reading{tune::Interpolation::log_linear, 0},
                                tune::Reading{tune::Interpolation::nearest, 0}})
    if (r != readings[0]) readings.push_back(r);
  std::map<std::string, Tally> tally;  // model -> picks within 10% of the best
  std::string totals;  // per table: the sweep's total time, held-out picks vs each row
  std::string excess;  // per table: the mean excess over the best, picks vs each row
  for (const auto& m : file.tables) {
    const tune::Context ctx{m.world, m.ranks_per_host, m.transport,
                            cores >= 0 ? cores : m.cores_per_host};
    // As in use: the constants the communicator calibrated at creation, when the file has them.
    const auto params = tune::cost_params(m.transport, m.calibration ? &*m.calibration : nullptr);
    // Held out: the dispatcher built from the other half of the sizes predicts each size, with
    // the reading in use (SHOAL_TUNE_SMOOTHING) and the others.
    std::vector<std::array<tune::Dispatcher, 2>> halves;
    for (const tune::Reading& r : readings)
      halves.push_back({tune::Dispatcher(ctx, params, half_of(m, 1), true, r),
                        tune::Dispatcher(ctx, params, half_of(m, 0), true, r)});
    const tune::Dispatcher model(ctx, tune::cost_params(m.transport), nullptr);
    const std::optional<tune::Dispatcher> calibrated =
        m.calibration ? std::optional<tune::Dispatcher>(std::in_place, ctx, params, nullptr)
                      : std::nullopt;
    const std::optional<tune::Dispatcher> from_other_run =
        other_run ? std::optional<tune::Dispatcher>(std::in_place, ctx, params, other_run, true,
                                                    readings[0])
                  : std::nullopt;
    const auto cols = columns_of(m);
    double picked_total = 0, other_total = 0;
    std::vector<double> row_total(cols.size(), 0.0);
    // Sum over sizes of log(time / best time at that size): the mean excess, each size alike.
    double picked_log = 0, other_log = 0;
    std::vector<double> row_log(cols.size(), 0.0);
    std::printf("\n### %s, %d ranks (%d per host, %s)\n\n",
                std::string(algorithms::to_string(m.collective)).c_str(), m.world, m.ranks_per_host,
                std::string(tune::to_string(m.transport)).c_str());
    std::printf("| bytes |");
    for (const auto& [name, t] : cols) std::printf(" %s |", name.c_str());
    std::printf(" best | held-out pick | cost-model pick |%s\n|---:|",
                other_run ? " pick from the other run |" : "");
    for (size_t a = 0; a < cols.size(); ++a) std::printf("---:|");
    std::printf("---|---|---|%s\n", other_run ? "---|" : "");
    for (size_t i = 0; i < m.sizes.size(); ++i) {
      const uint64_t s = m.sizes[i];
      size_t best = 0;
      std::printf("| %s |", config::format_bytes(s).c_str());
      for (size_t a = 0; a < cols.size(); ++a) {
        const double t = (*cols[a].second)[i];
        std::printf(" %.1f |", t * 1e6);
        if (t < (*cols[best].second)[i]) best = a;
        row_total[a] += t;
      }
      const double best_t = (*cols[best].second)[i];
      for (size_t a = 0; a < cols.size(); ++a)
        row_log[a] += std::log((*cols[a].second)[i] / best_t);
      auto within = [&](const Pick& p) { return time_of(cols, p.name, i) <= 1.1 * best_t; };
      auto mark = [&](const Pick& p) {
        char buf[96];
        std::snprintf(buf, sizeof buf, "%s%s (%+.0f%%)", p.name.c_str(), p.fallback ? "*" : "",
                      (time_of(cols, p.name, i) / best_t - 1) * 100);
        return std::string(buf);
      };
      const Pick held = pick_of(halves[0][i % 2], m, s, hierarchy_sizes);
      const Pick cm = pick_of(calibrated ? *calibrated : model, m, s, hierarchy_sizes);
      picked_total += time_of(cols, held.name, i);
      picked_log += std::log(time_of(cols, held.name, i) / best_t);
      std::printf(" %s | %s | %s |", cols[best].first.c_str(), mark(held).c_str(),
                  mark(cm).c_str());
      auto count = [&](const std::string& name, const Pick& p) {
        tally[name].total++;
        tally[name].hits += within(p);
      };
      if (from_other_run) {
        const Pick o = pick_of(*from_other_run, m, s, hierarchy_sizes);
        other_total += time_of(cols, o.name, i);
        other_log += std::log(time_of(cols, o.name, i) / best_t);
        std::printf(" %s |", mark(o).c_str());
        count("table from the other run (all its sizes)", o);
      }
      std::printf("\n");
      for (size_t r = 0; r < readings.size(); ++r)
        count("table, " + readings[r].describe() + (r == 0 ? " (in use), held out" : ", held out"),
              r == 0 ? held : pick_of(halves[r][i % 2], m, s, hierarchy_sizes));
      count("cost model alone (default constants)", pick_of(model, m, s, hierarchy_sizes));
      if (calibrated) count("cost model alone (calibrated at creation)", cm);
      count("first row (ring), no dispatcher",
            {std::string(algorithms::first_row(m.collective).name)});
    }
    // The sweep's total time: the held-out picks against every single algorithm.
    char line[160];
    std::snprintf(line, sizeof line, "| %s | %d | %.0f |",
                  std::string(algorithms::to_string(m.collective)).c_str(), m.world,
                  picked_total * 1e6);
    totals += line;
    if (other_run) {
      std::snprintf(line, sizeof line, " %.0f |", other_total * 1e6);
      totals += line;
    }
    size_t fastest = 0;
    for (size_t a = 0; a < cols.size(); ++a) {
      if (row_total[a] < row_total[fastest]) fastest = a;
    }
    std::snprintf(line, sizeof line, " %s %.0f | %.2fx |", cols[fastest].first.c_str(),
                  row_total[fastest] * 1e6, row_total[fastest] / picked_total);
    totals += line;
    if (other_run) {
      std::snprintf(line, sizeof line, " %.2fx |", row_total[fastest] / other_total);
      totals += line;
    }
    totals += "\n";
    // The mean excess over the best, per size alike (geometric): picks against the best single row.
    const double k = static_cast<double>(m.sizes.size());
    const size_t steadiest =
        static_cast<size_t>(std::min_element(row_log.begin(), row_log.end()) - row_log.begin());
    auto pct = [&](double sum_log) { return (std::exp(sum_log / k) - 1) * 100; };
    std::snprintf(line, sizeof line, "| %s | %d | %+.1f%% |",
                  std::string(algorithms::to_string(m.collective)).c_str(), m.world,
                  pct(picked_log));
    excess += line;
    if (other_run) {
      std::snprintf(line, sizeof line, " %+.1f%% |", pct(other_log));
      excess += line;
    }
    std::snprintf(line, sizeof line, " %s %+.1f%% |\n", cols[steadiest].first.c_str(),
                  pct(row_log[steadiest]));
    excess += line;
  }
  std::printf(
      "\n* = outside the sizes of the dispatcher's table: the nearest size's ranking (no table: "
      "the cost "
      "model).\n\nHeld-out accuracy (pick within 10%% of "
      "the best measured time at that size):\n\n| model | within 10%% |\n|---|---:|\n");
  for (const auto& [name, t] : tally)
    std::printf("| %s | %d / %d (%.0f%%) |\n", name.c_str(), t.hits, t.total,
                t.total ? 100.0 * t.hits / t.total : 0.0);
  std::printf(
      "\nTotal time over each table's sizes (microseconds): the picks against the best single "
      "algorithm "
      "(>1x: the picks are faster):\n\n| collective | world | held-out picks |%s best single "
      "algorithm | "
      "its total / held-out picks' |%s\n|---|---:|---:|%s---|---:|%s\n%s",
      other_run ? " other run's picks |" : "", other_run ? " its total / other run's picks' |" : "",
      other_run ? "---:|" : "", other_run ? "---:|" : "", totals.c_str());
  std::printf(
      "\nMean excess over the best time at each size (geometric mean of time / best, every size "
      "weighing alike):\n\n| collective | world | held-out picks |%s best single algorithm |\n"
      "|---|---:|---:|%s---|\n%s",
      other_run ? " other run's picks |" : "", other_run ? "---:|" : "", excess.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "shoal-tune: measure every algorithm per collective and size; write a tuning file "
      "(SHOAL_TUNE_FILE)"};
  std::string out = "shoal-tune.json", sizes_list, report_path, min_size = "1K", max_size = "16M";
  int factor = 2, iters = 10, warmup = 2, rounds = 2;
  bool append = false;
  app.add_option("-o,--output", out, "tuning file rank 0 writes")->capture_default_str();
  app.add_flag("--append", append,
               "keep the file's tables for other worlds, ranks per host or transports");
  app.add_option("-b,--min-bytes", min_size, "smallest size (bytes as the cost models count them)")
      ->capture_default_str();
  app.add_option("-e,--max-bytes", max_size, "largest size")->capture_default_str();
  app.add_option("-f,--factor", factor, "multiplication factor between sizes")
      ->capture_default_str()
      ->check(CLI::Range(2, 1024));
  app.add_option("--sizes", sizes_list, "explicit sizes instead of -b/-e/-f (8,1K,1M,...)");
  std::vector<int> worlds;
  app.add_option(
         "--worlds", worlds,
         "worlds to tune, each on the job's first ranks (2,3,4,6,...; default: the job's size)")
      ->delimiter(',');
  app.add_option("-n,--iters", iters, "timed calls per point (fewer above 256K)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("-w,--warmup", warmup, "untimed calls per point")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  app.add_option("--rounds", rounds, "interleaved rounds per size; the fastest counts")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  std::string picks_from;
  app.add_option("--report", report_path,
                 "print a tuning file's tables and held-out accuracy (no job)");
  int report_cores = -1;
  app.add_option("--cores", report_cores,
                 "with --report: the cores per host the cost model assumes (0: a core per rank; "
                 "default: each "
                 "table's cores_per_host)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--picks-from", picks_from,
                 "with --report: also judge the picks of this tuning file (another run) on the "
                 "report's times");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!report_path.empty()) return report(report_path, picks_from, report_cores);
    std::vector<uint64_t> sizes;
    if (!sizes_list.empty()) {
      sizes = parse_sizes(sizes_list);
    } else {
      const uint64_t lo = config::parse_bytes(min_size, "--min-bytes"),
                     hi = config::parse_bytes(max_size, "--max-bytes");
      for (uint64_t s = std::max<uint64_t>(lo, 1); s <= hi; s *= static_cast<uint64_t>(factor))
        sizes.push_back(s);
    }
    if (sizes.empty()) {
      std::fprintf(stderr, "shoal-tune: no sizes\n");
      return 2;
    }
    std::string command;
    for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
    comm::SweepOptions options;
    options.sizes = sizes;
    options.worlds = worlds;
    options.iters = iters;
    options.warmup = warmup;
    options.rounds = rounds;
    return sweep(out, options, append, command);
  } catch (const Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "shoal-tune: %s error: %s\n", std::string(to_string(e.code())).c_str(),
                 e.what());
    std::fflush(stderr);
    std::_Exit(1);  // the peers see this rank go and fail in turn
  }
}
