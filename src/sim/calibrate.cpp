#include "sim/calibrate.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "algorithms/registry.hpp"
#include "core/check.hpp"
#include "sim/executor.hpp"

namespace shoal::sim {

using algorithms::Collective;

namespace {

Collective collective_named(const std::string& name, const std::string& where) {
  for (int c = 0; c <= static_cast<int>(Collective::recv); ++c)
    if (algorithms::to_string(static_cast<Collective>(c)) == name)
      return static_cast<Collective>(c);
  SHOAL_THROW(InvalidArgument, where << ": unknown collective '" << name << "'");
}

// "... transport shm with 3 peer(s) ..., chunk 524288 B" -> transport, chunk.
void read_communicator(const std::string& text, Measurement& m) {
  if (auto pos = text.find("transport "); pos != std::string::npos)
    m.transport =
        text.compare(pos + 10, 3, "shm") == 0 && text.find("tcp with", pos) == std::string::npos
            ? "shm"
            : "tcp";
  if (auto pos = text.find(", chunk "); pos != std::string::npos)
    m.chunk_bytes = std::stoull(text.substr(pos + 8));
}

}  // namespace

std::vector<Measurement> read_bench_file(const std::string& path, const std::string& algorithm) {
  std::ifstream f(path);
  SHOAL_CHECK(f.good(), InvalidArgument, "calibrate: cannot read " << path);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  Measurement proto;
  proto.file = path;
  proto.algorithm = algorithm;
  std::vector<Measurement> out;
  const size_t start = text.find_first_not_of(" \t\r\n");
  if (start != std::string::npos && text[start] == '{') {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
      proto.collective = collective_named(j.at("collective").get<std::string>(), path);
      proto.ranks = j.at("nranks").get<int>();
      proto.hosts = j.value("hosts", 1);
      if (auto t = parse_data_type(j.value("dtype", std::string("float32")))) proto.dtype = *t;
      read_communicator(j.value("communicator", std::string()), proto);
      if (proto.algorithm.empty()) proto.algorithm = j.value("algo", std::string());
      for (const auto& row : j.at("rows")) {
        if (row.at("out_of_place").is_null()) continue;
        Measurement m = proto;
        m.size = row.at("size").get<uint64_t>();
        m.seconds = row.at("out_of_place").at("time_us").get<double>() * 1e-6;
        // The less disturbed of the two runs of the same call (on a loaded machine they differ).
        if (row.contains("in_place") && row["in_place"].is_object())
          m.seconds = std::min(m.seconds, row["in_place"].at("time_us").get<double>() * 1e-6);
        out.push_back(m);
      }
    } catch (const nlohmann::json::exception& e) {
      SHOAL_THROW(InvalidArgument,
                  "calibrate: " << path << ": not a shoal-bench --json file: " << e.what());
    }
  } else {
    std::istringstream in(text);
    std::string line;
    int lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      if (line.rfind("# shoal-bench ", 0) ==
          0) {  // "# shoal-bench all_reduce: 4 ranks (1 hosts), dtype float32, ..."
        std::istringstream h(line.substr(14));
        std::string coll;
        h >> coll;
        if (!coll.empty() && coll.back() == ':') coll.pop_back();
        proto.collective = collective_named(coll, path + ":" + std::to_string(lineno));
        h >> proto.ranks;
        if (auto pos = line.find(" ranks ("); pos != std::string::npos)
          proto.hosts = std::stoi(line.substr(pos + 8));
        if (auto pos = line.find("dtype "); pos != std::string::npos) {
          std::string d = line.substr(pos + 6, line.find(',', pos) - pos - 6);
          if (auto t = parse_data_type(d)) proto.dtype = *t;
        }
      } else if (line.find("transport ") != std::string::npos && line.rfind("#", 0) == 0) {
        read_communicator(line, proto);
      } else if (!line.empty() && line[0] != '#') {
        std::istringstream row(line);
        std::vector<std::string> tok;
        for (std::string t; row >> t;) tok.push_back(t);
        if (tok.size() < 8) continue;
        SHOAL_CHECK(
            proto.ranks > 0, InvalidArgument,
            "calibrate: " << path << ":" << lineno << ": a row before the '# shoal-bench' header");
        Measurement m = proto;
        try {
          m.size = std::stoull(tok[0]);
          m.seconds = std::stod(tok[5]) * 1e-6;
          if (tok.size() >= 10 && tok[9] != "N/A")
            m.seconds = std::min(m.seconds, std::stod(tok[9]) * 1e-6);
        } catch (const std::exception&) {
          SHOAL_THROW(InvalidArgument,
                      "calibrate: " << path << ":" << lineno << ": not a shoal-bench row");
        }
        out.push_back(m);
      }
    }
  }
  SHOAL_CHECK(!out.empty(), InvalidArgument, "calibrate: " << path << ": no measurements");
  for (auto& m : out) {
    // Across hosts the network is a real one (the emulated cluster's shaped links, or a
    // cluster's): its own fit, apart from loopback TCP on one host.
    if (m.hosts > 1)
      m.transport = "net";
    else if (m.transport.empty())
      m.transport = "shm";
    SHOAL_CHECK(m.algorithm.empty() || algorithms::find_algorithm(m.collective, m.algorithm),
                InvalidArgument,
                "calibrate: " << path << ": " << algorithms::to_string(m.collective)
                              << " has no algorithm '" << m.algorithm << "'");
    if (m.algorithm.empty()) m.algorithm = std::string(algorithms::first_row(m.collective).name);
  }
  return out;
}

