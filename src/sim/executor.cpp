#include "sim/executor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/check.hpp"

namespace shoal::sim {

using algorithms::Collective;
using algorithms::StepKind;

algorithms::CollectiveArgs args_for(Collective collective, uint64_t size_bytes, int p,
                                    DataType dtype) {
  algorithms::CollectiveArgs a;
  a.collective = collective;
  a.dtype = dtype;
  a.size = p;
  a.root = 0;
  const uint64_t count = size_bytes / size_of(dtype);
  switch (collective) {
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::gather:
    case Collective::scatter:
    case Collective::all_to_all:
      a.count = count / static_cast<uint64_t>(p);
      break;
    default:
      a.count = count;
  }
  return a;
}

double bus_factor(Collective c, int p) {
  if (p <= 1) return 1;
  const double f = static_cast<double>(p - 1) / p;
  switch (c) {
    case Collective::all_reduce:
      return 2 * f;
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::all_to_all:
      return f;
    default:
      return 1;
  }
}

namespace {

// One rank's steps in compact form, built by a worker thread.
struct RankProg {
  std::vector<uint8_t> kind;
  std::vector<uint64_t> bytes;
  std::vector<int32_t> peer;
  std::vector<uint32_t> ndeps, out_first, out;
};

RankProg build_rank(const algorithms::CollectiveArgs& proto, const Builder& build, int r) {
  algorithms::CollectiveArgs a = proto;
  a.rank = r;
  algorithms::Schedule s;
  build(s, a);
  RankProg rp;
  const size_t n = s.steps.size();
  rp.kind.resize(n);
  rp.bytes.resize(n);
  rp.peer.resize(n);
  rp.ndeps.assign(n, 0);
  rp.out_first.assign(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    const auto& st = s.steps[i];
    rp.kind[i] = static_cast<uint8_t>(st.kind);
    rp.peer[i] = st.peer;
    rp.bytes[i] = st.kind == StepKind::send ? st.src.bytes : st.dst.bytes;
  }
  for (auto [from, to] : s.edges) {
    ++rp.ndeps[to];
    ++rp.out_first[from + 1];
  }
  for (size_t i = 0; i < n; ++i) rp.out_first[i + 1] += rp.out_first[i];
  rp.out.resize(s.edges.size());
  std::vector<uint32_t> fill(rp.out_first.begin(), rp.out_first.end() - 1);
  for (auto [from, to] : s.edges) rp.out[fill[from]++] = to;
  return rp;
}

}  // namespace

Programs compile(const algorithms::CollectiveArgs& proto, const algorithms::AlgorithmInfo* row,
                 int threads) {
  if (row) return compile(proto, Builder(row->build), threads);
  return compile(proto, Builder([](algorithms::Schedule& s, const algorithms::CollectiveArgs& a) {
                   s = algorithms::build_schedule(a);
                 }),
                 threads);
}

Programs compile(const algorithms::CollectiveArgs& proto, const Builder& build, int threads) {
  const auto t0 = std::chrono::steady_clock::now();
  Programs pg;
  const int p = proto.size;
  pg.p = p;
  pg.first.reserve(p + 1);
  if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
  std::unordered_map<uint64_t, uint32_t> chan_of;
  auto channel = [&](int src, int dst) {
    const uint64_t key = (static_cast<uint64_t>(src) << 32) | static_cast<uint32_t>(dst);
    auto [it, fresh] = chan_of.try_emplace(key, static_cast<uint32_t>(pg.channels.size()));
    if (fresh) pg.channels.push_back({src, dst, {}, {}});
    return it->second;
  };
  // Batches keep the memory of uncompacted schedules bounded; workers build, this thread merges.
  const int batch = 16 * threads;
  std::vector<RankProg> built(batch);
  for (int lo = 0; lo < p; lo += batch) {
    const int hi = std::min(p, lo + batch);
    std::vector<std::thread> workers;
    std::exception_ptr failure;
    std::mutex mu;
    for (int w = 0; w < threads; ++w)
      workers.emplace_back([&, w] {
        try {
          for (int r = lo + w; r < hi; r += threads) built[r - lo] = build_rank(proto, build, r);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          failure = std::current_exception();
        }
      });
    for (auto& t : workers) t.join();
    if (failure) std::rethrow_exception(failure);
    for (int r = lo; r < hi; ++r) {
      RankProg& rp = built[r - lo];
      const uint32_t base = static_cast<uint32_t>(pg.rec.size());
      SHOAL_CHECK(
          pg.rec.size() + rp.kind.size() < UINT32_MAX && pg.out.size() + rp.out.size() < UINT32_MAX,
          InvalidArgument,
          "simulation: more than 4G steps or edges; use fewer ranks or a larger chunk");
      pg.first.push_back(base);
      const uint32_t out_base = static_cast<uint32_t>(pg.out.size());
      for (uint32_t d : rp.out) pg.out.push_back(base + d);
      for (size_t i = 0; i < rp.kind.size(); ++i) {
        const auto k = static_cast<StepKind>(rp.kind[i]);
        uint32_t c = UINT32_MAX;
        if (k == StepKind::send) {
          c = channel(r, rp.peer[i]);
          pg.channels[c].sends.push_back(base + static_cast<uint32_t>(i));
        } else if (k == StepKind::recv) {
          c = channel(rp.peer[i], r);
          pg.channels[c].recvs.push_back(base + static_cast<uint32_t>(i));
        }
        pg.rec.push_back({rp.bytes[i], c, rp.ndeps[i], out_base + rp.out_first[i],
                          static_cast<uint32_t>(r) << 8 | rp.kind[i]});
      }
      rp = RankProg{};
    }
  }
  pg.first.push_back(static_cast<uint32_t>(pg.rec.size()));
  pg.rec.push_back(
      {0, 0, 0, static_cast<uint32_t>(pg.out.size()), 0});  // the end of the dependents
  // Every frame must meet a receive of the same length (the pairing rule of schedule.hpp).
  for (const auto& ch : pg.channels) {
    if (!pg.error.empty()) break;
    if (ch.sends.size() != ch.recvs.size()) {
      pg.error = "rank " + std::to_string(ch.src) + " sends " + std::to_string(ch.sends.size()) +
                 " frames to " + std::to_string(ch.dst) + ", which receives " +
                 std::to_string(ch.recvs.size());
      break;
    }
    for (size_t k = 0; k < ch.sends.size(); ++k)
      if (pg.rec[ch.sends[k]].bytes != pg.rec[ch.recvs[k]].bytes) {
        pg.error = "frame " + std::to_string(k) + " from rank " + std::to_string(ch.src) + " to " +
                   std::to_string(ch.dst) + ": " + std::to_string(pg.rec[ch.sends[k]].bytes) +
                   " bytes sent, " + std::to_string(pg.rec[ch.recvs[k]].bytes) + " expected";
        break;
      }
  }
  pg.build_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return pg;
}

namespace {

constexpr double kInfinite = 1e300;

enum class Ev : uint8_t { local_done, flow_start, flow_done, deliver, recv_done, bucket_empty };

struct Event {
  double t;
  uint64_t seq;  // ties in insertion order: deterministic
  Ev kind;
  uint32_t id, ver;
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

struct Flow {
  uint32_t send = 0, chan = 0, ver = 0;
  double remaining = 0, rate = 0, t = 0, cap = kInfinite, latency = 0;
  uint32_t res[4] = {0, 0, 0, 0}, pos[4] = {0, 0, 0, 0};
  int nres = 0;
};

struct Resource {
  double cap = kInfinite;
  std::vector<uint32_t> flows;
  // A token bucket (ClusterModel::nic_burst_bytes; burst 0: none): `tokens` bytes at time `t`,
  // refilled at `sustained` and drained by `usage` (the sum of its flows' rates); cap is `peak`
  // while tokens last, `sustained` once they are out.
  double burst = 0, tokens = 0, sustained = 0, peak = 0, usage = 0, t = 0;
  uint32_t ver = 0;  // of its pending bucket_empty event
};

class Simulator {
 public:
  // `bucket_level`: every token bucket's level at the start, a fraction of full.
  Simulator(const Programs& pg, const ClusterModel& m, double bucket_level = 1.0) : pg_(pg), m_(m) {
    const int p = pg.p;
    hosts_ = (p + m.ranks_per_host - 1) / m.ranks_per_host;
    leaves_ = m.hosts_per_leaf > 0 ? (hosts_ + m.hosts_per_leaf - 1) / m.hosts_per_leaf : 0;
    const int nic_slots = hosts_ * m.nics;
    lines_ = m.paths.empty() ? 0 : m.regions * m.regions;
    res_.resize(2 * nic_slots + hosts_ + 2 * leaves_ + lines_);
    auto cap = [](double bw) { return bw > 0 ? bw : kInfinite; };
    const bool bucket = m.nic_burst_bytes > 0 && m.nic_burst_bw > 0;
    // Striped: a host's NIC 0 stands for all of them (nic_of() is 0), the others stay idle.
    const double rails = m.stripe ? m.nics : 1;
    for (int i = 0; i < 2 * nic_slots; ++i) {
      const double bw = i < nic_slots ? m.nic_bw : m.down_bw();  // out, then in
      res_[i].cap = cap(bw * rails);
      if (bucket) {
        res_[i].burst = static_cast<double>(m.nic_burst_bytes) * rails;
        res_[i].tokens = bucket_level * res_[i].burst;
        res_[i].sustained = bw * rails;
        res_[i].peak = cap(m.nic_burst_bw * rails);
        res_[i].cap = res_[i].peak;
      }
    }
    for (int h = 0; h < hosts_; ++h) res_[2 * nic_slots + h].cap = cap(m.intra_bw);
    const double core = m.hosts_per_leaf * m.nics * m.nic_bw / m.taper;
    for (int l = 0; l < 2 * leaves_; ++l) res_[2 * nic_slots + hosts_ + l].cap = cap(core);
    for (int l = 0; l < lines_; ++l)
      res_[2 * nic_slots + hosts_ + 2 * leaves_ + l].cap = cap(m.paths[l].bw);
    remaining_.resize(pg.steps());
    for (size_t i = 0; i < pg.steps(); ++i) remaining_[i] = pg.rec[i].ndeps;
    arrived_.assign(pg.steps(), 0);
    core_free_.assign(p, 0.0);
    head_.assign(pg.channels.size(), 0);
    busy_.assign(pg.channels.size(), 0);
  }

