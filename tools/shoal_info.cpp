// shoal-info: what this build has (settings, algorithms) and, with --check under a launcher,
// whether the ranks of a job can rendezvous and reduce together.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "algorithms/hierarchy.hpp"
#include "algorithms/registry.hpp"
#include "comm/flat_memory.hpp"
#include "comm/plan.hpp"
#include "comm/request.hpp"
#include "comm/topology.hpp"
#include "core/check.hpp"
#include "core/config.hpp"
#include "shoal/shoal.hpp"
#include "store/bootstrap.hpp"
#include "tune/dispatcher.hpp"
#include "tune/learned_file.hpp"

using namespace shoal;

static void print_settings() {
  std::printf("# settings (environment variables)\n");
  std::printf("%-24s %-10s %-12s %s\n", "name", "value", "default", "meaning");
  for (const auto& s : config::settings()) {
    const char* v = std::getenv(s.name);
    std::printf("%-24s %-10s %-12s %s\n", s.name, v ? v : "-",
                *s.default_value ? s.default_value : "\"\"", s.doc);
  }
}

static void print_algorithms() {
  std::printf("# algorithms\n");
  std::printf(
      "# SHOAL_ALGO=collective:name forces a row; else the dispatcher picks (below); "
      "SHOAL_DISPATCH=off: the first row\n");
  std::printf("%-15s %-19s %-50s %s\n", "collective", "algorithm", "constraints", "description");
  for (const auto& a : algorithms::registry())
    std::printf("%-15s %-19s %-50s %s\n", std::string(algorithms::to_string(a.collective)).c_str(),
                std::string(a.name).c_str(), std::string(a.constraints).c_str(),
                std::string(a.description).c_str());
  std::printf(
      "\n# paths beside the rows (the planner, comm/plan.hpp): SHOAL_ALGO=collective:path and "
      "CallOptions name them like a row\n");
  for (const auto& path : algorithms::paths()) {
    std::string serves;
    for (const auto c : path.collectives) {
      if (!serves.empty()) serves += ',';
      serves += algorithms::to_string(c);
    }
    std::printf("%s\n  serves:      %s\n  needs:       %s\n  what:        %s\n  priced by:   %s\n",
                std::string(path.name).c_str(), serves.c_str(),
                std::string(path.constraints).c_str(), std::string(path.description).c_str(),
                std::string(path.cost).c_str());
  }
}