ClusterModel job_model(const Measurement& m, const ClusterModel& base) {
  ClusterModel j = base;
  j.hosts_per_leaf = 0;
  if (m.transport == "shm") {
    j.ranks_per_host = m.ranks;
  } else if (m.transport == "tcp") {
    // Loopback: no wire; a transfer is the kernel's copies on the cores every rank shares. One
    // host whose transfers all share one resource at the tcp rate and latency (nic_*).
    j.ranks_per_host = m.ranks;
    j.intra_latency = j.nic_latency;
    j.intra_bw = j.nic_bw;
    j.intra_flow_bw = 0;
  } else {
    j.ranks_per_host = m.hosts > 1 ? std::max(1, m.ranks / m.hosts) : 1;
    j.nics = 1;
  }
  if (m.transport != "net")
    j.nic_burst_bytes = 0;  // loopback has no shaper
  else
    j.stripe = 1;  // the runtime stripes over every NIC
  return j;
}

std::vector<Measurement> best_of_repeats(const std::vector<Measurement>& points) {
  std::vector<Measurement> out;
  std::map<std::tuple<int, std::string, std::string, int, int, uint64_t, int, uint64_t>, size_t>
      index;
  for (const auto& m : points) {
    const auto key =
        std::make_tuple(static_cast<int>(m.collective), m.algorithm, m.transport, m.ranks, m.hosts,
                        m.chunk_bytes, static_cast<int>(m.dtype), m.size);
    auto [it, fresh] = index.try_emplace(key, out.size());
    if (fresh)
      out.push_back(m);
    else if (m.seconds < out[it->second].seconds)
      out[it->second] = m;
  }
  return out;
}