  SimResult run() {
    const auto t0 = std::chrono::steady_clock::now();
    SimResult res;
    for (uint32_t i = 0; i < pg_.steps(); ++i)
      if (remaining_[i] == 0) ready_.push_back(i);
    drain_ready();
    while (!q_.empty()) {
      std::pop_heap(q_.begin(), q_.end(), std::greater<>{});
      const Event e = q_.back();
      q_.pop_back();
      // Superseded events (a flow's completion before its rate changed, a bucket's last
      // token before its usage did) do not move the clock: the call ends at its last real event.
      if (superseded(e)) continue;
      now_ = e.t;
      ++res.events;
      switch (e.kind) {
        case Ev::local_done:
        case Ev::recv_done:
          complete(e.id);
          break;
        case Ev::flow_start:
          begin_flow(e.id);
          break;
        case Ev::flow_done:
          end_flow(e.id);
          break;
        case Ev::deliver:
          arrived_[e.id] = 1;
          if (remaining_[e.id] == 0) finish_recv(e.id);
          break;
        case Ev::bucket_empty:
          fill(e.id);
          res_[e.id].tokens = 0;
          rerate(e.id);
          break;
      }
      drain_ready();
    }
    res.time = now_;
    res.messages = messages_;
    res.bytes_sent = bytes_sent_;
    res.bytes_received = bytes_received_;
    res.reduce_bytes = reduce_bytes_;
    res.copy_bytes = copy_bytes_;
    if (done_ != pg_.steps()) {
      for (uint32_t i = 0; i < pg_.steps(); ++i)
        if (remaining_[i] != kDone) {
          const auto k = pg_.rec[i].kind();
          const int r = pg_.rec[i].rank();
          const auto& ch = k == StepKind::send || k == StepKind::recv
                               ? pg_.channels[pg_.rec[i].chan]
                               : Programs::Channel{};
          res.error = "deadlock: " + std::to_string(pg_.steps() - done_) +
                      " steps never ran; the first: rank " + std::to_string(r) + " step " +
                      std::to_string(i - pg_.first[r]) +
                      (k == StepKind::send   ? " (send to " + std::to_string(ch.dst) + ")"
                       : k == StepKind::recv ? " (recv from " + std::to_string(ch.src) + ")"
                                             : "");
          break;
        }
    }
    res.run_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
  }