// Which row the dispatcher takes per collective and size for a job of `ctx` (SHOAL_TUNE_FILE,
// SHOAL_DISPATCH and SHOAL_TUNE_* as set here; SHOAL_ALGO rules shown where they win).
static void print_dispatch(const tune::Context& ctx, const std::string& size_list) {
  std::vector<uint64_t> sizes;
  std::stringstream ss(size_list);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) sizes.push_back(config::parse_bytes(item, "--sizes"));
  const tune::Dispatcher d = tune::Dispatcher::from_environment(ctx);
  const auto& c = d.params();
  std::printf(
      "\n# the dispatcher's choice for %d ranks, %d per host on %d cores, over %s "
      "(SHOAL_DISPATCH=%s, "
      "SHOAL_TUNE_FILE=%s, read %s; cost model alpha %.3g s, beta %.3g s/B, gamma %.3g s/B, busy "
      "gamma %.3g s/B)\n",
      ctx.world, ctx.ranks_per_host, ctx.cores_per_host,
      std::string(tune::to_string(ctx.transport)).c_str(), d.enabled() ? "on" : "off",
      config::get("SHOAL_TUNE_FILE").empty() ? "-" : config::get("SHOAL_TUNE_FILE").c_str(),
      d.reading().describe().c_str(), c.alpha, c.beta, c.gamma, c.busy_gamma);
  std::printf(
      "# bytes as the cost models count them: all_reduce the vector, all_gather the gathered "
      "output, "
      "reduce_scatter the input\n");
  // Whether SHOAL_HIERARCHICAL takes the two-level path (comm/hierarchical.cpp: several hosts of
  // the same number >1 of ranks), and why; "-" where the layout has no hierarchy.
  const std::string mode = config::get("SHOAL_HIERARCHICAL");
  const auto hierarchy_sizes = tune::Dispatcher::hierarchy_sizes_from_environment();
  const bool layout = algorithms::hierarchy_fits(ctx.world, ctx.ranks_per_host);
  auto hierarchy = [&](algorithms::Collective coll, uint64_t bytes) -> std::string {
    if (!layout) return "-";
    if (mode != "auto") return mode == "on" ? "yes (on)" : "no (off)";
    if (!config::get("SHOAL_ALGO").empty()) return "no (SHOAL_ALGO)";
    const auto verdict = d.auto_hierarchy(coll, bytes, hierarchy_sizes);
    std::string why(verdict.from);
    if (why == "cost model") {  // with the hierarchy's modelled time, against the flat row's
      char t[64];
      std::snprintf(t, sizeof t, ": %.1f against %.1f us", *d.hierarchy_cost(coll, bytes) * 1e6,
                    *d.flat_cost(coll, bytes) * 1e6);
      why += t;
    }
    return (verdict.take ? "yes (" : "no (") + why + ")";
  };
  // What a call takes (the planner itself, on this layout: comm/plan.hpp): the flat path where
  // every rank shares one host's memory and the call fits, the hierarchy, else a row.
  comm::Planner::Layout planner_layout;
  if (ctx.transport == tune::Transport::shm && ctx.world == ctx.ranks_per_host) {
    // As if every rank could read every other's memory (the probe needs the ranks).
    planner_layout.flat =
        comm::FlatMemory::layout_from_settings(ctx.ranks_per_host, ctx.cores_per_host)
            .limits(/*all_can_pull=*/true);
  }
  planner_layout.hierarchy_fits = layout;
  comm::Planner planner(planner_layout, [&] { return tune::Dispatcher::from_environment(ctx); });
  auto takes = [&](algorithms::Collective coll, uint64_t bytes) -> std::string {
    algorithms::CollectiveArgs a;
    a.collective = coll;
    a.dtype = DataType::float32;
    a.size = ctx.world;
    a.count = (coll == algorithms::Collective::all_reduce ? bytes : bytes / ctx.world) / 4;
    if (a.count == 0) return "-";
    comm::Request r = comm::request_of(coll, nullptr, nullptr, a.count, a.dtype);
    r.may_use_hierarchy = true;
    r.blocking = true;
    const comm::Plan plan = planner.plan(r, a);
    switch (plan.path) {
      case comm::Path::flat:
        return "flat";
      case comm::Path::hierarchy:
        return "hierarchical";
      case comm::Path::schedule:
        break;
    }
    return std::string(plan.args.algorithm->name);
  };
  std::printf("%-15s %12s %-19s %-19s %-12s %-19s %s\n", "collective", "bytes", "algorithm", "from",
              "predicted", "takes (float32)", "hierarchy (auto)");
  for (auto coll : {algorithms::Collective::all_reduce, algorithms::Collective::all_gather,
                    algorithms::Collective::reduce_scatter}) {
    for (uint64_t bytes : sizes) {
      const tune::Choice ch = d.choose(coll, bytes);
      // SHOAL_ALGO ranges count count x element size; all_gather and reduce_scatter's per rank
      const uint64_t rule_bytes =
          coll == algorithms::Collective::all_reduce ? bytes : bytes / ctx.world;
      const algorithms::AlgorithmInfo* forced = algorithms::override_for(coll, rule_bytes);
      char predicted[32] = "-";
      if (ch.predicted_s > 0)
        std::snprintf(predicted, sizeof predicted, "%.1f us", ch.predicted_s * 1e6);
      // A table of another world (the nearest the file has) is named: its picks transfer worse
      // than a table of this world (docs/algorithms.md, "How well it picks").
      std::string from = forced ? "SHOAL_ALGO" : std::string(tune::to_string(ch.source));
      const tune::Measurements* table = d.table_for(coll);
      if (!forced && ch.source == tune::Choice::Source::tuning_file && table &&
          (table->world != ctx.world || table->ranks_per_host != ctx.ranks_per_host))
        from +=
            " (" + std::to_string(table->world) + "x" + std::to_string(table->ranks_per_host) + ")";
      std::printf(
          "%-15s %12llu %-19s %-19s %-12s %-19s %s\n",
          std::string(algorithms::to_string(coll)).c_str(), static_cast<unsigned long long>(bytes),
          std::string(forced ? forced->name : ch.algorithm->name).c_str(), from.c_str(),
          forced ? "-" : predicted, takes(coll, bytes).c_str(), hierarchy(coll, bytes).c_str());
    }
  }
}

static int check() {
  auto info = bootstrap::detect(bootstrap::process_env());
  Communicator comm = Communicator::from_environment();
  std::vector<int64_t> v(1000, comm.rank() + 1);
  comm.all_reduce(std::span<int64_t>(v), ReduceOp::sum);
  const int64_t want = static_cast<int64_t>(comm.size()) * (comm.size() + 1) / 2;
  int64_t bad = 0;
  for (int64_t x : v) bad += x != want;
  comm.barrier();
  std::printf("shoal-info --check: launcher %s, %s: all_reduce %s\n", info.launcher.c_str(),
              comm.describe().c_str(), bad == 0 ? "OK" : "WRONG");
  std::fflush(stdout);
  return bad == 0 ? 0 : 1;
}

