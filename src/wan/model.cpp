#include "wan/model.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace shoal::wan {

uint32_t parse_ipv4(const std::string& text) {
  uint32_t addr = 0;
  int parts = 0;
  size_t i = 0;
  while (i <= text.size() && parts < 4) {
    size_t end = text.find('.', i);
    if (end == std::string::npos) end = text.size();
    const std::string part = text.substr(i, end - i);
    if (part.empty() || part.size() > 3 ||
        part.find_first_not_of("0123456789") != std::string::npos || std::stoi(part) > 255)
      break;
    addr = addr << 8 | static_cast<uint32_t>(std::stoi(part));
    ++parts;
    i = end + 1;
  }
  if (parts != 4 || i != text.size() + 1)
    throw std::invalid_argument("not an IPv4 address: '" + text + "'");
  return addr;
}

Spec parse_spec(std::istream& in) {
  Spec s;
  std::string line;
  int n = 0;
  bool have_regions = false;
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument("WAN spec line " + std::to_string(n) + ": " + why + ": '" + line +
                                "'");
  };
  auto region_ok = [&](int r) { return r >= 0 && r < s.regions; };
  while (std::getline(in, line)) {
    ++n;
    const std::string text = line.substr(0, line.find('#'));
    std::istringstream words(text);
    std::string what;
    if (!(words >> what)) continue;
    if (what == "regions") {
      if (have_regions || !s.endpoints.empty()) fail("regions comes once, first");
      if (!(words >> s.regions) || s.regions < 1 || s.regions > 64) fail("1 to 64 regions");
      have_regions = true;
      s.paths.assign(static_cast<size_t>(s.regions) * s.regions, Path{});
    } else if (!have_regions) {
      fail("the spec starts with 'regions R'");
    } else if (what == "endpoint") {
      Endpoint e;
      std::string addr;
      if (!(words >> e.netns >> e.dev >> addr >> e.up_bps >> e.down_bps >> e.region))
        fail("endpoint NETNS|- DEV ADDR UP_BPS DOWN_BPS REGION");
      if (e.netns == "-") e.netns.clear();
      try {
        e.addr = parse_ipv4(addr);
      } catch (const std::invalid_argument& x) {
        fail(x.what());
      }
      if (e.up_bps < 0 || e.down_bps < 0) fail("rates are bit/s, 0 for unshaped");
      if (!region_ok(e.region)) fail("no such region");
      if (e.dev.empty() || e.dev.size() > 15) fail("device names are 1-15 characters");
      for (const Endpoint& o : s.endpoints)
        if (o.addr == e.addr) fail("address already held by another endpoint");
      s.endpoints.push_back(e);
    } else if (what == "path") {
      int from, to;
      Path p;
      if (!(words >> from >> to >> p.bps >> p.delay_ns >> p.jitter_ns >> p.loss) ||
          !region_ok(from) || !region_ok(to))
        fail("path FROM TO BPS DELAY_NS JITTER_NS LOSS");
      if (p.bps < 0) fail("rates are bit/s, 0 for unshaped");
      if (p.delay_ns < 0 || p.jitter_ns < 0 || p.jitter_ns > p.delay_ns)
        fail("delay and jitter are >= 0 and jitter is at most the delay");
      if (!(p.loss >= 0 && p.loss < 1)) fail("loss is a probability below 1");
      s.paths[from * s.regions + to] = p;
    } else if (what == "queue_ns") {
      if (!(words >> s.queue_ns) || s.queue_ns <= 0) fail("queue_ns N, N > 0");
    } else if (what == "seed") {
      if (!(words >> s.seed)) fail("seed N");
    } else if (what == "mtu") {
      if (!(words >> s.mtu) || s.mtu < 576 || s.mtu > 65535) fail("mtu 576 to 65535");
    } else {
      fail("unknown statement");
    }
    std::string extra;
    if (words >> extra) fail("more words than the statement takes");
  }
  if (!have_regions) throw std::invalid_argument("WAN spec: empty (no 'regions R' line)");
  if (s.endpoints.empty()) throw std::invalid_argument("WAN spec: no endpoint");
  return s;
}