  // The most drained bucket's level now, a fraction of full (after run(): what the next call
  // would start with on the busiest link; idle ones only refill). 1 without buckets.
  double lowest_bucket_level() {
    double least = 1;
    for (uint32_t r = 0; r < res_.size(); ++r)
      if (res_[r].burst > 0) {
        fill(r);
        least = std::min(least, res_[r].tokens / res_[r].burst);
      }
    return least;
  }

 private:
  static constexpr uint32_t kDone = UINT32_MAX;

  bool superseded(const Event& e) const {
    return (e.kind == Ev::flow_done && flows_[e.id].ver != e.ver) ||
           (e.kind == Ev::bucket_empty && res_[e.id].ver != e.ver);
  }

  void push(double t, Ev kind, uint32_t id, uint32_t ver = 0) {
    // Every rate change supersedes a flow's pending completion, and n flows sharing a link all
    // change at once: with thousands of flows per NIC (a hierarchical all_gather's H-1 direct
    // messages per rank) the stale events outnumber the live ones by orders of magnitude. The
    // queue is purged of them whenever it doubles, so it holds O(live events). (t, seq) is a
    // total order: the order of pops does not depend on the heap's layout.
    if (q_.size() >= 2 * compacted_size_ && q_.size() >= (1u << 16)) {
      std::erase_if(q_, [&](const Event& e) { return superseded(e); });
      std::make_heap(q_.begin(), q_.end(), std::greater<>{});
      compacted_size_ = q_.size();
    }
    q_.push_back({t, seq_++, kind, id, ver});
    std::push_heap(q_.begin(), q_.end(), std::greater<>{});
  }