// What SHOAL_TUNE_SAVE's file holds: one line per settled bucket, with what exploring it cost.
static void print_learned(const std::string& path) {
  const auto buckets = tune::read_learned_file(path);
  SHOAL_CHECK(!buckets.empty(), InvalidArgument,
              "learned file '" << path << "' does not exist or holds no bucket");
  std::printf(
      "# learned on the job (%s): the fastest of the cost model's pick, the ring and a row it "
      "priced close to its pick (runner-up, or -), each one's fastest explored call (the slowest "
      "rank's)\n",
      path.c_str());
  std::printf("%-15s %5s %4s %-4s %11s %-16s %-16s %-16s %9s %9s %11s %12s\n", "collective",
              "world", "rph", "tr", "bytes from", "pick", "runner-up", "winner", "pick ms",
              "ring ms", "runner-up ms", "explored ms");
  for (const auto& b : buckets) {
    char runner_up_ms[32] = "-";
    if (b.runner_up) std::snprintf(runner_up_ms, sizeof runner_up_ms, "%.2f", b.runner_up_s * 1e3);
    std::printf("%-15s %5d %4d %-4s %11llu %-16s %-16s %-16s %9.2f %9.2f %11s %12.2f\n",
                std::string(algorithms::to_string(b.collective)).c_str(), b.world, b.ranks_per_host,
                std::string(tune::to_string(b.transport)).c_str(),
                static_cast<unsigned long long>(uint64_t{1} << b.log2_bytes),
                std::string(b.pick->name).c_str(),
                b.runner_up ? std::string(b.runner_up->name).c_str() : "-",
                std::string(b.winner->name).c_str(), b.pick_s * 1e3, b.alternative_s * 1e3,
                runner_up_ms, b.exploration_s * 1e3);
  }
}

int main(int argc, char** argv) {
  CLI::App app{"shoal-info: settings, algorithms, and a rendezvous check under any launcher"};
  bool do_check = false, algos = false, settings = false;
  app.add_flag("--check", do_check,
               "join the job from the launcher's environment (torchrun, shoal-run, mpirun, srun), "
               "all_reduce, print one line per rank");
  app.add_flag("--algorithms", algos, "list the algorithms");
  app.add_flag("--settings", settings, "list the SHOAL_* settings");
  std::string learned;
  app.add_option("--learned", learned,
                 "print what a job learned (the file of SHOAL_TUNE_SAVE) and exit");
  std::string sizes = "8,1K,64K,1M,16M,256M", transport = "shm";
  tune::Context ctx;
  ctx.world = 8;
  ctx.ranks_per_host = 0;
  app.add_option("--sizes", sizes, "with --algorithms: sizes for the dispatcher's choice")
      ->capture_default_str();
  app.add_option("--world", ctx.world, "with --algorithms: world size of the choice")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--ranks-per-host", ctx.ranks_per_host,
                 "with --algorithms: ranks per host (default: the world)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--transport", transport, "with --algorithms: shm (one host) or tcp")
      ->capture_default_str()
      ->check(CLI::IsMember({"shm", "tcp"}));
  ctx.cores_per_host = -1;
  app.add_option("--cores", ctx.cores_per_host,
                 "with --algorithms: the CPUs a host gives its ranks (0: a core per rank; default: "
                 "this process's)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  if (ctx.ranks_per_host == 0 || ctx.ranks_per_host > ctx.world) ctx.ranks_per_host = ctx.world;
  if (ctx.cores_per_host < 0) ctx.cores_per_host = comm::cores_in_union({comm::affinity_mask()});
  ctx.transport = transport == "shm" ? tune::Transport::shm : tune::Transport::tcp;
  try {
    if (do_check) return check();
    if (!learned.empty()) {
      print_learned(learned);
      return 0;
    }
    std::printf("shoal %s: collectives for distributed deep learning\n", "0.1.0");
    std::printf(
        "transports: shm (rings, CMA single copy, flat collectives: shared slots, or direct by "
        "CMA) on one host, tcp "
        "(striped over every NIC) between hosts; --check shows what a job uses\n\n");
    if (settings || !algos) print_settings();
    if (algos || !settings) {
      std::printf("\n");
      print_algorithms();
      if (algos) print_dispatch(ctx, sizes);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "shoal-info: %s error: %s\n", std::string(to_string(e.code())).c_str(),
                 e.what());
    return 1;
  }
  return 0;
}
