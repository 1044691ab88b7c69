#include "sim/model.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <type_traits>

#include "core/check.hpp"

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
}

}  // namespace

std::string to_json(const ClusterModel& model) {
  ClusterModel m = model;
  nlohmann::ordered_json j;
  for_each_field(m, [&](const char* name, auto& v) { j[name] = v; });
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
  SHOAL_CHECK(base.ranks_per_host > 0 && base.nics > 0 && base.nic_bw > 0 && base.intra_bw > 0 &&
                  base.taper > 0,
              InvalidArgument,
              "model: ranks_per_host, nics, nic_bw, intra_bw and taper must be positive");
  return base;
}

ClusterModel load_model(const std::string& path, ClusterModel base) {
  std::ifstream f(path);
  SHOAL_CHECK(f.good(), InvalidArgument, "model: cannot read " << path);
  std::stringstream ss;
  ss << f.rdbuf();
  return model_from_json(ss.str(), base);
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
      rates[static_cast<size_t>(i) * static_cast<size_t>(p) + static_cast<size_t>(j)] = r;
    }
  return rates;
}

}  // namespace shoal::sim
