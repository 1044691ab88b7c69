// shoal-sim: runs shoal's own schedules in virtual time on a modelled cluster (docs/scale.md).
//   shoal-sim run --collective all_reduce --algo all --world 4096 --ranks-per-host 8 --nics 4
//       --nic-gbps 200 --latency-us 2 --sizes 1M:1G:4 [--taper 2 --hosts-per-leaf 16]
//   shoal-sim calibrate [--algo NAME] [-o model.json] FILE[@ALGO]...
//   shoal-sim tune [model flags] --worlds 64,256,1024 --sizes 1K:256M:4 [--merge measured.json] -o
//   FILE
// The model starts from built-in defaults, then SHOAL_SIM_MODEL or --model (JSON, as calibrate
// writes it), then the flags given on the command line.
// GCC 12's -Wrestrict misfires in CLI11's formatter when it is inlined here (GCC bug 105329).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wrestrict"
#include <CLI/CLI.hpp>
#pragma GCC diagnostic pop
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/hierarchy.hpp"
#include "algorithms/registry.hpp"
#include "core/config.hpp"
#include "shoal/error.hpp"
#include "sim/calibrate.hpp"
#include "sim/executor.hpp"
#include "sim/model.hpp"
#include "sim/tables.hpp"
#include "tune/links.hpp"
#include "tune/tuning_file.hpp"

namespace {

using namespace shoal;
using algorithms::Collective;

// The items of `text` between separators (empty ones included).
std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, sep);) out.push_back(item);
  return out;
}

// "1M:1G:4" (min:max:factor) or "1K,64K,1M".
std::vector<uint64_t> parse_sizes(const std::string& text) {
  std::vector<uint64_t> out;
  if (text.find(':') != std::string::npos) {
    const std::vector<std::string> parts = split(text, ':');
    if (parts.size() != 3)
      throw InvalidArgumentError("--sizes: expected MIN:MAX:FACTOR, e.g. 1M:1G:4");
    const uint64_t lo = config::parse_bytes(parts[0], "--sizes"),
                   hi = config::parse_bytes(parts[1], "--sizes");
    const uint64_t f = std::stoull(parts[2]);
    if (lo == 0 || f < 2 || lo > hi)
      throw InvalidArgumentError("--sizes: need 0 < MIN <= MAX and FACTOR >= 2");
    for (uint64_t s = lo; s <= hi; s *= f) out.push_back(s);
  } else {
    for (const std::string& item : split(text, ','))
      if (!item.empty()) out.push_back(config::parse_bytes(item, "--sizes"));
  }
  return out;
}

Collective parse_collective(const std::string& name) {
  for (int c = 0; c <= static_cast<int>(Collective::all_to_all); ++c)
    if (algorithms::to_string(static_cast<Collective>(c)) == name)
      return static_cast<Collective>(c);
  throw InvalidArgumentError("--collective: unknown '" + name + "'");
}

// The model options `run` and `tune` share: built-in defaults or --frontier, then --model or
// SHOAL_SIM_MODEL, then single fields.
struct ModelFlags {
  std::string path, wan_spec;
  bool frontier = false;
  int rph = 0, nics = 0, hosts_per_leaf = -1, stripe = -1;
  bool alternate_leaves = false;
  uint64_t nic_burst_bytes = 0;
  double nic_gbps = 0, nic_burst_gbps = 0, latency_us = 0, intra_gbps = 0, intra_flow_gbps = 0,
         intra_latency_us = 0, reduce_gbps = 0, copy_gbps = 0, overhead_us = 0, taper = 0;
  CLI::App* app = nullptr;