namespace {
double ns_per_byte(double bps) { return bps > 0 ? 8e9 / bps : 0; }
}  // namespace

Network::Network(const Spec& spec) : spec_(spec), rng_(spec.seed) {
  for (const Endpoint& e : spec_.endpoints) {
    fifos_.push_back({ns_per_byte(e.up_bps), 0});
    fifos_.push_back({ns_per_byte(e.down_bps), 0});
  }
  for (const Path& p : spec_.paths) fifos_.push_back({ns_per_byte(p.bps), 0});
  for (size_t i = 0; i < spec_.endpoints.size(); ++i)
    routes_.emplace_back(spec_.endpoints[i].addr, static_cast<int>(i));
  std::sort(routes_.begin(), routes_.end());
}

int Network::route(uint32_t addr) const {
  auto it = std::lower_bound(routes_.begin(), routes_.end(), std::make_pair(addr, -1));
  return it != routes_.end() && it->first == addr ? it->second : -1;
}

uint32_t Network::slot() {
  if (!free_.empty()) {
    const uint32_t p = free_.back();
    free_.pop_back();
    return p;
  }
  packets_.emplace_back();
  return static_cast<uint32_t>(packets_.size() - 1);
}

void Network::inject(uint64_t id, int src, int dst, uint32_t bytes, int64_t now_ns) {
  const uint32_t p = slot();
  Packet& k = packets_[p];
  const int from = spec_.endpoints[src].region, to = spec_.endpoints[dst].region;
  const int base = 2 * static_cast<int>(spec_.endpoints.size());
  k = Packet{id, dst, bytes, 0, 0, {}, &spec_.path(from, to)};
  k.route[k.hops++] = {2 * src};                           // the sender's uplink
  k.route[k.hops++] = {base + from * spec_.regions + to};  // the line between the regions
  k.route[k.hops++] = {-1};                                // propagation
  k.route[k.hops++] = {2 * dst + 1};                       // the receiver's downlink
  ++stats_.injected;
  step(p, now_ns, nullptr);
}

void Network::step(uint32_t p, int64_t t, std::vector<Event>* out) {
  Packet& k = packets_[p];
  auto finish = [&](bool dropped) {
    if (!dropped) {
      ++stats_.delivered;
      stats_.delivered_bytes += k.bytes;
    }
    if (out) {
      out->push_back({k.id, k.dst, dropped});
      free_.push_back(p);
    } else {  // inject() has no list to hand a drop to: the next advance() reports it
      due_.push({t, seq_++, p | kDropped});
    }
  };
  if (k.hop == k.hops) return finish(false);
  const Hop hop = k.route[k.hop++];
  int64_t leave = t;
  if (hop.fifo < 0) {
    const Path& path = *k.path;
    if (path.loss > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < path.loss) {
      ++stats_.lost;
      return finish(true);
    }
    leave = t + path.delay_ns;
    if (path.jitter_ns > 0)
      leave += std::uniform_int_distribution<int64_t>(-path.jitter_ns, path.jitter_ns)(rng_);
  } else {
    Fifo& f = fifos_[hop.fifo];
    if (f.ns_per_byte > 0) {
      const int64_t start = std::max(t, f.free_at);
      if (start - t > spec_.queue_ns) {
        ++stats_.queue_drops;
        return finish(true);
      }
      f.free_at = start + static_cast<int64_t>(std::llround(k.bytes * f.ns_per_byte));
      leave = f.free_at;
    }
  }
  due_.push({leave, seq_++, p});
}

void Network::advance(int64_t now_ns, std::vector<Event>& out) {
  while (!due_.empty() && due_.top().at <= now_ns) {
    const Due d = due_.top();
    due_.pop();
    if (d.packet & kDropped) {  // dropped inside inject()
      const uint32_t p = d.packet & ~kDropped;
      out.push_back({packets_[p].id, packets_[p].dst, true});
      free_.push_back(p);
      continue;
    }
    step(d.packet, d.at, &out);
  }
}

}  // namespace shoal::wan