namespace {

// latency, seconds per byte moved, seconds per byte reduced, seconds per byte copied
constexpr int kParams = 4;
using Theta = std::array<double, kParams>;

ClusterModel with_theta(ClusterModel m, const std::string& transport, const Theta& t) {
  auto bw = [](double spb) { return spb > 0 ? 1.0 / spb : 1e30; };
  if (transport == "shm") {
    m.intra_latency = t[0];
    m.intra_bw = bw(t[1]);
    m.intra_flow_bw = 0;
  } else {
    m.nic_latency = t[0];
    m.nic_bw = bw(t[1]);
  }
  m.reduce_cost = t[2];
  m.copy_cost = t[3];
  m.overhead = 0;  // keeps the time homogeneous in theta (see calibrate)
  return m;
}

// The constants theta of `transport` in a model (with_theta's inverse).
Theta theta_of(const ClusterModel& m, const std::string& transport) {
  auto spb = [](double bw) { return bw > 0 && bw < 1e30 ? 1.0 / bw : 0.0; };
  if (transport == "shm") return {m.intra_latency, spb(m.intra_bw), m.reduce_cost, m.copy_cost};
  return {m.nic_latency, spb(m.nic_bw), m.reduce_cost, m.copy_cost};
}

// Weighted non-negative least squares over kParams unknowns: tries every subset of free
// variables.
Theta nnls(const std::vector<Theta>& raw, const std::vector<double>& rhs) {
  // Columns scaled to unit norm: latency and per-byte gradients differ by ~10 orders.
  Theta scale{};
  for (const auto& r : raw)
    for (int j = 0; j < kParams; ++j) scale[j] += r[j] * r[j];
  for (int j = 0; j < kParams; ++j) scale[j] = scale[j] > 0 ? std::sqrt(scale[j]) : 1;
  std::vector<Theta> rows = raw;
  for (auto& r : rows)
    for (int j = 0; j < kParams; ++j) r[j] /= scale[j];
  Theta best{};
  double best_res = 1e300;
  for (int mask = 1; mask < (1 << kParams); ++mask) {
    std::vector<int> idx;
    for (int j = 0; j < kParams; ++j)
      if (mask >> j & 1) idx.push_back(j);
    const int k = static_cast<int>(idx.size());
    double a[kParams][kParams + 1] = {};
    for (size_t i = 0; i < rows.size(); ++i)
      for (int x = 0; x < k; ++x) {
        for (int y = 0; y < k; ++y) a[x][y] += rows[i][idx[x]] * rows[i][idx[y]];
        a[x][kParams] += rows[i][idx[x]] * rhs[i];
      }
    // Scaled Gauss-Jordan with partial pivoting; singular subsets are skipped.
    bool ok = true;
    for (int c = 0; c < k && ok; ++c) {
      int piv = c;
      for (int r = c + 1; r < k; ++r)
        if (std::fabs(a[r][c]) > std::fabs(a[piv][c])) piv = r;
      if (std::fabs(a[piv][c]) < 1e-300)
        ok = false;
      else {
        std::swap(a[c], a[piv]);
        for (int r = 0; r < k; ++r)
          if (r != c) {
            const double f = a[r][c] / a[c][c];
            for (int y = c; y <= kParams; ++y) a[r][y] -= f * a[c][y];
          }
      }
    }
    if (!ok) continue;
    Theta t{};
    for (int x = 0; x < k; ++x) {
      t[idx[x]] = a[x][kParams] / a[x][x];
      if (!(t[idx[x]] >= 0)) ok = false;
    }
    if (!ok) continue;
    double res = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      double e = -rhs[i];
      for (int j = 0; j < kParams; ++j) e += rows[i][j] * t[j];
      res += e * e;
    }
    if (res < best_res) {
      best_res = res;
      best = t;
    }
  }
  for (int j = 0; j < kParams; ++j) best[j] /= scale[j];
  return best;
}

// Nelder-Mead in log(theta) on `loss` from `start` (a constant at 0 starts from `floor`), at
// most `rounds` rounds; returns the best point seen. Used after the Gauss-Newton fit to lower
// the mean absolute relative error, which follows the median (what calibration is judged by)
// more closely than the squared error a few far points dominate.
Theta nelder_mead_log(const Theta& start, const Theta& floor,
                      const std::function<double(const Theta&)>& loss, int rounds) {
  using V = std::array<double, kParams>;
  auto theta_of = [](const V& v) {
    Theta t;
    for (int j = 0; j < kParams; ++j) t[j] = std::exp(v[j]);
    return t;
  };
  std::array<V, kParams + 1> x;
  std::array<double, kParams + 1> f;
  for (int k = 0; k <= kParams; ++k) {
    for (int j = 0; j < kParams; ++j) x[k][j] = std::log(std::max(start[j], floor[j]));
    if (k > 0) x[k][k - 1] += 0.5;  // a factor of e^0.5 on one constant
    f[k] = loss(theta_of(x[k]));
  }
  for (int round = 0; round < rounds; ++round) {
    std::array<int, kParams + 1> order;
    for (int k = 0; k <= kParams; ++k) order[k] = k;
    std::sort(order.begin(), order.end(), [&](int a, int b) { return f[a] < f[b]; });
    const int best = order[0], second_worst = order[kParams - 1], worst = order[kParams];
    V centroid{};
    for (int k = 0; k < kParams; ++k)
      for (int j = 0; j < kParams; ++j) centroid[j] += x[order[k]][j] / kParams;
    auto towards_worst = [&](double a) {
      V v;
      for (int j = 0; j < kParams; ++j) v[j] = centroid[j] + a * (x[worst][j] - centroid[j]);
      return v;
    };
    auto take = [&](const V& v, double fv) {
      x[worst] = v;
      f[worst] = fv;
    };
    const V reflected = towards_worst(-1);
    const double fr = loss(theta_of(reflected));
    if (fr < f[best]) {
      const V expanded = towards_worst(-2);
      const double fe = loss(theta_of(expanded));
      fe < fr ? take(expanded, fe) : take(reflected, fr);
    } else if (fr < f[second_worst]) {
      take(reflected, fr);
    } else {
      const V contracted = towards_worst(0.5);
      const double fc = loss(theta_of(contracted));
      if (fc < f[worst]) {
        take(contracted, fc);
      } else {  // shrink towards the best
        for (int k = 0; k <= kParams; ++k) {
          if (k == best) continue;
          for (int j = 0; j < kParams; ++j) x[k][j] = x[best][j] + 0.5 * (x[k][j] - x[best][j]);
          f[k] = loss(theta_of(x[k]));
        }
      }
    }
  }
  const int best = static_cast<int>(std::min_element(f.begin(), f.end()) - f.begin());
  return theta_of(x[best]);
}