  void add_to(CLI::App* sub) {
    app = sub;
    sub->add_option("--model", path,
                    "model JSON (default: SHOAL_SIM_MODEL); flags below override it");
    sub->add_flag("--frontier", frontier,
                  "start from the Frontier-like model (8 ranks, 4 NICs of 25 GB/s per node)");
    sub->add_option("--wan-spec", wan_spec,
                    "the emulated WAN of this spec (`scripts/netcluster.sh spec --layout "
                    "continents` prints one): its hosts' NICs and rates, regions, delays and lines "
                    "between regions; the flags below override it");
    sub->add_option("--ranks-per-host", rph, "ranks per host");
    sub->add_option("--nics", nics,
                    "NICs per host (local rank i uses NIC i mod nics, unless --stripe 1)");
    sub->add_option(
           "--stripe", stripe,
           "1: a flow between hosts uses every NIC of both (shoal's multi-rail TCP); 0: the local "
           "rank's NIC only (NCCL's and PCCL's rails)")
        ->check(CLI::Range(0, 1));
    sub->add_option("--nic-gbps", nic_gbps, "Gbit/s per NIC and direction");
    sub->add_option("--nic-burst-bytes", nic_burst_bytes,
                    "token bucket per NIC and direction, refilled at --nic-gbps (tc tbf; a cloud "
                    "VM's burst): bytes");
    sub->add_option("--nic-burst-gbps", nic_burst_gbps,
                    "Gbit/s of a NIC while its bucket holds tokens");
    sub->add_option("--latency-us", latency_us, "latency between hosts (us)");
    sub->add_option("--intra-gbps", intra_gbps,
                    "GB/s (bytes) of a host's memory bus, shared by its local transfers");
    sub->add_option("--intra-flow-gbps", intra_flow_gbps,
                    "GB/s cap of one local transfer (0: none)");
    sub->add_option("--intra-latency-us", intra_latency_us, "latency inside a host (us)");
    sub->add_option("--overhead-us", overhead_us,
                    "CPU time per message on sender and receiver (us)");
    sub->add_option("--reduce-gbps", reduce_gbps, "GB/s of reduction on one rank");
    sub->add_option("--copy-gbps", copy_gbps, "GB/s of local copies on one rank");
    sub->add_option("--hosts-per-leaf", hosts_per_leaf,
                    "hosts under a leaf switch (0: full bisection)");
    sub->add_option("--taper", taper,
                    "core taper of the fat tree (needs --hosts-per-leaf; default 16 hosts)");
    sub->add_flag("--alternate-leaves", alternate_leaves,
                  "host h under leaf h mod leaves (a launcher that knows nothing of the tree); "
                  "default: in blocks of --hosts-per-leaf");
  }

  sim::ClusterModel build() const {
    sim::ClusterModel model = frontier ? sim::frontier_model() : sim::ClusterModel{};
    std::string file = path;
    if (file.empty()) file = config::get("SHOAL_SIM_MODEL");
    if (!file.empty()) model = sim::load_model(file, model);
    if (!wan_spec.empty()) model = sim::load_wan_model(wan_spec, model);
    if (app->count("--ranks-per-host")) model.ranks_per_host = rph;
    if (app->count("--nics")) model.nics = nics;
    if (app->count("--stripe")) model.stripe = stripe;
    if (app->count("--nic-gbps")) model.nic_bw = nic_gbps * 1e9 / 8;
    if (app->count("--nic-burst-bytes")) model.nic_burst_bytes = nic_burst_bytes;
    if (app->count("--nic-burst-gbps")) model.nic_burst_bw = nic_burst_gbps * 1e9 / 8;
    if (app->count("--latency-us")) model.nic_latency = latency_us * 1e-6;
    if (app->count("--intra-gbps")) model.intra_bw = intra_gbps * 1e9;
    if (app->count("--intra-flow-gbps")) model.intra_flow_bw = intra_flow_gbps * 1e9;
    if (app->count("--intra-latency-us")) model.intra_latency = intra_latency_us * 1e-6;
    if (app->count("--overhead-us")) model.overhead = overhead_us * 1e-6;
    if (app->count("--reduce-gbps")) model.reduce_cost = 1.0 / (reduce_gbps * 1e9);
    if (app->count("--copy-gbps")) model.copy_cost = 1.0 / (copy_gbps * 1e9);
    if (hosts_per_leaf >= 0) model.hosts_per_leaf = hosts_per_leaf;
    if (app->count("--taper")) {
      model.taper = taper;
      if (model.hosts_per_leaf == 0) model.hosts_per_leaf = 16;
    }
    if (alternate_leaves) model.alternate_leaves = 1;
    if (model.ranks_per_host < 1 || model.nics < 1 || model.nic_bw <= 0 || model.taper <= 0)
      throw InvalidArgumentError("ranks per host, NICs, NIC bandwidth and taper must be positive");
    sim::check_model(model);
    return model;
  }
};

