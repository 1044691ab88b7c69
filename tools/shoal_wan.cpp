// shoal-wan: the packet forwarder behind netcluster.sh's WAN mode (src/wan). It creates one TUN
// device per endpoint of the spec inside the endpoint's network namespace, prints "ready" once
// they exist (netcluster.sh then gives them addresses and brings them up) and forwards IPv4
// packets between them through the modelled links until SIGTERM or SIGINT.
//
//   shoal-wan --spec FILE [--stats FILE]
//
// --stats: the counters as JSON, written on SIGUSR1 and at exit. Exit status: 0 after a signal,
// 1 when the spec or a device cannot be set up (the reason on stderr), 64 for bad arguments.
#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>

#include "wan/forwarder.hpp"
#include "wan/model.hpp"

namespace {

void write_stats(const std::string& path, const shoal::wan::Forwarder& f) {
  if (path.empty()) return;
  const shoal::wan::Stats& s = f.stats();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << "{\"injected\": " << s.injected << ", \"delivered\": " << s.delivered
        << ", \"delivered_bytes\": " << s.delivered_bytes << ", \"lost\": " << s.lost
        << ", \"queue_drops\": " << s.queue_drops << ", \"unroutable\": " << f.unroutable()
        << ", \"write_drops\": " << f.write_drops()
        << ", \"overflow_drops\": " << f.overflow_drops() << "}\n";
  }
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shoal-wan: delay, jitter, loss and rates between TUN devices (netcluster.sh)"};
  std::string spec_path, stats_path;
  app.add_option("--spec", spec_path, "the network, as netcluster.sh writes it")->required();
  app.add_option("--stats", stats_path, "counters as JSON, on SIGUSR1 and at exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 64;
  }
  try {
    std::ifstream in(spec_path);
    if (!in) throw std::runtime_error("cannot read " + spec_path);
    const shoal::wan::Spec spec = shoal::wan::parse_spec(in);
    shoal::wan::Forwarder forwarder(spec);
    std::cout << "shoal-wan: ready: " << spec.endpoints.size() << " devices" << std::endl;
    std::atomic<bool> stop{false};
    forwarder.run(stop, [&] { write_stats(stats_path, forwarder); });
    write_stats(stats_path, forwarder);
  } catch (const std::exception& e) {
    std::cerr << "shoal-wan: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