struct Point {
  Measurement* m;
  Programs prog;
};

Programs compile_point(const Measurement& m) {
  auto a = args_for(m.collective, m.size, m.ranks, m.dtype);
  a.chunk_bytes = m.chunk_bytes;
  return compile(a, algorithms::find_algorithm(m.collective, m.algorithm), 1);
}

// A measured call whose p ranks shared `cores` cores (calibrate()), on one host (shm, loopback
// tcp): Brent's bound, the simulated time on a core per rank plus what every rank's CPU does
// in the call, over the cores — the dispatcher's model (tune::shared_cores_cost). The work is
// per message the latency and the overhead on both sides, per byte reduced the reduction cost,
// per byte copied or finalized the copy cost, and per byte sent on shared memory a core's copy
// rate (its transfers are the ranks' own copies). Loopback TCP's transfers are left out: their
// one shared rate (job_model) is already the cores' total. Across hosts ("net") the ranks' CPU
// costs and shared memory's transfers are stretched max(1, p / cores) instead (the emulated
// cluster's fit, docs/scale.md); a real network's rate is not the cores'.
double time_on_cores(const Programs& prog, const Measurement& m, ClusterModel j, int cores) {
  if (cores <= 0 || m.ranks <= cores) return simulate(prog, j).time;
  const double s = static_cast<double>(m.ranks) / cores;
  if (m.transport == "net") {
    j.intra_latency *= s;
    j.nic_latency *= s;
    j.overhead *= s;
    j.reduce_cost *= s;
    j.copy_cost *= s;
    j.nic_burst_bw /= s;  // a bucket's burst is the host's copying
    j.intra_bw /= s;
    j.intra_flow_bw /= s;
    return simulate(prog, j).time;
  }
  const double per_byte_sent =
      m.transport == "tcp" ? 0 : 1 / (j.intra_flow_bw > 0 ? j.intra_flow_bw : j.intra_bw);
  double work = 0;
  for (size_t i = 0; i < prog.steps(); ++i) {
    const auto& r = prog.rec[i];
    const double b = static_cast<double>(r.bytes);
    switch (r.kind()) {
      case algorithms::StepKind::send:
        work += j.intra_latency + 2 * j.overhead + b * per_byte_sent;
        break;
      case algorithms::StepKind::reduce:
        work += b * j.reduce_cost;
        break;
      case algorithms::StepKind::copy:
      case algorithms::StepKind::finalize:
        work += b * j.copy_cost;
        break;
      default:
        break;
    }
  }
  return simulate(prog, j).time + work / cores;
}

}  // namespace

double predict(const Measurement& m, const ClusterModel& model, int cores) {
  return time_on_cores(compile_point(m), m, job_model(m, model), cores);
}

