// shoal-info: what this build has (settings, algorithms) and, with --check under a launcher,
// whether the ranks of a job can rendezvous and reduce together.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "algorithms/registry.hpp"
#include "core/config.hpp"
#include "shoal/shoal.hpp"
#include "store/bootstrap.hpp"

using namespace shoal;

static void print_settings() {
  std::printf("# settings (environment variables)\n");
  std::printf("%-24s %-10s %-12s %s\n", "name", "value", "default", "meaning");
  for (const auto& s : config::settings()) {
    const char* v = std::getenv(s.name);
    std::printf("%-24s %-10s %-12s %s\n", s.name, v ? v : "-", *s.default_value ? s.default_value : "\"\"", s.doc);
  }
}

static void print_algorithms() {
  std::printf("# algorithms\n");
  std::printf("# the first row of a collective runs unless SHOAL_ALGO=collective:name picks another\n");
  std::printf("%-15s %-19s %-50s %s\n", "collective", "algorithm", "constraints", "description");
  for (const auto& a : algorithms::registry())
    std::printf("%-15s %-19s %-50s %s\n", std::string(algorithms::to_string(a.collective)).c_str(),
                std::string(a.name).c_str(), std::string(a.constraints).c_str(),
                std::string(a.description).c_str());
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

int main(int argc, char** argv) {
  CLI::App app{"shoal-info: settings, algorithms, and a rendezvous check under any launcher"};
  bool do_check = false, algos = false, settings = false;
  app.add_flag("--check", do_check,
               "join the job from the launcher's environment (torchrun, shoal-run, mpirun, srun), "
               "all_reduce, print one line per rank");
  app.add_flag("--algorithms", algos, "list the algorithms");
  app.add_flag("--settings", settings, "list the SHOAL_* settings");
  CLI11_PARSE(app, argc, argv);
  try {
    if (do_check) return check();
    std::printf("shoal %s: collectives for distributed deep learning\n", "0.1.0");
    std::printf("transports: shm (rings, CMA single copy, flat shared-slot collectives) on one host, tcp "
                "(striped over every NIC) between hosts; --check shows what a job uses\n\n");
    if (settings || !algos) print_settings();
    if (algos || !settings) {
      std::printf("\n");
      print_algorithms();
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "shoal-info: %s error: %s\n", std::string(to_string(e.code())).c_str(), e.what());
    return 1;
  }
  return 0;
}