  // Reserves `cost` seconds of rank r's core from now (or when it is free); returns the end.
  double reserve(int r, double cost) {
    const double start = std::max(now_, core_free_[r]);
    core_free_[r] = start + cost;
    return core_free_[r];
  }

  void complete(uint32_t i) {
    remaining_[i] = kDone;
    ++done_;
    for (uint32_t k = pg_.rec[i].out_first, end = pg_.rec[i + 1].out_first; k < end; ++k)
      if (--remaining_[pg_.out[k]] == 0) ready_.push_back(pg_.out[k]);
  }

  void drain_ready() {
    while (!ready_.empty()) {
      const uint32_t i = ready_.back();
      ready_.pop_back();
      const Programs::Rec& x = pg_.rec[i];
      const uint64_t b = x.bytes;
      switch (x.kind()) {
        case StepKind::send:
          try_channel(x.chan);
          break;
        case StepKind::recv:
          if (arrived_[i])
            finish_recv(i);
          else
            try_channel(x.chan);
          break;
        case StepKind::reduce:
          reduce_bytes_ += b;
          push(reserve(x.rank(), b * m_.reduce_cost), Ev::local_done, i);
          break;
        case StepKind::copy:
        case StepKind::finalize:
          copy_bytes_ += b;
          push(reserve(x.rank(), b * m_.copy_cost), Ev::local_done, i);
          break;
      }
    }
  }

  void finish_recv(uint32_t i) {
    bytes_received_ += pg_.rec[i].bytes;
    if (m_.overhead > 0)
      push(reserve(pg_.rec[i].rank(), m_.overhead), Ev::recv_done, i);
    else
      complete(i);
  }