// Every row of `coll` ("all" or "flat") or the one named `algo`.
std::vector<const algorithms::AlgorithmInfo*> rows_of(Collective coll, const std::string& algo) {
  std::vector<const algorithms::AlgorithmInfo*> rows;
  const bool every = algo == "all" || algo == "flat";
  for (const auto& row : algorithms::registry())
    if (row.collective == coll && (every || row.name == algo)) rows.push_back(&row);
  if (rows.empty())
    throw InvalidArgumentError("--algo: " + std::string(algorithms::to_string(coll)) +
                               " has no algorithm '" + algo + "'");
  return rows;
}

// What `run` simulates: a registry row or a hierarchical composition of rows.
struct Candidate {
  std::string name;
  sim::Builder build;
  // A row whose schedule is this earlier candidate's (link_ring where the links give rank
  // order, all_gather's compositions): its results are that one's, not simulated again.
  std::string same_as{};
};

// The builder of `row`; a row that follows links runs in `ring_order` (links.hpp).
sim::Builder builder_of(const algorithms::AlgorithmInfo* row,
                        std::shared_ptr<const std::vector<int>> ring_order) {
  if (!row->follows_links) return sim::Builder(row->build);
  return [row, ring_order](algorithms::Schedule& s, const algorithms::CollectiveArgs& a) {
    algorithms::CollectiveArgs with = a;
    with.ring_order = ring_order.get();
    row->build(s, with);
  };
}

// `algo`: a row, "hier(LOCAL+INTER)", "flat" — every row — or "all" — every row and, when the
// world spans several hosts of ranks_per_host ranks, hier(ring+X) for every row X of the
// collective. Rows that follow links go around `ring_order`.
std::vector<Candidate> candidates_of(Collective coll, const std::string& algo, int world,
                                     int ranks_per_host,
                                     std::shared_ptr<const std::vector<int>> ring_order) {
  std::vector<Candidate> out;
  if (algo.starts_with("hier(") && algo.ends_with(")")) {
    const std::string inner = algo.substr(5, algo.size() - 6);
    const auto plus = inner.find('+');
    if (plus == std::string::npos)
      throw InvalidArgumentError("--algo: expected hier(LOCAL+INTER), got " + algo);
    // The names must outlive the plan (it keeps views): take them from the registry.
    const auto* local = algorithms::find_algorithm(Collective::all_gather, inner.substr(0, plus));
    const auto* inter = algorithms::find_algorithm(coll, inner.substr(plus + 1));
    if (!local || !algorithms::find_algorithm(Collective::reduce_scatter, local->name))
      throw InvalidArgumentError("--algo " + algo +
                                 ": the local phase needs a row of all_gather and reduce_scatter");
    if (!inter)
      throw InvalidArgumentError("--algo " + algo + ": " +
                                 std::string(algorithms::to_string(coll)) + " has no algorithm '" +
                                 inner.substr(plus + 1) + "'");
    const algorithms::HierarchyPlan plan{ranks_per_host, local->name, inter->name};
    out.push_back({algorithms::hierarchy_name(plan), sim::hierarchical_builder(plan)});
    return out;
  }
  bool rank_order = !ring_order;
  if (ring_order) {
    rank_order = true;
    for (size_t i = 0; i < ring_order->size(); ++i)
      rank_order = rank_order && (*ring_order)[i] == static_cast<int>(i);
  }
  for (const auto* row : rows_of(coll, algo)) {
    out.push_back({std::string(row->name), builder_of(row, ring_order)});
    if (row->follows_links && rank_order && algo != row->name) out.back().same_as = "ring";
  }
  std::string first_hierarchy;
  if (algo == "all" && sim::hierarchy_fits(coll, world, ranks_per_host))
    for (const auto* row : rows_of(coll, "all")) {
      if (row->follows_links) continue;  // the inter-host groups measure no links
      const algorithms::HierarchyPlan plan{ranks_per_host, "ring", row->name};
      out.push_back({algorithms::hierarchy_name(plan), sim::hierarchical_builder(plan)});
      if (!algorithms::runs_inter_row(coll) && !first_hierarchy.empty())
        out.back().same_as = first_hierarchy;
      if (first_hierarchy.empty()) first_hierarchy = out.back().name;
    }
  return out;
}

