#include "sim/tables.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "algorithms/hierarchy.hpp"
#include "algorithms/registry.hpp"
#include "core/check.hpp"
#include "core/config.hpp"
#include "sim/executor.hpp"

namespace shoal::sim {

using algorithms::Collective;

Builder hierarchical_builder(const algorithms::HierarchyPlan& plan) {
  return [plan](algorithms::Schedule& s, const algorithms::CollectiveArgs& a) {
    algorithms::hierarchical(s, a, plan);
  };
}

bool hierarchy_fits(Collective c, int world, int ranks_per_host) {
  return algorithms::composable(c) && algorithms::hierarchy_fits(world, ranks_per_host);
}

namespace {

double predicted(const ClusterModel& model, const TableOptions& o, Collective c, uint64_t bytes,
                 int world, const Builder& build, const std::string& name) {
  auto a = args_for(c, bytes, world, DataType::float32);
  a.chunk_bytes = o.chunk_bytes;
  const auto res = simulate(compile(a, build, o.threads), model);
  SHOAL_CHECK(res.error.empty(), Internal,
              name << " " << algorithms::to_string(c) << " at " << world << " ranks, " << bytes
                   << " B: " << res.error);
  return std::max(res.time, 1e-9);
}

// "1K: binomial | 64K: ring": where the fastest column changes with the size.
std::string choice_line(const tune::Measurements& m) {
  std::string line, prev;
  for (size_t i = 0; i < m.sizes.size(); ++i) {
    std::string best;
    double best_t = 0;
    for (const auto& [row, t] : m.times)
      if (best.empty() || t[i] < best_t) {
        best = std::string(row->name);
        best_t = t[i];
      }
    if (!m.hierarchical.empty() && m.hierarchical[i] < best_t) best = "hierarchical";
    if (best != prev)
      line += (line.empty() ? "" : " | ") + config::format_bytes(m.sizes[i]) + ": " + best;
    prev = best;
  }
  return line;
}

}  // namespace

void predict_tuning_tables(const ClusterModel& model, const TableOptions& o,
                           tune::TuningFile& file) {
  SHOAL_CHECK(!o.sizes.empty(), InvalidArgument, "simulated tables: no sizes");
  for (int w : o.worlds)
    SHOAL_CHECK(w >= 2, InvalidArgument,
                "simulated tables: every world needs at least 2 ranks, got " << w);
  for (Collective c : o.collectives)
    for (int w : o.worlds) {
      tune::Measurements m;
      m.collective = c;
      m.world = w;
      m.ranks_per_host = std::min(w, model.ranks_per_host);
      m.transport = w <= model.ranks_per_host ? tune::Transport::shm : tune::Transport::tcp;
      m.simulated = true;
      m.sizes = o.sizes;
      const bool measured =
          std::any_of(file.tables.begin(), file.tables.end(),
                      [&](const tune::Measurements& t) { return tune::same_key(t, m); });
      if (measured) {
        if (o.progress)
          o.progress(std::string(algorithms::to_string(c)) + " world " + std::to_string(w) +
                     ": measured in " + (file.source.empty() ? "the file" : file.source) +
                     ", not simulated");
        continue;
      }
      for (const auto& row : algorithms::registry()) {
        // Tables know no links, and serve worlds where the direct rows' p^2 messages are not
        // worth simulating: those are offered by the cost model on long paths only.
        if (row.collective != c || row.follows_links || row.overlaps_flights) continue;
        std::vector<double> times;
        for (uint64_t bytes : o.sizes)
          times.push_back(predicted(model, o, c, bytes, w, row.build, std::string(row.name)));
        m.times.emplace_back(&row, std::move(times));
      }
      if (o.with_hierarchy && hierarchy_fits(c, w, model.ranks_per_host))
        for (uint64_t bytes : o.sizes) {
          double best = 0;
          for (const auto& row : algorithms::registry()) {
            if (row.collective != c || row.follows_links || row.overlaps_flights) continue;
            // all_gather's composition runs no row: its first stands for all.
            if (c == Collective::all_gather && &row != &algorithms::first_row(c)) continue;
            const algorithms::HierarchyPlan plan{model.ranks_per_host, "ring", row.name};
            const double t =
                predicted(model, o, c, bytes, w, hierarchical_builder(plan), hierarchy_name(plan));
            if (best == 0 || t < best) best = t;
          }
          m.hierarchical.push_back(best);
        }
      if (o.progress) {
        char head[64];
        std::snprintf(head, sizeof head, "  %-14s %6d ranks  ",
                      std::string(algorithms::to_string(c)).c_str(), w);
        o.progress(head + choice_line(m));
      }
      file.tables.push_back(std::move(m));
    }
}

}  // namespace shoal::sim
