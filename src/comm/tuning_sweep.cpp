#include "comm/tuning_sweep.hpp"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <sstream>
#include <string>
#include <thread>

#include "algorithms/registry.hpp"
#include "comm/comm_impl.hpp"
#include "core/check.hpp"
#include "core/config.hpp"

namespace shoal::comm {

namespace {

using algorithms::AlgorithmInfo;
using algorithms::Collective;
using Clock = std::chrono::steady_clock;

constexpr Collective kTuned[] = {Collective::all_reduce, Collective::all_gather,
                                 Collective::reduce_scatter};

// float32 elements per rank for `bytes` as the cost models count them (0: too small), and back.
uint64_t count_for(Collective c, uint64_t bytes, int p) {
  return bytes / (c == Collective::all_reduce ? 4 : 4 * static_cast<uint64_t>(p));
}
uint64_t bytes_for(Collective c, uint64_t count, int p) {
  return count * 4 * (c == Collective::all_reduce ? 1 : static_cast<uint64_t>(p));
}

// One call of `c`, of the row or path `options` names.
void run_once(Communicator& comm, Collective c, const float* in, float* out, uint64_t count,
              const CallOptions& options) {
  switch (c) {
    case Collective::all_reduce:
      comm.all_reduce(in, out, count, DataType::float32, ReduceOp::sum, options);
      break;
    case Collective::all_gather:
      comm.all_gather(in, out, count, DataType::float32, options);
      break;
    default:
      comm.reduce_scatter(in, out, count, DataType::float32, ReduceOp::sum, options);
      break;
  }
}

// Every row of every tuned collective on `comm` at `o.sizes`, one table per collective.
void measure(Communicator& comm, const SweepOptions& o, tune::TuningFile& file) {
  detail::CommImpl& impl = detail::Internals::of(comm);
  const int p = comm.size();
  const tune::Context ctx = impl.tune_context();
  // Across hosts of several ranks each the hierarchy is one more column (its phases pick their
  // own rows): SHOAL_HIERARCHICAL=auto then takes it where it is the fastest. Each call names
  // its row or the hierarchy (CallOptions).
  const bool with_hierarchy = impl.planner->layout().hierarchy_fits;
  uint64_t max_elems = 1;
  for (uint64_t s : o.sizes) max_elems = std::max(max_elems, s / 4 + 1);
  std::vector<float> in(max_elems, 1.0f), out(max_elems, 0.0f);
  for (Collective c : kTuned) {
    tune::Measurements m;
    m.collective = c;
    m.world = p;
    m.ranks_per_host = ctx.ranks_per_host;
    m.transport = ctx.transport;
    m.cores_per_host = ctx.cores_per_host;
    m.calibration = impl.calibrated_params;
    std::vector<const AlgorithmInfo*> rows;  // nullptr: the hierarchy
    for (const auto& row : algorithms::registry())
      if (row.collective == c && !row.follows_links) rows.push_back(&row);  // tables know no links
    if (with_hierarchy) rows.push_back(nullptr);
    std::vector<CallOptions> forced(rows.size());
    for (size_t a = 0; a < rows.size(); ++a)
      forced[a].algorithm = rows[a] ? std::string(rows[a]->name) : "hierarchical";
    std::vector<std::vector<double>> times(rows.size());
    for (uint64_t s : o.sizes) {
      const uint64_t count = count_for(c, s, p);
      if (count == 0 || (!m.sizes.empty() && bytes_for(c, count, p) <= m.sizes.back())) continue;
      m.sizes.push_back(bytes_for(c, count, p));
      // Fewer calls for large sizes: the sweep must stay short; each is long enough.
      const uint64_t scaled =
          static_cast<uint64_t>(o.iters) * (256u << 10) / std::max<uint64_t>(s, 1);
      const int n = static_cast<int>(
          std::min<uint64_t>(static_cast<uint64_t>(o.iters), std::max<uint64_t>(4, scaled)));
      std::vector<double> best(rows.size(), 1e30);
      for (int round = 0; round < o.rounds; ++round)
        for (size_t a = 0; a < rows.size(); ++a) {
          for (int i = 0; i < o.warmup; ++i)
            run_once(comm, c, in.data(), out.data(), count, forced[a]);
          comm.barrier();
          const auto t0 = Clock::now();
          for (int i = 0; i < n; ++i) run_once(comm, c, in.data(), out.data(), count, forced[a]);
          double mean = std::chrono::duration<double>(Clock::now() - t0).count() / n;
          comm.all_reduce(&mean, 1, DataType::float64, ReduceOp::max);  // the slowest rank's
          best[a] = std::min(best[a], mean);
        }
      for (size_t a = 0; a < rows.size(); ++a) times[a].push_back(best[a]);
      if (o.progress && comm.rank() == 0) {
        std::ostringstream line;
        line << algorithms::to_string(c) << " " << config::format_bytes(m.sizes.back()) << ":"
             << std::fixed << std::setprecision(1);
        for (size_t a = 0; a < rows.size(); ++a)
          line << " " << forced[a].algorithm << " " << best[a] * 1e6 << "us";
        o.progress(line.str());
      }
    }
    for (size_t a = 0; a < rows.size(); ++a) {
      if (rows[a])
        m.times.emplace_back(rows[a], std::move(times[a]));
      else
        m.hierarchical = std::move(times[a]);
    }
    if (!m.sizes.empty()) file.tables.push_back(std::move(m));
  }
}

}  // namespace

tune::TuningFile measure_tuning_tables(Communicator& comm, const SweepOptions& o) {
  const int p = comm.size();
  SHOAL_CHECK(!o.sizes.empty(), InvalidArgument, "the tuning sweep has no sizes");
  SHOAL_CHECK(o.iters >= 1 && o.warmup >= 0 && o.rounds >= 1, InvalidArgument,
              "the tuning sweep needs iters >= 1, warmup >= 0 and rounds >= 1 (got "
                  << o.iters << ", " << o.warmup << ", " << o.rounds << ")");
  for (int w : o.worlds)
    SHOAL_CHECK(w >= 2 && w <= p, InvalidArgument,
                "worlds to tune: " << w << " is not a world from 2 to the communicator's " << p
                                   << " ranks");
  std::vector<int> worlds = o.worlds;
  if (worlds.empty()) worlds = {p};
  detail::CommImpl& impl = detail::Internals::of(comm);
  tune::TuningFile file;
  for (int w : worlds) {
    if (w == p) {
      measure(comm, o, file);
      continue;
    }
    Communicator first = comm.split(comm.rank() < w ? 0 : Communicator::kNoColor, comm.rank());
    // The others wait for rank 0's word in the store, not in a collective: a world's sweep may
    // take longer than SHOAL_TIMEOUT bounds a call. They stop waiting if rank 0 goes.
    // Unique per communicator and split (both equal on all ranks): sweeps may repeat.
    const std::string done =
        "shoal-tune/" + std::to_string(impl.comm_id) + "/" + std::to_string(impl.splits) + "/done";
    Store& store = *impl.store;
    if (first.valid()) {
      measure(first, o, file);
      if (comm.rank() == 0) store.set(done, "1");
    } else {
      while (!store.check({done})) {
        SHOAL_CHECK(!impl.engine->peer_closed(0) && !impl.engine->peer_failed(0), PeerFailure,
                    "rank 0 left while measuring " << w << " ranks");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    comm.barrier();
  }
  comm.barrier();
  return file;
}

}  // namespace shoal::comm