// GB/s of a seconds-per-byte constant (0 for none).
double gbps(double seconds_per_byte) {
  return seconds_per_byte > 0 ? 1e-9 / seconds_per_byte : 0.0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "shoal-sim: shoal's schedules in virtual time on a modelled cluster (docs/scale.md)"};
  app.require_subcommand(1);

  // ---- run ----
  auto* run = app.add_subcommand("run", "predict the time of a collective per algorithm and size");
  std::string coll_name = "all_reduce", algo = "all", sizes_text = "1M:1G:4",
              dtype_name = "float32", json_out;
  int world = 8, threads = 0;
  uint64_t chunk = 512 << 10;
  ModelFlags run_model;
  run->add_option("--collective,-c", coll_name,
                  "all_reduce, all_gather, reduce_scatter, broadcast, reduce, ...");
  run->add_option("--algo,-a", algo,
                  "a registry row, 'hier(LOCAL+INTER)', 'flat' (every row of the collective) or "
                  "'all' (every row and, across hosts, every hier(ring+X))");
  run->add_option("--world,-p", world, "number of ranks")->check(CLI::Range(1, 1 << 20));
  run->add_option("--sizes,-s", sizes_text,
                  "MIN:MAX:FACTOR or a list (nccl-tests sizes: bytes of the vector, "
                  "the all_gather output, the reduce_scatter input)");
  run->add_option("--dtype", dtype_name, "element type (its size sets element alignment)");
  run->add_option("--chunk", chunk, "pipeline chunk in bytes (SHOAL_CHUNK_BYTES)");
  run_model.add_to(run);
  run->add_option("--threads", threads, "schedule builders at once (0: every core)");
  run->add_option("--json", json_out, "also write every line to this JSON file");

  // ---- calibrate ----
  auto* cal = app.add_subcommand("calibrate",
                                 "fit latency, bandwidth and reduction cost to shoal-bench files");
  std::vector<std::string> files;
  std::string cal_algo, cal_out, cal_base;
  int iterations = 8;
  cal->add_option("files", files,
                  "shoal-bench output (table or --json); FILE@ALGO names the --algo it ran")
      ->required();
  cal->add_option("--algo", cal_algo,
                  "the algorithm of files without @ALGO (default: the first row)");
  cal->add_option("--model", cal_base, "model to start from (its other fields are kept)");
  cal->add_option("-o,--output", cal_out, "write the fitted model here (JSON)");
  cal->add_option("--iterations", iterations, "Gauss-Newton iterations");
  int cal_cores = 0;
  cal->add_option(
         "--cores", cal_cores,
         "CPU cores the measured ranks shared (one machine; 0: a core per rank): on one host a "
         "point of "
         "p > cores ranks takes its time on a core per rank plus every rank's CPU work over the "
         "cores; "
         "across hosts its CPU and memory costs max(1, p/cores) times the model's (the network's "
         "bandwidth excepted)")
      ->check(CLI::Range(0, 1 << 20));

  // ---- tune ----
  auto* tune_cmd = app.add_subcommand(
      "tune",
      "write the simulator's predictions as tuning-file tables for worlds larger than measured");
  std::string tune_colls = "all_reduce,all_gather,reduce_scatter",
              tune_worlds = "32,64,128,256,512,1024", tune_sizes = "1K:256M:4", tune_out,
              tune_merge;
  int tune_threads = 0;
  uint64_t tune_chunk = 512 << 10;
  ModelFlags tune_model;
  tune_cmd->add_option("--collectives", tune_colls, "comma-separated collectives");
  tune_cmd->add_option("--worlds", tune_worlds, "comma-separated world sizes");
  tune_cmd->add_option("--sizes,-s", tune_sizes,
                       "MIN:MAX:FACTOR or a list (as shoal-tune's sizes)");
  tune_cmd->add_option("--chunk", tune_chunk, "pipeline chunk in bytes (SHOAL_CHUNK_BYTES)");
  tune_cmd->add_option("--merge", tune_merge,
                       "a measured tuning file (shoal-tune) to add the tables to");
  tune_cmd->add_option("-o,--output", tune_out, "the tuning file to write (SHOAL_TUNE_FILE)")
      ->required();
  tune_cmd->add_option("--threads", tune_threads, "schedule builders at once (0: every core)");
  bool tune_flat_only = false;
  tune_cmd->add_flag(
      "--no-hierarchical", tune_flat_only,
      "do not predict the hierarchy across hosts (the 'hierarchical' column, the best "
      "hier(ring+X)): about half the time");
  tune_model.add_to(tune_cmd);

  CLI11_PARSE(app, argc, argv);
  try {
    if (*cal) {
      sim::ClusterModel model = cal_base.empty() ? sim::ClusterModel{} : sim::load_model(cal_base);
      std::vector<sim::Measurement> points;
      for (const auto& f : files) {
        std::string path = f, a = cal_algo;
        if (auto at = f.rfind('@'); at != std::string::npos) {
          path = f.substr(0, at);
          a = f.substr(at + 1);
        }
        auto more = sim::read_bench_file(path, a);
        points.insert(points.end(), more.begin(), more.end());
      }
      const size_t read = points.size();
      points = sim::best_of_repeats(points);
      if (points.size() < read)
        std::printf("# %zu measurements, %zu points: repeated runs give their least time\n", read,
                    points.size());
      auto fits = sim::calibrate(points, model, iterations, cal_cores);
      nlohmann::ordered_json doc;
      doc["model"] = nlohmann::json::parse(sim::to_json(model));
      doc["fits"] = nlohmann::json::array();
      for (const auto& fit : fits)
        doc["fits"].push_back({{"transport", fit.transport},
                               {"latency_us", fit.latency * 1e6},
                               {"bandwidth_GBps", gbps(fit.seconds_per_byte)},
                               {"reduce_GBps", gbps(fit.reduce_cost)},
                               {"copy_GBps", gbps(fit.copy_cost)},
                               {"points", fit.points},
                               {"outliers", fit.outliers},
                               {"median_error", fit.median_error},
                               {"max_error", fit.max_error}});
      doc["points"] = nlohmann::json::array();
      std::printf("# %-14s %-18s %-9s %5s %12s %12s %12s %7s\n", "collective", "algorithm",
                  "transport", "ranks", "size", "measured_us", "predicted_us", "error");
      for (const auto& m : points) {
        const double err = (m.predicted - m.seconds) / m.seconds;
        std::printf("  %-14s %-18s %-9s %5d %12llu %12.2f %12.2f %+6.1f%%\n",
                    std::string(algorithms::to_string(m.collective)).c_str(), m.algorithm.c_str(),
                    m.transport.c_str(), m.ranks, static_cast<unsigned long long>(m.size),
                    m.seconds * 1e6, m.predicted * 1e6, err * 100);
        doc["points"].push_back({{"file", m.file},
                                 {"collective", std::string(algorithms::to_string(m.collective))},
                                 {"algorithm", m.algorithm},
                                 {"transport", m.transport},
                                 {"ranks", m.ranks},
                                 {"size", m.size},
                                 {"measured_us", m.seconds * 1e6},
                                 {"predicted_us", m.predicted * 1e6},
                                 {"error", err}});
      }
      for (const auto& fit : fits)
        std::printf(
            "# %s: latency %.2f us, bandwidth %.3f GB/s, reduction %.3f GB/s, copy %.3f GB/s; %d "
            "points (%d "
            "left out of the fit), median error %.1f%%, max %.1f%% (over all points)\n",
            fit.transport.c_str(), fit.latency * 1e6, gbps(fit.seconds_per_byte),
            gbps(fit.reduce_cost), gbps(fit.copy_cost), fit.points, fit.outliers,
            fit.median_error * 100, fit.max_error * 100);
      const std::string text = doc.dump(2);
      if (!cal_out.empty()) {
        std::ofstream f(cal_out);
        f << text << "\n";
        if (!f) throw InvalidArgumentError("cannot write " + cal_out);
        std::printf("# model written to %s (use: --model %s or SHOAL_SIM_MODEL)\n", cal_out.c_str(),
                    cal_out.c_str());
      } else {
        std::printf("%s\n", text.c_str());
      }
      return 0;
    }

    if (*tune_cmd) {
      sim::ClusterModel model = tune_model.build();
      // The tables are for shoal's runtime, which stripes every pair's stream over all NICs.
      if (!tune_model.app->count("--stripe")) model.stripe = 1;
      // The measured file's tables, and its other top-level fields (host, command, date) kept.
      tune::TuningFile file;
      nlohmann::json extra = nlohmann::json::object();
      if (!tune_merge.empty()) {
        std::ifstream in(tune_merge, std::ios::binary);
        if (!in)
          throw InvalidArgumentError("--merge: tuning file '" + tune_merge + "' cannot be read");
        const std::string text{std::istreambuf_iterator<char>(in),
                               std::istreambuf_iterator<char>()};
        file = tune::parse_tuning_file(text, tune_merge);  // checks it
        extra = nlohmann::json::parse(text);
        extra.erase("tables");
      }
      const auto sizes = parse_sizes(tune_sizes);
      std::vector<Collective> colls;
      for (const std::string& c : split(tune_colls, ','))
        if (!c.empty()) colls.push_back(parse_collective(c));
      std::vector<int> worlds;
      for (const std::string& w : split(tune_worlds, ','))
        if (!w.empty()) worlds.push_back(std::stoi(w));
      std::printf(
          "# shoal-sim tune: %zu collectives x %zu worlds x %zu sizes, %d ranks and %d NICs of "
          "%.2f GB/s per "
          "host, %.2f us\n",
          colls.size(), worlds.size(), sizes.size(), model.ranks_per_host, model.nics,
          model.nic_bw * 1e-9, model.nic_latency * 1e6);
      sim::TableOptions options;
      options.collectives = colls;
      options.worlds = worlds;
      options.sizes = sizes;
      options.chunk_bytes = tune_chunk;
      options.threads = tune_threads;
      options.with_hierarchy = !tune_flat_only;
      options.progress = [](const std::string& line) {
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
      };
      sim::predict_tuning_tables(model, options, file);
      extra["simulated_with"] = nlohmann::json::parse(sim::to_json(model));
      std::ofstream f(tune_out);
      f << tune::to_json(file, extra.dump()) << "\n";
      if (!f) throw InvalidArgumentError("cannot write " + tune_out);
      std::printf("# tuning file written to %s (use: SHOAL_TUNE_FILE=%s)\n", tune_out.c_str(),
                  tune_out.c_str());
      return 0;
    }

    // run
    const sim::ClusterModel model = run_model.build();
    const Collective coll = parse_collective(coll_name);
    const auto dtype = parse_data_type(dtype_name);
    if (!dtype) throw InvalidArgumentError("--dtype: unknown '" + dtype_name + "'");
    // The order the model's links give (the rates each pair has alone, as measure_links finds
    // them); rank order beyond 1,024 ranks, whose p x p rates this does not build.
    std::shared_ptr<const std::vector<int>> ring_order;
    if (world >= 2 && world <= 1024)
      ring_order = std::make_shared<const std::vector<int>>(tune::ring_order(
          {world, sim::pair_rates(model, world), sim::pair_latencies(model, world)}));
    const auto candidates = candidates_of(coll, algo, world, model.ranks_per_host, ring_order);
    const auto sizes = parse_sizes(sizes_text);
    const int hosts = (world + model.ranks_per_host - 1) / model.ranks_per_host;
    std::printf(
        "# shoal-sim %s: %d ranks (%d hosts x %d, %d NICs x %.1f GB/s, %.2f us; local %.0f GB/s, "
        "%.2f us",
        coll_name.c_str(), world, hosts, model.ranks_per_host, model.nics, model.nic_bw * 1e-9,
        model.nic_latency * 1e6, model.intra_bw * 1e-9, model.intra_latency * 1e6);
    if (model.hosts_per_leaf > 0)
      std::printf("; fat tree %d hosts/leaf%s, taper %.2f", model.hosts_per_leaf,
                  model.alternate_leaves ? " (alternating)" : "", model.taper);
    if (!model.paths.empty()) {
      std::printf("; %d regions, one way", model.regions);
      for (int a = 0; a < model.regions; ++a)
        for (int b = 0; b < model.regions; ++b) {
          const auto& path = model.paths[static_cast<size_t>(a * model.regions + b)];
          if (a == b && path.delay == 0) continue;
          std::printf(" %d-%d %.1f ms", a, b, path.delay * 1e3);
          if (path.bw > 0) std::printf(" %.0f Mbit/s", path.bw * 8e-6);
        }
    }
    std::printf("), dtype %s, chunk %llu B\n", dtype_name.c_str(),
                static_cast<unsigned long long>(chunk));
    std::printf("# %-29s %12s %12s %8s %6s %12s %8s %8s %10s %8s\n", "algorithm", "size", "count",
                "type", "redop", "time(us)", "algbw", "busbw", "steps", "wall(s)");
    nlohmann::json lines = nlohmann::json::array();
    int rc = 0;
    struct Done {
      sim::SimResult res;
      size_t steps = 0;
    };
    std::map<std::pair<std::string, uint64_t>, Done> done;  // for the candidates' same_as
    for (const auto& cand : candidates)
      for (uint64_t size : sizes) {
        auto a = sim::args_for(coll, size, world, *dtype);
        a.chunk_bytes = chunk;
        sim::Programs prog;
        sim::SimResult res;
        size_t steps = 0;
        if (auto it = done.find({cand.same_as, size}); !cand.same_as.empty() && it != done.end()) {
          res = it->second.res;
          res.run_seconds = 0;
          steps = it->second.steps;
        } else {
          try {
            prog = sim::compile(a, cand.build, threads);
            res = sim::simulate(prog, model);
          } catch (const InvalidArgumentError& e) {  // a composition that does not fit this call
            res.error = e.what();
          }
          steps = prog.steps();
          done[{cand.name, size}] = {res, steps};
        }
        const double wall = prog.build_seconds + res.run_seconds;
        if (!res.error.empty()) {
          std::printf("  %-29s %12llu  error: %s\n", cand.name.c_str(),
                      static_cast<unsigned long long>(size), res.error.c_str());
          rc = 1;
          continue;
        }
        const double algbw = res.time > 0 ? size / res.time * 1e-9 : 0,
                     busbw = algbw * sim::bus_factor(coll, world);
        std::printf("  %-29s %12llu %12llu %8s %6s %12.2f %8.2f %8.2f %10zu %8.2f\n",
                    cand.name.c_str(), static_cast<unsigned long long>(size),
                    static_cast<unsigned long long>(a.count), dtype_name.c_str(),
                    coll == Collective::all_gather ? "none" : "sum", res.time * 1e6, algbw, busbw,
                    steps, wall);
        std::fflush(stdout);
        lines.push_back({{"algorithm", cand.name},
                         {"size", size},
                         {"count", a.count},
                         {"time_us", res.time * 1e6},
                         {"algbw", algbw},
                         {"busbw", busbw},
                         {"steps", steps},
                         {"messages", res.messages},
                         {"build_s", prog.build_seconds},
                         {"sim_s", res.run_seconds}});
      }
    if (!json_out.empty()) {
      nlohmann::ordered_json doc;
      doc["tool"] = "shoal-sim";
      doc["collective"] = coll_name;
      doc["world"] = world;
      doc["model"] = nlohmann::json::parse(sim::to_json(model));
      doc["rows"] = lines;
      std::ofstream f(json_out);
      f << doc.dump(2) << "\n";
      if (!f) throw InvalidArgumentError("cannot write " + json_out);
    }
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shoal-sim: %s\n", e.what());
    return 2;
  }
}
