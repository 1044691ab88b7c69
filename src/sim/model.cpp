#include "sim/model.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <type_traits>

#include "core/check.hpp"
#include "wan/model.hpp"

namespace shoal::sim {

namespace {

// One table of the fields, so that writing and reading cannot drift apart.
template <class Fn>
void for_each_field(ClusterModel& m, Fn&& fn) {
  fn("ranks_per_host", m.ranks_per_host);
  fn("nics", m.nics);
  fn("stripe", m.stripe);
  fn("nic_bw", m.nic_bw);
  fn("nic_latency", m.nic_latency);
  fn("intra_bw", m.intra_bw);
  fn("intra_flow_bw", m.intra_flow_bw);
  fn("intra_latency", m.intra_latency);
  fn("overhead", m.overhead);
  fn("reduce_cost", m.reduce_cost);
  fn("copy_cost", m.copy_cost);
  fn("eager_bytes", m.eager_bytes);
  fn("nic_burst_bytes", m.nic_burst_bytes);
  fn("nic_burst_bw", m.nic_burst_bw);
  fn("hosts_per_leaf", m.hosts_per_leaf);
  fn("taper", m.taper);
  fn("alternate_leaves", m.alternate_leaves);
  fn("nic_down_bw", m.nic_down_bw);
  fn("regions", m.regions);
}

// A whole file's text; InvalidArgumentError "WHAT: cannot read PATH" when unreadable.
std::string read_text(const std::string& path, const char* what) {
  std::ifstream f(path);
  SHOAL_CHECK(f.good(), InvalidArgument, what << ": cannot read " << path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

std::string to_json(const ClusterModel& model) {
  ClusterModel m = model;
  nlohmann::ordered_json j;
  for_each_field(m, [&](const char* name, auto& v) { j[name] = v; });
  if (!m.paths.empty()) {
    auto& paths = j["paths"] = nlohmann::ordered_json::array();
    for (const auto& path : m.paths)
      paths.push_back({{"bw", path.bw}, {"delay", path.delay}, {"loss", path.loss}});
  }
  return j.dump(2);
}

ClusterModel model_from_json(const std::string& text, ClusterModel base) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    SHOAL_THROW(InvalidArgument, "model: not JSON: " << e.what());
  }
  SHOAL_CHECK(j.is_object(), InvalidArgument, "model: expected a JSON object of model fields");
  if (j.contains("model") && j["model"].is_object()) j = j["model"];  // calibrate's output
  for_each_field(base, [&](const char* name, auto& v) {
    if (!j.contains(name)) return;
    SHOAL_CHECK(j[name].is_number(), InvalidArgument,
                "model: field '" << name << "' is not a number");
    using T = std::remove_reference_t<decltype(v)>;
    if constexpr (std::is_unsigned_v<T>)
      SHOAL_CHECK(j[name].is_number_unsigned(), InvalidArgument,
                  "model: field '" << name << "' is negative");
    v = j[name].get<T>();
    if constexpr (!std::is_unsigned_v<T>)
      SHOAL_CHECK(v >= 0, InvalidArgument, "model: field '" << name << "' is negative");
  });
  if (j.contains("paths")) {
    SHOAL_CHECK(j["paths"].is_array(), InvalidArgument, "model: 'paths' is not a list");
    base.paths.clear();
    for (const auto& path : j["paths"]) {
      ClusterModel::Path p;
      for (auto [name, v] : {std::pair{"bw", &p.bw}, {"delay", &p.delay}, {"loss", &p.loss}}) {
        SHOAL_CHECK(path.is_object() && (!path.contains(name) || path[name].is_number()),
                    InvalidArgument, "model: a path's '" << name << "' is not a number");
        if (path.contains(name)) *v = path[name].get<double>();
      }
      base.paths.push_back(p);
    }
  }
  SHOAL_CHECK(base.nic_bw > 0 && base.intra_bw > 0, InvalidArgument,
              "model: nic_bw and intra_bw must be positive");
  check_model(base);
  return base;
}

void check_model(const ClusterModel& m) {
  SHOAL_CHECK(m.ranks_per_host > 0 && m.nics > 0 && m.taper > 0, InvalidArgument,
              "model: ranks_per_host, nics and taper must be positive");
  SHOAL_CHECK(m.regions >= 1, InvalidArgument, "model: regions must be at least 1");
  SHOAL_CHECK(m.paths.empty() ||
                  m.paths.size() == static_cast<size_t>(m.regions) * static_cast<size_t>(m.regions),
              InvalidArgument,
              "model: " << m.paths.size() << " paths for " << m.regions
                        << " regions (one per ordered pair of regions, regions x regions)");
  SHOAL_CHECK(m.regions == 1 || !m.paths.empty(), InvalidArgument,
              "model: " << m.regions << " regions but no paths between them");
  SHOAL_CHECK(m.paths.empty() || m.hosts_per_leaf == 0, InvalidArgument,
              "model: regions and a fat tree cannot be combined");
  for (const auto& p : m.paths)
    SHOAL_CHECK(p.bw >= 0 && p.delay >= 0 && p.loss >= 0 && p.loss < 1, InvalidArgument,
                "model: a path's bw, delay and loss must be at least 0 (loss below 1)");
}

ClusterModel load_model(const std::string& path, ClusterModel base) {
  return model_from_json(read_text(path, "model"), base);
}

ClusterModel frontier_model() {
  ClusterModel m;
  m.ranks_per_host = 8;
  m.nics = 4;
  m.nic_bw = 25e9;  // Slingshot 200 Gb/s
  m.nic_latency = 2e-6;
  m.intra_bw = 400e9;  // Infinity Fabric: ~50 GB/s per GCD link, 8 GCDs
  m.intra_flow_bw = 50e9;
  m.intra_latency = 1e-6;
  m.overhead = 0.2e-6;
  m.reduce_cost = 1.0 / 1.0e12;  // HBM-bound reduction on a GCD
  m.copy_cost = 0.5 / 1.0e12;
  return m;
}

std::vector<double> pair_rates(const ClusterModel& m, int p) {
  const int hosts = (p + m.ranks_per_host - 1) / m.ranks_per_host;
  const double nic = m.nic_bw * (m.stripe ? m.nics : 1),
               uplink = m.hosts_per_leaf * m.nics * m.nic_bw / m.taper;
  std::vector<double> rates(static_cast<size_t>(p) * static_cast<size_t>(p), 0);
  for (int i = 0; i < p; ++i)
    for (int j = 0; j < p; ++j) {
      if (i == j) continue;
      const int hi = m.host_of(i), hj = m.host_of(j);
      double r = nic;
      if (hi == hj)
        r = m.intra_flow_bw > 0 ? std::min(m.intra_bw, m.intra_flow_bw) : m.intra_bw;
      else if (m.hosts_per_leaf > 0 && m.leaf_of(hi, hosts) != m.leaf_of(hj, hosts))
        r = std::min(nic, uplink);
      if (hi != hj) {
        r = std::min(r, m.down_bw() * (m.stripe ? m.nics : 1));
        if (const auto* path = m.path(hi, hj); path && path->bw > 0) r = std::min(r, path->bw);
      }
      rates[static_cast<size_t>(i) * static_cast<size_t>(p) + static_cast<size_t>(j)] = r;
    }
  return rates;
}

std::vector<double> pair_latencies(const ClusterModel& m, int p) {
  std::vector<double> out(static_cast<size_t>(p) * static_cast<size_t>(p), 0);
  for (int i = 0; i < p; ++i)
    for (int j = 0; j < p; ++j) {
      if (i == j) continue;
      const int hi = m.host_of(i), hj = m.host_of(j);
      const auto* path = m.path(hi, hj);
      out[static_cast<size_t>(i) * static_cast<size_t>(p) + static_cast<size_t>(j)] =
          hi == hj ? m.intra_latency : m.nic_latency + (path ? path->delay : 0);
    }
  return out;
}

ClusterModel model_from_wan(const std::string& spec_text, ClusterModel base) {
  std::istringstream in(spec_text);
  wan::Spec spec;
  try {
    spec = wan::parse_spec(in);
  } catch (const std::invalid_argument& e) {
    SHOAL_THROW(InvalidArgument, e.what());  // "WAN spec line N: ..."
  }
  // Hosts: the namespaces in the order they first appear, each with its endpoints (NICs).
  std::vector<std::string> hosts;
  std::vector<std::vector<const wan::Endpoint*>> nics;
  for (const auto& e : spec.endpoints) {
    if (e.netns.empty()) continue;  // the root namespace's endpoint: no host of the job
    auto it = std::find(hosts.begin(), hosts.end(), e.netns);
    if (it == hosts.end()) {
      hosts.push_back(e.netns);
      nics.emplace_back();
      it = hosts.end() - 1;
    }
    nics[static_cast<size_t>(it - hosts.begin())].push_back(&e);
  }
  SHOAL_CHECK(!hosts.empty(), InvalidArgument, "WAN spec: no endpoint inside a namespace");
  const auto& first = *nics[0][0];
  SHOAL_CHECK(first.up_bps > 0 && first.down_bps > 0, InvalidArgument,
              "WAN spec: a host's NICs must be shaped (up and down rates above 0)");
  std::vector<int> used(static_cast<size_t>(spec.regions), 0);
  for (size_t h = 0; h < hosts.size(); ++h) {
    SHOAL_CHECK(nics[h].size() == nics[0].size(), InvalidArgument,
                "WAN spec: host " << hosts[h] << " has " << nics[h].size() << " NICs, " << hosts[0]
                                  << " " << nics[0].size());
    for (const auto* e : nics[h]) {
      SHOAL_CHECK(e->up_bps == first.up_bps && e->down_bps == first.down_bps, InvalidArgument,
                  "WAN spec: " << hosts[h] << "'s " << e->dev
                               << " differs in rate from the first NIC (the model holds one)");
      SHOAL_CHECK(e->region == nics[h][0]->region, InvalidArgument,
                  "WAN spec: the NICs of " << hosts[h] << " lie in different regions");
    }
    used[static_cast<size_t>(nics[h][0]->region)] = 1;
  }
  // Regions as the hosts use them (the root's, which none uses, dropped), host h in h mod R.
  std::vector<int> index(static_cast<size_t>(spec.regions), -1);
  int regions = 0;
  for (int r = 0; r < spec.regions; ++r)
    if (used[static_cast<size_t>(r)]) index[static_cast<size_t>(r)] = regions++;
  for (size_t h = 0; h < hosts.size(); ++h)
    SHOAL_CHECK(index[static_cast<size_t>(nics[h][0]->region)] ==
                    static_cast<int>(h % static_cast<size_t>(regions)),
                InvalidArgument,
                "WAN spec: host " << h << " (" << hosts[h] << ") is not in region " << h << " mod "
                                  << regions << " (the model's layout, netcluster.sh's)");
  ClusterModel m = base;
  m.nics = static_cast<int>(nics[0].size());
  m.nic_bw = first.up_bps / 8;
  m.nic_down_bw = first.down_bps == first.up_bps ? 0 : first.down_bps / 8;
  m.regions = regions;
  m.paths.assign(static_cast<size_t>(regions) * static_cast<size_t>(regions), {});
  for (int a = 0; a < spec.regions; ++a)
    for (int b = 0; b < spec.regions; ++b) {
      const int ia = index[static_cast<size_t>(a)], ib = index[static_cast<size_t>(b)];
      if (ia < 0 || ib < 0) continue;
      const auto& w = spec.path(a, b);
      m.paths[static_cast<size_t>(ia) * static_cast<size_t>(regions) + static_cast<size_t>(ib)] = {
          w.bps / 8, static_cast<double>(w.delay_ns) * 1e-9, w.loss};
    }
  m.hosts_per_leaf = 0;
  check_model(m);
  return m;
}

ClusterModel load_wan_model(const std::string& path, ClusterModel base) {
  return model_from_wan(read_text(path, "WAN spec"), base);
}

}  // namespace shoal::sim