std::vector<Fit> calibrate(std::vector<Measurement>& points, ClusterModel& model, int iterations,
                           int cores) {
  std::map<std::string, std::vector<Point>> by_transport;
  for (auto& m : points) by_transport[m.transport].push_back({&m, compile_point(m)});
  std::vector<Fit> fits;
  // net after tcp: its NIC constants are the model's; shm last: its reduce cost wins.
  for (const std::string transport : {"tcp", "net", "shm"}) {
    auto it = by_transport.find(transport);
    if (it == by_transport.end()) continue;
    auto& pts = it->second;
    // The simulated time is piecewise linear in theta (every cost is latency, bytes x seconds
    // per byte, or bytes x reduce cost) and, without a token bucket, homogeneous of degree 1:
    // T(theta) = grad T(theta) . theta. Each iteration takes the gradient at theta by finite
    // differences and solves the linear least-squares problem for the next theta
    // (Gauss-Newton), T(theta') ~ T(theta) + grad T . (theta' - theta).
    Theta theta = theta_of(model, transport);  // from the model given (its defaults otherwise)
    const Theta floor_step{1e-7, 1e-12, 1e-12, 1e-12};
    auto time_at = [&](const Point& p, const Theta& t) {
      return time_on_cores(p.prog, *p.m, job_model(*p.m, with_theta(model, transport, t)), cores);
    };
    // Points far off the first fit (a loaded machine's stalls: 1 KiB taking milliseconds)
    // are left out of the second one, and counted.
    std::vector<char> use(pts.size(), 1);
    auto mean_abs_error = [&](const Theta& t) {
      double sum = 0;
      int n = 0;
      for (size_t i = 0; i < pts.size(); ++i)
        if (use[i]) {
          sum += std::fabs(time_at(pts[i], t) - pts[i].m->seconds) / pts[i].m->seconds;
          ++n;
        }
      return n ? sum / n : 0.0;
    };
    auto fit_theta = [&] {
      for (int iter = 0; iter < iterations; ++iter) {
        std::vector<Theta> rows;
        std::vector<double> rhs;
        for (size_t i = 0; i < pts.size(); ++i) {
          if (!use[i]) continue;
          const auto& p = pts[i];
          const double base = time_at(p, theta);
          Theta g{};
          for (int j = 0; j < kParams; ++j) {
            Theta t = theta;
            const double h = std::max(theta[j] * 0.05, floor_step[j]);
            t[j] += h;
            g[j] = (time_at(p, t) - base) / h;
          }
          const double w = 1.0 / p.m->seconds;  // relative error
          Theta row;
          double fixed =
              base;  // the part of the time no constant of theta scales (a bucket's burst)
          for (int j = 0; j < kParams; ++j) {
            row[j] = g[j] * w;
            fixed -= g[j] * theta[j];
          }
          rows.push_back(row);
          rhs.push_back(1.0 - fixed * w);
        }
        const Theta next = nnls(rows, rhs);
        double change = 0;
        for (int j = 0; j < kParams; ++j)
          change =
              std::max(change, std::fabs(next[j] - theta[j]) / std::max(theta[j], floor_step[j]));
        theta = next;
        if (change < 1e-3) break;
      }
    };
    auto errors = [&] {
      std::vector<double> e;
      for (const auto& p : pts)
        e.push_back(std::fabs(time_at(p, theta) - p.m->seconds) / p.m->seconds);
      return e;
    };
    // Gauss-Newton finds the nearest optimum: it starts from the best of the model's constants
    // and a grid of latencies and transfer rates around them (with a token bucket, a start at
    // a far rate can settle where copies stand in for the network).
    {
      const Theta given = theta;
      double best = mean_abs_error(theta);
      for (double latency : {1e-6, 1e-5, 1e-4})
        for (double seconds_per_byte : {1e-8, 1e-9, 1e-10, 1e-11}) {
          Theta t = given;
          t[0] = latency;
          t[1] = seconds_per_byte;
          if (const double e = mean_abs_error(t); e < best) {
            best = e;
            theta = t;
          }
        }
    }
    fit_theta();
    {
      std::vector<double> e = errors(), sorted = e;
      std::sort(sorted.begin(), sorted.end());
      const double cut = std::max(0.25, 3 * sorted[sorted.size() / 2]);
      for (size_t i = 0; i < pts.size(); ++i) use[i] = e[i] <= cut;
      fit_theta();
    }
    const double gauss_newton_loss = mean_abs_error(theta);
    const Theta refined = nelder_mead_log(theta, floor_step, mean_abs_error, 400);
    if (mean_abs_error(refined) < gauss_newton_loss) theta = refined;
    Fit fit;
    fit.transport = transport;
    fit.latency = theta[0];
    fit.seconds_per_byte = theta[1];
    fit.reduce_cost = theta[2];
    fit.copy_cost = theta[3];
    std::vector<double> errs;
    for (auto& p : pts) {
      p.m->predicted = time_at(p, theta);
      errs.push_back(std::fabs(p.m->predicted - p.m->seconds) / p.m->seconds);
    }
    std::sort(errs.begin(), errs.end());
    fit.points = static_cast<int>(errs.size());
    fit.outliers = static_cast<int>(std::count(use.begin(), use.end(), 0));
    fit.median_error = errs.size() % 2 ? errs[errs.size() / 2]
                                       : (errs[errs.size() / 2 - 1] + errs[errs.size() / 2]) / 2;
    fit.max_error = errs.back();
    model = with_theta(model, transport, theta);
    fits.push_back(fit);
  }
  return fits;
}

}  // namespace shoal::sim
