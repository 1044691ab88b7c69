#include "tune/dispatcher.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "core/check.hpp"
#include "core/config.hpp"
#include "tune/calibration.hpp"

namespace shoal::tune {

using algorithms::AlgorithmInfo;
using algorithms::Collective;
using algorithms::CostParams;

namespace {

double distance_log2(int a, int b) {
  return std::abs(std::log2(static_cast<double>(a)) - std::log2(static_cast<double>(b)));
}

// A SHOAL_TUNE_* constant: "" keeps the default.
double setting_or(const char* name, double fallback) {
  const std::string v = config::get(name);
  if (v.empty()) return fallback;
  const auto x = config::parse_number(v);
  SHOAL_CHECK(x && *x >= 0, InvalidArgument,
              name << "='" << v << "' is not a non-negative number of seconds (example: 5e-6)");
  return *x;
}

// A row's modelled time; with `traffic` (across hosts of several ranks), its bandwidth term is
// beta x the bytes a host sends to other hosts (x `nic_factor`: ranks of a host running it at
// once), and its memory work (reductions, host-local moves) costs busy_gamma per byte: hidden
// behind the NICs by a pipelined row, added by the others, whose every step waits for the
// whole of the previous one.
double modelled_cost(const AlgorithmInfo& row, int world, uint64_t bytes, const CostParams& c,
                     const HostTraffic* traffic, double nic_factor = 1) {
  if (!traffic) return row.cost(world, bytes, c);
  const double n = static_cast<double>(bytes);
  const double wire = c.beta * nic_factor * traffic->nic * n,
               memory = c.busy_gamma * traffic->memory * n;
  const double latency = row.cost(world, bytes, {c.alpha, 0, 0, 0, c.flight});
  return latency + (row.pipelined ? std::max(wire, memory) : wire + memory);
}

// The schedules of host 0's ranks (ranks in blocks per host, the layout launchers give) for a
// representative call of `row`: 4096 float32 per block, so that every split is even. Calls
// `visit(steps)` with each of those ranks' steps, and returns the call's model_bytes.
template <typename Visit>
double visit_host_schedules(const AlgorithmInfo& row, int world, int ranks_per_host,
                            Visit&& visit) {
  algorithms::CollectiveArgs a;
  a.collective = row.collective;
  a.dtype = DataType::float32;
  a.op = ReduceOp::sum;
  a.size = world;
  a.root = 0;
  a.count =
      row.collective == Collective::all_reduce ? 4096ull * static_cast<uint64_t>(world) : 4096;
  a.algorithm = &row;
  a.forced = true;
  for (int r = 0; r < std::min(ranks_per_host, world); ++r) {
    a.rank = r;
    visit(algorithms::build_schedule(a).steps);
  }
  return static_cast<double>(algorithms::model_bytes(a));
}

}  // namespace

std::string_view to_string(Choice::Source s) {
  switch (s) {
    case Choice::Source::first_row:
      return "first row";
    case Choice::Source::cost_model:
      return "cost model";
    case Choice::Source::tuning_file:
      return "tuning file";
    case Choice::Source::simulation:
      return "simulation";
    case Choice::Source::links:
      return "links";
  }
  return "?";
}

Context make_context(const std::vector<int>& host_of, bool all_shared,
                     const std::vector<int>& cores_of_host) {
  Context c;
  c.world = std::max<int>(1, static_cast<int>(host_of.size()));
  std::map<int, int> per_host;
  for (int h : host_of) c.ranks_per_host = std::max(c.ranks_per_host, ++per_host[h]);
  c.transport = all_shared ? Transport::shm : Transport::tcp;
  for (int cores : cores_of_host)
    if (cores > 0) c.cores_per_host = c.cores_per_host ? std::min(c.cores_per_host, cores) : cores;
  return c;
}

CostParams default_cost_params(Transport t) {
  // Orders of magnitude of this project's machines (docs/algorithms.md, "The dispatcher"):
  // shared memory costs a few microseconds per message and moves bytes at memory speed (one
  // copy by reference); TCP costs tens of microseconds per message on loopback and more
  // between hosts, and a fraction of memory bandwidth.
  CostParams c;
  if (t == Transport::shm) {
    c.alpha = 5e-6;
    c.beta = 2e-10;
  } else {
    c.alpha = 3e-5;
    c.beta = 8e-10;
  }
  c.gamma = 2e-10;
  c.busy_gamma = 2e-10;  // one core's pass over memory; calibration measures the machine's
  return c;
}

CostParams cost_params(Transport t, const CostParams* measured) {
  CostParams c = measured ? *measured : default_cost_params(t);
  c.alpha = setting_or("SHOAL_TUNE_ALPHA", c.alpha);
  c.beta = setting_or("SHOAL_TUNE_BETA", c.beta);
  c.gamma = setting_or("SHOAL_TUNE_GAMMA", c.gamma);
  c.busy_gamma = setting_or("SHOAL_TUNE_BUSY_GAMMA", c.busy_gamma);
  return c;
}

HostTraffic host_traffic(const AlgorithmInfo& row, int world, int ranks_per_host) {
  HostTraffic traffic;
  if (ranks_per_host >= world || world < 2) return traffic;
  double nic = 0, memory = 0;
  const double n = visit_host_schedules(row, world, ranks_per_host, [&](const auto& steps) {
    double mine = 0;  // this rank's memory work
    for (const auto& step : steps) {
      const auto moved = static_cast<double>(
          step.kind == algorithms::StepKind::send ? step.src.bytes : step.dst.bytes);
      switch (step.kind) {
        case algorithms::StepKind::send:
          (step.peer >= ranks_per_host ? nic : mine) += moved;
          break;
        case algorithms::StepKind::reduce:
        case algorithms::StepKind::copy:
          mine += moved;
          break;
        default:
          break;
      }
    }
    memory = std::max(memory, mine);
  });
  traffic.nic = nic / n;
  traffic.memory = memory / n;
  return traffic;
}

HostWork host_work(const AlgorithmInfo& row, int world, int ranks_per_host) {
  HostWork work;
  if (world < 2) return work;
  double sent = 0, reduced = 0;
  const double n = visit_host_schedules(row, world, ranks_per_host, [&](const auto& steps) {
    for (const auto& step : steps) {
      if (step.kind == algorithms::StepKind::send) {
        ++work.messages;
        sent += static_cast<double>(step.src.bytes);
      } else if (step.kind == algorithms::StepKind::reduce) {
        reduced += static_cast<double>(step.dst.bytes);
      }
    }
  });
  work.sent = sent / n;
  work.reduced = reduced / n;
  return work;
}

double shared_cores_cost(const HostWork& work, uint64_t bytes, const CostParams& c, int cores) {
  if (cores <= 0) return 0;
  const double n = static_cast<double>(bytes);
  return (c.alpha * work.messages + n * (c.beta * work.sent + c.gamma * work.reduced)) / cores;
}

const AlgorithmInfo& cost_model_choice(Collective collective,
                                       const std::function<double(const AlgorithmInfo&)>& cost) {
  const AlgorithmInfo* best = nullptr;
  double best_cost = 0;
  for (const auto& row : algorithms::registry()) {
    if (row.collective != collective) continue;
    const double t = cost(row);
    // Strictly less: ties go to the earlier row, on every rank alike.
    if (!best || t < best_cost) {
      best = &row;
      best_cost = t;
    }
  }
  SHOAL_CHECK(best != nullptr, Internal,
              "no algorithm serves " << algorithms::to_string(collective));
  return *best;
}

Dispatcher::Dispatcher(Context context, CostParams params, std::shared_ptr<const TuningFile> file,
                       bool enabled, Reading reading, const MeasuredLinks& links)
    : context_(context),
      params_(params),
      file_(std::move(file)),
      enabled_(enabled),
      reading_(reading) {
  for (const auto& row : algorithms::registry()) ++rows_[static_cast<int>(row.collective)];
  if (file_) choose_tables();
  long_paths_ = params_.flight >= kLongFlightS;
  if (links)
    for (double flight : links.links->latency) long_paths_ |= flight >= kLongFlightS;
  constexpr Collective kModelled[] = {Collective::all_reduce, Collective::all_gather,
                                      Collective::reduce_scatter};
  // Ranks that share cores: what each row makes a host's ranks do in all (its schedules, built
  // once here), which those cores work through in turn.
  if (ranks_share_cores(context_)) {
    work_.assign(algorithms::registry().size(), HostWork{});
    for (Collective c : kModelled)
      for (const auto& row : algorithms::registry())
        if (row.collective == c)
          work_[&row - algorithms::registry().data()] =
              host_work(row, context_.world, context_.ranks_per_host);
  }
  // Measured links: what each row's schedules (link_ring's in the measured order) load them with.
  if (links && enabled_) {
    link_cost_.assign(algorithms::registry().size(), 0);
    if (!links.links->latency.empty()) {
      link_latency_.assign(algorithms::registry().size(), 0);
      // Per step beside the flights, the transport's own overhead: the default alpha (a
      // calibrated one holds the longest flight already).
      step_alpha_ = std::min(params_.alpha, default_cost_params(Transport::tcp).alpha);
    }
    for (Collective c : kModelled) {
      on_links_[static_cast<int>(c)] = true;
      for (const auto& row : algorithms::registry())
        if (row.collective == c) {
          const size_t i = &row - algorithms::registry().data();
          const LinkPrice price = link_price(row, *links.links, *links.ring_order);
          link_cost_[i] = price.seconds_per_byte;
          if (!link_latency_.empty()) link_latency_[i] = price.latency_s;
        }
    }
  }
  // Across hosts of several ranks: the bytes each row sends through a host's NICs and its
  // memory work, flat and in the hierarchy's inter-host phase (schedules built once here, not
  // per call). The flat pick follows them where no table decides.
  if (!across_hosts_of_several(context_)) return;
  const int hosts = context_.world / context_.ranks_per_host;
  traffic_.assign(algorithms::registry().size(), HostTraffic{});
  inter_traffic_.assign(algorithms::registry().size(), HostTraffic{});
  for (Collective c : kModelled) {
    nic_aware_[static_cast<int>(c)] = enabled_ && !tables_[static_cast<int>(c)];
    for (const auto& row : algorithms::registry()) {
      if (row.collective != c) continue;
      const size_t i = &row - algorithms::registry().data();
      traffic_[i] = host_traffic(row, context_.world, context_.ranks_per_host);
      // The hierarchy's all_gather crosses hosts by a direct exchange, not by a row.
      if (c != Collective::all_gather && context_.world % context_.ranks_per_host == 0)
        inter_traffic_[i] = host_traffic(row, hosts, 1);
    }
  }
}

void Dispatcher::choose_tables() {
  // Per collective, the table of the same transport nearest in world size, then in ranks per
  // host (log distance; an exact match is 0); the first in the file on a tie. Measured tables
  // first; for a world beyond every measured one, the simulated tables of such worlds.
  auto key = [&](const Measurements& t) {
    return std::pair(distance_log2(t.world, context_.world),
                     distance_log2(t.ranks_per_host, context_.ranks_per_host));
  };
  std::array<int, kCollectives> largest_measured{};
  for (const auto& m : file_->tables) {
    if (m.transport != context_.transport || m.simulated) continue;
    const int c = static_cast<int>(m.collective);
    if (!tables_[c] || key(m) < key(*tables_[c])) tables_[c] = &m;
    largest_measured[c] = std::max(largest_measured[c], m.world);
  }
  std::array<const Measurements*, kCollectives> simulated{};
  for (const auto& m : file_->tables) {
    const int c = static_cast<int>(m.collective);
    if (m.transport != context_.transport || !m.simulated || m.world <= largest_measured[c])
      continue;
    if (!simulated[c] || key(m) < key(*simulated[c])) simulated[c] = &m;
  }
  for (int c = 0; c < kCollectives; ++c) {
    if (simulated[c] && context_.world > largest_measured[c]) tables_[c] = simulated[c];
    if (tables_[c]) curves_[c] = Curves(*tables_[c], reading_);
  }
}

Dispatcher Dispatcher::from_environment(const Context& context, const CostParams* measured,
                                        const MeasuredLinks& links) {
  const std::string mode = config::get("SHOAL_DISPATCH");
  SHOAL_CHECK(mode == "on" || mode == "off", InvalidArgument,
              "SHOAL_DISPATCH='" << mode << "' is not on or off");
  std::shared_ptr<const TuningFile> file;
  const std::string path = config::get("SHOAL_TUNE_FILE");
  const std::string sim = config::get("SHOAL_TUNE_SIM");
  SHOAL_CHECK(sim == "on" || sim == "off", InvalidArgument,
              "SHOAL_TUNE_SIM='" << sim << "' is not on or off");
  const Reading reading = Reading::from_environment();
  if (mode == "on" && !path.empty())
    file =
        std::make_shared<const TuningFile>(load_tuning_file(path, /*keep_simulated=*/sim == "on"));
  return Dispatcher(context, cost_params(context.transport, measured), std::move(file),
                    mode == "on", reading, links);
}

const Measurements* Dispatcher::table_for(Collective collective) const {
  return tables_[static_cast<int>(collective)];
}

Choice Dispatcher::choose(Collective collective, uint64_t bytes) const {
  Choice choice;
  if (!enabled_ || rows_[static_cast<int>(collective)] <= 1) {
    choice.algorithm = &algorithms::first_row(collective);
    return choice;
  }
  const bool on_links = on_links_[static_cast<int>(collective)];
  const Measurements* m = on_links ? nullptr : tables_[static_cast<int>(collective)];
  if (m) {
    // Outside the measured sizes, the ranking at the nearest one: beyond the largest every
    // row is bound by bandwidth and keeps its place, below the smallest by latency; the
    // measurement knows the machine better than the model does.
    const Curves& curves = curves_[static_cast<int>(collective)];
    const Curves::Point at = curves.locate(bytes);
    for (size_t i = 0; i < m->times.size(); ++i) {
      const double t = curves.row_time(at, i);
      if (!choice.algorithm || t < choice.predicted_s) {
        choice.algorithm = m->times[i].first;
        choice.predicted_s = t;
      }
    }
    if (bytes > m->sizes.back())
      choice.predicted_s *= static_cast<double>(bytes) / static_cast<double>(m->sizes.back());
    choice.source = m->simulated ? Choice::Source::simulation : Choice::Source::tuning_file;
    return choice;
  }
  // Nothing measured: the cost model.
  const auto cost = [&](const AlgorithmInfo& row) { return row_cost(row, bytes); };
  choice.algorithm = &cost_model_choice(collective, cost);
  choice.source = on_links ? Choice::Source::links : Choice::Source::cost_model;
  choice.predicted_s = cost(*choice.algorithm);
  return choice;
}

const AlgorithmInfo* Dispatcher::runner_up(Collective collective, uint64_t bytes,
                                           const AlgorithmInfo* pick,
                                           const AlgorithmInfo* alternative) const {
  if (!enabled_ || rows_[static_cast<int>(collective)] <= 2) return nullptr;
  double best = std::numeric_limits<double>::infinity(), second = best;
  const AlgorithmInfo* found = nullptr;
  for (const auto& row : algorithms::registry()) {
    if (row.collective != collective) continue;
    const double t = row_cost(row, bytes);
    best = std::min(best, t);
    // Strictly less: ties go to the earlier row, on every rank alike.
    if (&row != pick && &row != alternative && t < second) {
      found = &row;
      second = t;
    }
  }
  return found && std::isfinite(second) && second <= kCloseCost * best ? found : nullptr;
}

double Dispatcher::row_cost(const AlgorithmInfo& row, uint64_t bytes) const {
  if (!offered(row)) return std::numeric_limits<double>::infinity();
  const size_t i = &row - algorithms::registry().data();
  if (!link_cost_.empty() && link_cost_[i] > 0) {
    const double n = static_cast<double>(bytes), wire = link_cost_[i] * n,
                 reduce = row.cost(context_.world, bytes, {0, 0, params_.gamma, 0});
    // Measured latencies: each message's flight on its own pair, plus step_alpha_ per step.
    const double latency =
        link_latency_.empty()
            ? row.cost(context_.world, bytes, {params_.alpha, 0, 0, 0, params_.flight})
            : link_latency_[i] + row.cost(context_.world, bytes, {step_alpha_, 0, 0, 0});
    return latency + (row.pipelined ? std::max(wire, reduce) : wire + reduce);
  }
  if (row.follows_links) return std::numeric_limits<double>::infinity();
  const HostTraffic* traffic =
      nic_aware_[static_cast<int>(row.collective)] ? &traffic_[i] : nullptr;
  const double queued =
      work_.empty() ? 0 : shared_cores_cost(work_[i], bytes, params_, context_.cores_per_host);
  return modelled_cost(row, context_.world, bytes, params_, traffic) + queued;
}

std::optional<bool> Dispatcher::hierarchical_is_faster(Collective collective,
                                                       uint64_t bytes) const {
  const Measurements* m = enabled_ ? tables_[static_cast<int>(collective)] : nullptr;
  if (!m || m->hierarchical.empty()) return std::nullopt;
  // Outside the measured sizes, the verdict at the nearest one (every column's time grows
  // alike with the bytes there; a blind threshold knows less).
  const Curves& curves = curves_[static_cast<int>(collective)];
  const Curves::Point at = curves.locate(bytes);
  const double hierarchical = curves.hierarchical_time(at);
  for (size_t i = 0; i < m->times.size(); ++i)
    if (curves.row_time(at, i) <= hierarchical) return false;  // a tie stays flat
  return true;
}

std::optional<double> Dispatcher::flat_cost(Collective collective, uint64_t bytes) const {
  if (traffic_.empty()) return std::nullopt;
  const AlgorithmInfo& row = *choose(collective, bytes).algorithm;
  return modelled_cost(row, context_.world, bytes, params_,
                       &traffic_[&row - algorithms::registry().data()]);
}

std::optional<double> Dispatcher::hierarchy_cost(Collective collective, uint64_t bytes) const {
  const int local = context_.ranks_per_host;
  if (traffic_.empty() || context_.world % local != 0) return std::nullopt;
  const int hosts = context_.world / local;
  const double n = static_cast<double>(bytes),
               share = (local - 1.0) / local;  // of n, to the host's others
  // Host-local steps (local - 1 per phase) at the communicator's alpha: calibration does not
  // measure them apart, and on hosts of more ranks than cores a step's cost is the wake-ups,
  // wherever the bytes go.
  const double alpha = params_.alpha, steps_local = local - 1.0;
  // The inter-host phase on `b` bytes: every rank of a host runs it at once, through its NICs.
  auto inter = [&](Collective c, uint64_t b) {
    double best = std::numeric_limits<double>::infinity();
    for (const auto& row : algorithms::registry())
      if (row.collective == c && offered(row))
        best = std::min(
            best, modelled_cost(row, hosts, b, params_,
                                &inter_traffic_[&row - algorithms::registry().data()], local));
    return best;
  };
  const uint64_t slice = bytes / static_cast<uint64_t>(local);
  switch (collective) {
    case Collective::all_reduce:
      // reduce_scatter in the host (reduce and pass on `share`), all_reduce of the slice across
      // hosts, all_gather in the host (pass on `share`).
      return 2 * steps_local * alpha + params_.busy_gamma * 3 * share * n +
             inter(Collective::all_reduce, slice);
    case Collective::reduce_scatter:
      // The host's blocks of every host reduced in the host, then a reduce_scatter of those
      // across hosts.
      return steps_local * alpha + params_.busy_gamma * 2 * share * n +
             inter(Collective::reduce_scatter, slice);
    case Collective::all_gather:
      // Each rank's block straight to its peer on every other host, each arrival passed on to
      // the host's other ranks.
      return (hosts - 1 + steps_local) * alpha + params_.beta * (hosts - 1.0) / hosts * n +
             params_.busy_gamma * share * n;
    default:
      return std::nullopt;
  }
}

Dispatcher::SizeRange Dispatcher::hierarchy_sizes_from_environment() {
  return {config::get_bytes("SHOAL_HIERARCHICAL_MIN_BYTES"),
          config::get_bytes("SHOAL_HIERARCHICAL_MAX_BYTES")};
}

Dispatcher::AutoHierarchy Dispatcher::auto_hierarchy(Collective collective, uint64_t bytes,
                                                     const SizeRange& sizes) const {
  if (const auto faster = hierarchical_is_faster(collective, bytes))
    return {*faster, table_for(collective)->simulated ? "simulation" : "tuning file"};
  if (!sizes.contains(bytes)) return {false, "size range"};
  const auto hierarchical = hierarchy_cost(collective, bytes), flat = flat_cost(collective, bytes);
  return {hierarchical && flat && *hierarchical < *flat, "cost model"};  // a tie stays flat
}

}  // namespace shoal::tune