  void try_channel(uint32_t c) {
    if (busy_[c]) return;
    const auto& ch = pg_.channels[c];
    const size_t h = head_[c];
    if (h >= ch.sends.size()) return;
    const uint32_t s = ch.sends[h], r = ch.recvs[h];
    if (remaining_[s] != 0) return;
    const uint64_t bytes = pg_.rec[s].bytes;
    if (bytes > m_.eager_bytes && remaining_[r] != 0) return;  // rendezvous
    busy_[c] = 1;
    uint32_t f;
    if (!free_flows_.empty()) {
      f = free_flows_.back();
      free_flows_.pop_back();
    } else {
      f = static_cast<uint32_t>(flows_.size());
      flows_.emplace_back();
    }
    Flow& fl = flows_[f];
    fl.send = s;
    fl.chan = c;
    fl.nres = 0;
    fl.remaining = static_cast<double>(bytes);
    ++messages_;
    bytes_sent_ += bytes;
    if (m_.overhead > 0)
      push(reserve(ch.src, m_.overhead), Ev::flow_start, f);
    else
      begin_flow(f);
  }

  void begin_flow(uint32_t f) {
    Flow& fl = flows_[f];
    const auto& ch = pg_.channels[fl.chan];
    const int hs = m_.host_of(ch.src), hd = m_.host_of(ch.dst);
    const int nic_slots = hosts_ * m_.nics;
    fl.t = now_;
    fl.rate = 0;
    fl.cap = kInfinite;
    if (hs == hd) {
      fl.res[fl.nres++] = 2 * nic_slots + hs;
      if (m_.intra_flow_bw > 0) fl.cap = m_.intra_flow_bw;
      fl.latency = m_.intra_latency;
    } else {
      fl.res[fl.nres++] = hs * m_.nics + m_.nic_of(ch.src);
      fl.res[fl.nres++] = nic_slots + hd * m_.nics + m_.nic_of(ch.dst);
      if (leaves_ > 0) {
        const int ls = m_.leaf_of(hs, hosts_), ld = m_.leaf_of(hd, hosts_);
        if (ls != ld) {
          fl.res[fl.nres++] = 2 * nic_slots + hosts_ + ls;
          fl.res[fl.nres++] = 2 * nic_slots + hosts_ + leaves_ + ld;
        }
      }
      fl.latency = m_.nic_latency;
      if (const auto* path = m_.path(hs, hd)) {
        fl.latency += path->delay;
        const int ra = m_.region_of(hs), rb = m_.region_of(hd);
        if (ra != rb && path->bw > 0)
          fl.res[fl.nres++] = 2 * nic_slots + hosts_ + 2 * leaves_ + ra * m_.regions + rb;
      }
    }
    if (fl.remaining <= 0) {  // an empty frame: only its latency
      fl.nres = 0;
      end_flow(f);
      return;
    }
    for (int k = 0; k < fl.nres; ++k) {
      auto& list = res_[fl.res[k]].flows;
      fl.pos[k] = static_cast<uint32_t>(list.size());
      list.push_back(f);
    }
    for (int k = 0; k < flows_[f].nres; ++k) rerate(flows_[f].res[k]);
  }

  void end_flow(uint32_t f) {
    Flow& fl = flows_[f];
    ++fl.ver;  // drops any pending completion of this flow
    const uint32_t touched[4] = {fl.res[0], fl.res[1], fl.res[2], fl.res[3]};
    const int n = fl.nres;
    for (int k = 0; k < n; ++k) {  // swap-remove from each resource's list
      use(fl.res[k], -fl.rate);
      auto& list = res_[fl.res[k]].flows;
      const uint32_t last = list.back();
      list[fl.pos[k]] = last;
      Flow& lf = flows_[last];
      for (int j = 0; j < lf.nres; ++j)
        if (lf.res[j] == fl.res[k]) {
          lf.pos[j] = fl.pos[k];
          break;
        }
      list.pop_back();
    }
    fl.nres = 0;
    const uint32_t c = fl.chan, s = fl.send;
    const double latency = fl.latency;
    free_flows_.push_back(f);
    for (int k = 0; k < n; ++k) rerate(touched[k]);
    // The sender's buffer is free; the last byte lands a latency later.
    const auto& ch = pg_.channels[c];
    push(now_ + latency, Ev::deliver, ch.recvs[head_[c]]);
    ++head_[c];
    busy_[c] = 0;
    complete(s);
    try_channel(c);
  }

  // Brings a bucket's tokens to now.
  void fill(uint32_t r) {
    Resource& x = res_[r];
    if (x.burst == 0) return;
    x.tokens = std::clamp(x.tokens + (x.sustained - x.usage) * (now_ - x.t), 0.0, x.burst);
    x.t = now_;
  }

