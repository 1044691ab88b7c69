#include "algorithms/registry.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <mutex>
#include <sstream>

#include "algorithms/algorithms.hpp"
#include "core/check.hpp"
#include "core/config.hpp"

namespace shoal::algorithms {

namespace {

// Cost models (Thakur, Rabenseifner & Gropp 2005; Chan et al. 2007). lg = ceil(log2 p);
// p2 = the largest power of two <= p; fold = the extra steps of a non-power of two: the
// folded ranks' data in (one message of the whole vector, one reduction) and the result out.
double lg(int p) { return p <= 1 ? 0 : std::ceil(std::log2(static_cast<double>(p))); }
int pow2_below(int p) {
  int x = 1;
  while (x * 2 <= p) x *= 2;
  return x;
}
double frac(int p) { return p <= 1 ? 0 : static_cast<double>(p - 1) / p; }

double ring_all_reduce_cost(int p, uint64_t n, const CostParams& c) {
  return 2 * (p - 1) * c.alpha + frac(p) * n * (2 * c.beta + c.gamma);
}
double ring_all_gather_cost(int p, uint64_t n, const CostParams& c) {
  return (p - 1) * c.alpha + frac(p) * n * c.beta;
}
double ring_reduce_scatter_cost(int p, uint64_t n, const CostParams& c) {
  return (p - 1) * c.alpha + frac(p) * n * (c.beta + c.gamma);
}
double fold_all_reduce(int p, uint64_t n, const CostParams& c) {
  return p == pow2_below(p) ? 0 : 2 * c.alpha + n * (2 * c.beta + c.gamma);
}
double butterfly_all_reduce_cost(int p, uint64_t n, const CostParams& c) {
  const int p2 = pow2_below(p);
  return 2 * lg(p2) * c.alpha + frac(p2) * n * (2 * c.beta + c.gamma) + fold_all_reduce(p, n, c);
}
double recursive_doubling_all_reduce_cost(int p, uint64_t n, const CostParams& c) {
  return lg(pow2_below(p)) * (c.alpha + n * (c.beta + c.gamma)) + fold_all_reduce(p, n, c);
}
double binomial_all_reduce_cost(int p, uint64_t n, const CostParams& c) {
  return lg(p) * (2 * c.alpha + n * (2 * c.beta + c.gamma));
}
double butterfly_all_gather_cost(int p, uint64_t n, const CostParams& c) {
  const int p2 = pow2_below(p);
  const double fold = p == p2 ? 0 : 2 * c.alpha + (n / p + n) * c.beta;
  return lg(p2) * c.alpha + frac(p) * n * c.beta + fold;
}
double bruck_all_gather_cost(int p, uint64_t n, const CostParams& c) {
  return lg(p) * c.alpha + frac(p) * n * c.beta;
}
double butterfly_reduce_scatter_cost(int p, uint64_t n, const CostParams& c) {
  const int p2 = pow2_below(p);
  const double fold = p == p2 ? 0 : 2 * c.alpha + n * (c.beta + c.gamma) + n / p * c.beta;
  return lg(p2) * c.alpha + frac(p) * n * (c.beta + c.gamma) + fold;
}
double binomial_broadcast_cost(int p, uint64_t n, const CostParams& c) {
  return lg(p) * (c.alpha + n * c.beta);
}
double binomial_reduce_cost(int p, uint64_t n, const CostParams& c) {
  return lg(p) * (c.alpha + n * (c.beta + c.gamma));
}
double linear_cost(int p, uint64_t n, const CostParams& c) {
  return (p - 1) * c.alpha + frac(p) * n * c.beta;
}
// One phase of p-1 messages sent at once: their flights overlap, their overheads (alpha beyond
// the flight) do not. Without a known flight it is linear_cost's (p-1) alpha, and the direct
// rows tie with the ring, which comes first.
double direct_phase(int p, const CostParams& c) {
  if (p <= 1) return 0;
  const double flight = std::clamp(c.flight, 0.0, c.alpha);
  return flight + (p - 1) * (c.alpha - flight);
}
double direct_all_gather_cost(int p, uint64_t n, const CostParams& c) {
  return direct_phase(p, c) + frac(p) * n * c.beta;
}
double direct_reduce_scatter_cost(int p, uint64_t n, const CostParams& c) {
  return direct_phase(p, c) + frac(p) * n * (c.beta + c.gamma);
}
double two_shot_all_reduce_cost(int p, uint64_t n, const CostParams& c) {
  return 2 * direct_phase(p, c) + frac(p) * n * (2 * c.beta + c.gamma);
}
double barrier_cost(int p, uint64_t, const CostParams& c) { return lg(p) * c.alpha; }
double direct_cost(int, uint64_t n, const CostParams& c) { return c.alpha + n * c.beta; }

constexpr std::string_view kAnyFolded = "any world size (non-powers of two fold: +2 steps)";
constexpr std::string_view kLinkRing =
    "the ring in the order of measured links: widest bottleneck, then fewest slow hops (TSP)";
constexpr std::string_view kLinksMeasured = "links measured (SHOAL_LINKS, measure_links)";
constexpr std::string_view kLongPaths =
    "any world size; picked only on long paths (flights >= 5 ms)";

}  // namespace

const std::vector<AlgorithmInfo>& registry() {
  static const std::vector<AlgorithmInfo> table = {
      {"ring", Collective::all_reduce,
       "reduce-scatter then all-gather around a ring, chunk-pipelined", "any world size",
       ring_all_reduce, ring_all_reduce_cost, /*pipelined=*/true},
      {"link_ring", Collective::all_reduce, kLinkRing, kLinksMeasured, link_ring_all_reduce,
       ring_all_reduce_cost, /*pipelined=*/true, /*follows_links=*/true},
      {"two_shot", Collective::all_reduce,
       "direct reduce-scatter then direct all-gather: 2 steps of p-1 messages at once, "
       "chunk-pipelined",
       kLongPaths, two_shot_all_reduce, two_shot_all_reduce_cost, /*pipelined=*/true,
       /*follows_links=*/false, /*overlaps_flights=*/true},
      {"rabenseifner", Collective::all_reduce,
       "reduce-scatter by recursive halving, then all-gather by recursive doubling", kAnyFolded,
       rabenseifner_all_reduce, butterfly_all_reduce_cost},
      {"swing", Collective::all_reduce,
       "Swing (NSDI'24): halving/doubling with peers r+-(1,-1,3,-5,..), short distances on rings",
       kAnyFolded, swing_all_reduce, butterfly_all_reduce_cost},
      {"recursive_doubling", Collective::all_reduce,
       "log2 p exchanges of the whole vector with ranks 2^k apart (small messages)", kAnyFolded,
       recursive_doubling_all_reduce, recursive_doubling_all_reduce_cost},
      {"binomial", Collective::all_reduce,
       "binomial-tree reduce to rank 0, then broadcast down the same tree (small messages)",
       "any world size", binomial_all_reduce, binomial_all_reduce_cost},
      {"ring", Collective::all_gather, "p-1 steps around a ring, chunk-pipelined", "any world size",
       ring_all_gather, ring_all_gather_cost, /*pipelined=*/true},
      {"link_ring", Collective::all_gather, kLinkRing, kLinksMeasured, link_ring_all_gather,
       ring_all_gather_cost, /*pipelined=*/true, /*follows_links=*/true},
      {"direct", Collective::all_gather, "one step: the block to every other rank at once",
       kLongPaths, direct_all_gather, direct_all_gather_cost, /*pipelined=*/true,
       /*follows_links=*/false, /*overlaps_flights=*/true},
      {"recursive_doubling", Collective::all_gather,
       "log2 p exchanges of doubling block ranges with ranks 2^k apart", kAnyFolded,
       recursive_doubling_all_gather, butterfly_all_gather_cost},
      {"bruck", Collective::all_gather,
       "ceil(log2 p) steps: send what you have to r-2^k, receive from r+2^k", "any world size",
       bruck_all_gather, bruck_all_gather_cost},
      {"swing", Collective::all_gather, "the all-gather half of Swing", kAnyFolded,
       swing_all_gather, butterfly_all_gather_cost},
      {"ring", Collective::reduce_scatter,
       "p-1 steps around a ring, reduction overlapping transfer", "any world size",
       ring_reduce_scatter, ring_reduce_scatter_cost, /*pipelined=*/true},
      {"link_ring", Collective::reduce_scatter, kLinkRing, kLinksMeasured, link_ring_reduce_scatter,
       ring_reduce_scatter_cost, /*pipelined=*/true,
       /*follows_links=*/true},
      {"direct", Collective::reduce_scatter,
       "one step: block q to rank q at once, reduced as the pieces arrive", kLongPaths,
       direct_reduce_scatter, direct_reduce_scatter_cost, /*pipelined=*/true,
       /*follows_links=*/false, /*overlaps_flights=*/true},
      {"recursive_halving", Collective::reduce_scatter,
       "log2 p steps, each halving the range a rank reduces, partners 2^k apart", kAnyFolded,
       recursive_halving_reduce_scatter, butterfly_reduce_scatter_cost},
      {"swing", Collective::reduce_scatter, "the reduce-scatter half of Swing", kAnyFolded,
       swing_reduce_scatter, butterfly_reduce_scatter_cost},
      {"binomial", Collective::broadcast, "binomial tree from the root, chunk-pipelined",
       "any world size", binomial_broadcast, binomial_broadcast_cost, /*pipelined=*/true},
      {"binomial", Collective::reduce, "binomial tree towards the root, chunk-pipelined",
       "commutative ops (all of shoal's)", binomial_reduce, binomial_reduce_cost,
       /*pipelined=*/true},
      {"pairwise", Collective::all_to_all, "step i exchanges with ranks r+i and r-i",
       "any world size", pairwise_all_to_all, linear_cost},
      {"linear", Collective::gather, "every rank sends to the root at once", "any world size",
       linear_gather, linear_cost},
      {"linear", Collective::scatter, "the root sends to every rank at once", "any world size",
       linear_scatter, linear_cost},
      {"dissemination", Collective::barrier, "ceil(log2 p) rounds of empty messages",
       "any world size", dissemination_barrier, barrier_cost},
      {"direct", Collective::send, "one frame to the peer", "", point_to_point, direct_cost},
      {"direct", Collective::recv, "one frame from the peer", "", point_to_point, direct_cost},
  };
  return table;
}

const AlgorithmInfo* find_algorithm(Collective collective, std::string_view name) {
  for (const auto& row : registry())
    if (row.collective == collective && row.name == name) return &row;
  return nullptr;
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string names_for(Collective c) {
  std::string out;
  for (const auto& row : registry())
    if (row.collective == c) out += (out.empty() ? "" : ", ") + std::string(row.name);
  return out;
}

using Rules = std::shared_ptr<const std::vector<OverrideRule>>;

struct ProcessOverride {
  std::mutex mu;
  bool loaded = false;
  Rules rules;
  // Loaded, with no rule: what nearly every call finds, read without the lock (every
  // collective asks, the smallest ones included).
  std::atomic<bool> none{false};
};
ProcessOverride& process_override() {
  static ProcessOverride o;
  return o;
}
thread_local Rules thread_rules;

Rules current_rules() {
  if (thread_rules) return thread_rules;
  auto& o = process_override();
  std::lock_guard<std::mutex> lock(o.mu);
  if (!o.loaded) {  // read once; a malformed value throws here, and again on the next call
    o.rules = std::make_shared<const std::vector<OverrideRule>>(
        parse_override(config::get("SHOAL_ALGO")));
    o.loaded = true;
    o.none.store(o.rules->empty(), std::memory_order_release);
  }
  return o.rules;
}

}  // namespace

std::vector<OverrideRule> parse_override(std::string_view spec) {
  std::vector<OverrideRule> rules;
  while (!spec.empty()) {
    const size_t end = spec.find_first_of(";,");
    const std::string_view item = trim(spec.substr(0, end));
    spec = end == std::string_view::npos ? std::string_view{} : spec.substr(end + 1);
    if (item.empty()) continue;
    std::vector<std::string_view> parts;
    for (std::string_view rest = item;;) {
      const size_t colon = rest.find(':');
      parts.push_back(trim(rest.substr(0, colon)));
      if (colon == std::string_view::npos) break;
      rest = rest.substr(colon + 1);
    }
    SHOAL_CHECK(parts.size() == 2 || parts.size() == 3, InvalidArgument,
                "SHOAL_ALGO: '" << item
                                << "' is not collective:algorithm or collective:min-max:algorithm "
                                << "(example: all_reduce:rabenseifner;all_gather:0-64K:bruck)");
    OverrideRule rule{};
    bool known = false;
    for (int c = 0; c <= static_cast<int>(Collective::recv); ++c)
      if (to_string(static_cast<Collective>(c)) == parts[0]) {
        rule.collective = static_cast<Collective>(c);
        known = true;
      }
    SHOAL_CHECK(known, InvalidArgument,
                "SHOAL_ALGO: unknown collective '"
                    << parts[0]
                    << "' (all_reduce, all_gather, reduce_scatter, broadcast, "
                       "reduce, all_to_all, gather, scatter, barrier)");
    if (parts.size() == 3) {
      const std::string_view range = parts[1];
      const size_t dash = range.find('-');
      SHOAL_CHECK(dash != std::string_view::npos, InvalidArgument,
                  "SHOAL_ALGO: byte range '" << range << "' in '" << item
                                             << "' is not min-max (example: 0-64K, 1M-)");
      const std::string lo(trim(range.substr(0, dash))), hi(trim(range.substr(dash + 1)));
      rule.min_bytes = lo.empty() ? 0 : config::parse_bytes(lo, "SHOAL_ALGO range start");
      rule.max_bytes = hi.empty() ? UINT64_MAX : config::parse_bytes(hi, "SHOAL_ALGO range end");
      SHOAL_CHECK(rule.min_bytes <= rule.max_bytes, InvalidArgument,
                  "SHOAL_ALGO: byte range '" << range << "' in '" << item << "' is empty");
    }
    const std::string_view name = parts.back();
    if (const NamedPath path = named_path(name); path != NamedPath::none) {
      if (!find_path(rule.collective, name)) {
        std::string serves;
        for (const auto& info : paths()) {
          serves += serves.empty() ? "" : "; ";
          serves += info.name;
          serves += ':';
          for (const Collective c : info.collectives) {
            serves += ' ';
            serves += to_string(c);
          }
        }
        SHOAL_THROW(InvalidArgument, "SHOAL_ALGO: " << parts[0] << " has no '" << name << "' path ("
                                                    << serves << ")");
      }
      rule.path = path;
      rules.push_back(rule);
      continue;
    }
    rule.algorithm = find_algorithm(rule.collective, name);
    if (!rule.algorithm) {
      std::string serves;
      for (const auto& row : registry())
        if (row.name == name)
          serves += (serves.empty() ? "" : ", ") + std::string(to_string(row.collective));
      if (serves.empty())
        SHOAL_THROW(InvalidArgument, "SHOAL_ALGO: unknown algorithm '"
                                         << name << "' in '" << item << "'; " << parts[0]
                                         << " has: " << names_for(rule.collective));
      SHOAL_THROW(InvalidArgument, "SHOAL_ALGO: algorithm '"
                                       << name << "' does not serve " << parts[0] << " (it serves "
                                       << serves << "); " << parts[0]
                                       << " has: " << names_for(rule.collective));
    }
    rules.push_back(rule);
  }
  return rules;
}

namespace detail {

void set_algorithm_override(std::string_view spec) {
  auto rules = std::make_shared<const std::vector<OverrideRule>>(parse_override(spec));
  auto& o = process_override();
  std::lock_guard<std::mutex> lock(o.mu);
  o.none.store(rules->empty(), std::memory_order_release);
  o.rules = std::move(rules);
  o.loaded = true;
}

void set_thread_algorithm_override(std::string_view spec) {
  thread_rules = spec.empty()
                     ? nullptr
                     : std::make_shared<const std::vector<OverrideRule>>(parse_override(spec));
}

}  // namespace detail

namespace {
// The first rule for `collective` whose range holds `bytes` and that names a row or a path the
// call can take (`takeable`), or null: a path the call cannot take is as if not written.
const OverrideRule* first_match(const Rules& rules, Collective collective, uint64_t bytes,
                                PathSet takeable) {
  if (rules)
    for (const auto& rule : *rules)
      if (rule.collective == collective && bytes >= rule.min_bytes && bytes <= rule.max_bytes &&
          (rule.path == NamedPath::none || (rule.path == NamedPath::flat && takeable.flat) ||
           (rule.path == NamedPath::hierarchical && takeable.hierarchical)))
        return &rule;
  return nullptr;
}
}  // namespace

const AlgorithmInfo* override_for(Collective collective, uint64_t bytes) {
  if (!thread_rules && process_override().none.load(std::memory_order_acquire)) return nullptr;
  const Rules rules = current_rules();
  const OverrideRule* rule = first_match(rules, collective, bytes, PathSet{});
  return rule ? rule->algorithm : nullptr;
}

std::optional<OverrideRule> override_rule_for(Collective collective, uint64_t bytes,
                                              PathSet takeable) {
  if (!thread_rules && process_override().none.load(std::memory_order_acquire)) return {};
  const Rules rules = current_rules();
  const OverrideRule* rule = first_match(rules, collective, bytes, takeable);
  return rule ? std::optional<OverrideRule>(*rule) : std::nullopt;
}

const std::vector<PathInfo>& paths() {
  static const std::vector<PathInfo> table = {
      {NamedPath::flat,
       "flat",
       {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
        Collective::broadcast, Collective::reduce},
       "every rank on one host's shared memory; within SHOAL_FLAT_MAX_BYTES (all_reduce, "
       "reduce_scatter: in rounds of it beyond), or direct by address from SHOAL_FLAT_DIRECT_BYTES",
       "every rank writes its input to a shared slot (or exposes it by address) and reads or "
       "reduces its part from the others': one step a round, no messages",
       "none: taken wherever it fits (one copy in, one read per peer, no message latency); a "
       "SHOAL_ALGO row wins only beyond the slots"},
      {NamedPath::hierarchical,
       "hierarchical",
       {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter},
       "hosts of equal rank counts, several ranks and hosts each; not vectored",
       "phases on the host's group (flat or shm rows) and on the rank-aligned group across "
       "hosts (comm/hierarchical)",
       "SHOAL_HIERARCHICAL=auto: a tuning file's hierarchical times against its rows' where "
       "measured, else the cost model's phases against the best flat row (shoal-info shows "
       "both)"},
  };
  return table;
}

NamedPath named_path(std::string_view name) {
  for (const auto& info : paths())
    if (info.name == name) return info.path;
  return NamedPath::none;
}

const PathInfo* find_path(Collective collective, std::string_view name) {
  for (const auto& info : paths())
    if (info.name == name && std::find(info.collectives.begin(), info.collectives.end(),
                                       collective) != info.collectives.end())
      return &info;
  return nullptr;
}

const AlgorithmInfo& first_row(Collective collective) {
  for (const auto& row : registry())
    if (row.collective == collective) return row;
  SHOAL_THROW(Internal, "no algorithm serves " << to_string(collective));
}

const AlgorithmInfo& choose(const CollectiveArgs& args) {
  if (args.forced && args.algorithm) return *args.algorithm;
  if (const AlgorithmInfo* forced = override_for(args.collective, args.count * size_of(args.dtype)))
    return *forced;
  if (args.algorithm) {
    SHOAL_CHECK(args.algorithm->collective == args.collective, Internal,
                "the dispatcher chose " << to_string(args.algorithm->collective) << ":"
                                        << args.algorithm->name << " for "
                                        << to_string(args.collective));
    return *args.algorithm;
  }
  return first_row(args.collective);
}

uint64_t model_bytes(const CollectiveArgs& a) {
  const uint64_t n = a.count * size_of(a.dtype);
  switch (a.collective) {
    case Collective::all_gather:
    case Collective::gather:
    case Collective::reduce_scatter:
    case Collective::scatter:
      return n * static_cast<uint64_t>(a.size);
    default:
      return n;
  }
}

Schedule build_schedule(const CollectiveArgs& args, std::string* algorithm_name,
                        const AlgorithmInfo** chosen) {
  Schedule s;
  const AlgorithmInfo& row = choose(args);
  if (algorithm_name) *algorithm_name = std::string(row.name);
  if (chosen) *chosen = &row;
  row.build(s, args);
  return s;
}

}  // namespace shoal::algorithms