  // A filled bucket's event of its last token, if it drains (any earlier one superseded).
  void schedule_empty(uint32_t r) {
    Resource& x = res_[r];
    ++x.ver;
    if (x.cap == x.peak && x.usage > x.sustained && x.peak > x.sustained)
      push(now_ + x.tokens / (x.usage - x.sustained), Ev::bucket_empty, r, x.ver);
  }

  // Adds `delta` to resource r's usage (its bucket's drain).
  void use(uint32_t r, double delta) {
    Resource& x = res_[r];
    if (x.burst == 0) return;
    fill(r);
    x.usage = std::max(0.0, x.usage + delta);
    schedule_empty(r);
  }

  // Recomputes the rate of every flow on resource r (its count or its cap changed).
  void rerate(uint32_t r) {
    if (Resource& x = res_[r]; x.burst > 0) {  // tokens left (or refilled): the peak rate
      fill(r);
      x.cap = x.tokens >= 1 ? x.peak : x.sustained;
      schedule_empty(r);
    }
    for (uint32_t f : res_[r].flows) {
      Flow& fl = flows_[f];
      fl.remaining = std::max(0.0, fl.remaining - fl.rate * (now_ - fl.t));
      fl.t = now_;
      double rate = fl.cap;
      for (int k = 0; k < fl.nres; ++k) {
        const Resource& x = res_[fl.res[k]];
        rate = std::min(rate, x.cap / static_cast<double>(x.flows.size()));
      }
      if (rate != fl.rate) {
        for (int k = 0; k < fl.nres; ++k) use(fl.res[k], rate - fl.rate);
        fl.rate = rate;
        ++fl.ver;
        push(now_ + (rate >= kInfinite ? 0 : fl.remaining / rate), Ev::flow_done, f, fl.ver);
      }
    }
  }

  const Programs& pg_;
  const ClusterModel& m_;
  int hosts_ = 0, leaves_ = 0, lines_ = 0;  // lines_: between regions, regions x regions
  std::vector<Resource> res_;
  std::vector<Flow> flows_;
  std::vector<uint32_t> free_flows_;
  std::vector<uint32_t> remaining_;
  std::vector<uint8_t> arrived_;
  std::vector<double> core_free_;
  std::vector<size_t> head_;
  std::vector<uint8_t> busy_;
  std::vector<uint32_t> ready_;
  std::vector<Event> q_;       // a min-heap on (t, seq)
  size_t compacted_size_ = 0;  // the queue's size after its last purge
  double now_ = 0;
  uint64_t seq_ = 0, done_ = 0, messages_ = 0, bytes_sent_ = 0, bytes_received_ = 0,
           reduce_bytes_ = 0, copy_bytes_ = 0;
};

}  // namespace

SimResult simulate(const Programs& prog, const ClusterModel& model) {
  if (!prog.error.empty()) {
    SimResult r;
    r.error = prog.error;
    return r;
  }
  check_model(model);
  if (model.nic_burst_bytes == 0 || model.nic_burst_bw <= 0) return Simulator(prog, model).run();
  SimResult res;
  double run_seconds = 0;
  // Every bucket at `level` of full at the start: the call's result (in res), and how much
  // fuller (> 0) or emptier (< 0) it left the most drained one, as a fraction of full.
  auto change = [&](double level) {
    Simulator sim(prog, model, level);
    res = sim.run();
    run_seconds += res.run_seconds;
    return sim.lowest_bucket_level() - level;
  };
  // The steady level: full when a call leaves them full (links idle enough), empty when a call
  // from empty buckets leaves them (nearly) empty (the links the bottleneck), else bisection.
  const double tolerance = 1e-3;
  if (change(1.0) < -tolerance && res.error.empty() && change(0.0) > tolerance) {
    double lo = 0, hi = 1;
    for (int i = 0; i < 10; ++i) {
      const double mid = (lo + hi) / 2;
      (change(mid) < 0 ? hi : lo) = mid;
    }
    change(lo);
  }
  res.run_seconds = run_seconds;
  return res;
}

}  // namespace shoal::sim
