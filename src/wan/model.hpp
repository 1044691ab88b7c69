// The emulated wide-area network behind netcluster.sh's WAN mode (docs/cluster.md): packets
// between endpoints (one per host and NIC) pass a chain of stages, each a FIFO with a rate and a
// bounded queue (the sender's uplink; between two regions, the line from one to the other,
// shared by every flow between them; the receiver's downlink) and one propagation stage (delay,
// jitter, random loss) of the pair of regions. Pure virtual time: the forwarder (forwarder.hpp)
// feeds it packets as they arrive on its TUN devices and writes them out when the model delivers
// them, so TCP and its congestion control stay end to end.
#pragma once

#include <cstdint>
#include <istream>
#include <limits>
#include <queue>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace shoal::wan {

/// One host's NIC: the TUN device `dev` inside network namespace `netns` ("" is the namespace the
/// forwarder runs in), holding `addr` (IPv4, host order).
struct Endpoint {
  std::string netns;
  std::string dev;
  uint32_t addr = 0;
  double up_bps = 0;    ///< what it sends; 0: unshaped
  double down_bps = 0;  ///< what it receives; 0: unshaped
  int region = 0;
};

/// From one region to another (each direction has its own): the line's rate and propagation.
struct Path {
  double bps = 0;         ///< the line, shared by the flows between the two regions; 0: none
  int64_t delay_ns = 0;   ///< one way
  int64_t jitter_ns = 0;  ///< uniform in [-jitter, +jitter] per packet: packets may reorder
  double loss = 0;        ///< probability that a packet is lost, independently per packet
};

/// The whole network, as netcluster.sh writes it (parse_spec).
struct Spec {
  std::vector<Endpoint> endpoints;
  int regions = 1;
  std::vector<Path> paths;        ///< regions × regions, row = from
  int64_t queue_ns = 25'000'000;  ///< a stage's queue, in time at its rate (tbf's latency)
  uint64_t seed = 1;
  int mtu = 1500;

  const Path& path(int from, int to) const { return paths[from * regions + to]; }
};

/// Reads the text format netcluster.sh writes, a statement a line ('#' starts a comment):
///   regions R
///   endpoint NETNS|- DEV ADDR UP_BPS DOWN_BPS REGION
///   path FROM TO BPS DELAY_NS JITTER_NS LOSS
///   queue_ns N | seed N | mtu N
/// Throws std::invalid_argument naming the line on anything malformed or inconsistent.
Spec parse_spec(std::istream& in);

/// Parses dotted IPv4 into host order; throws std::invalid_argument.
uint32_t parse_ipv4(const std::string& text);

/// Counters, whole network.
struct Stats {
  uint64_t injected = 0;
  uint64_t delivered = 0;
  uint64_t lost = 0;         ///< random loss on a path
  uint64_t queue_drops = 0;  ///< a stage's queue was full
  uint64_t delivered_bytes = 0;
};

/// What advance() hands back: packet `id` leaves for endpoint `dst`, or was dropped.
struct Event {
  uint64_t id;
  int dst;
  bool dropped;
};

class Network {
 public:
  explicit Network(const Spec& spec);

  /// The endpoint holding `addr`, or -1.
  int route(uint32_t addr) const;

  /// A packet of `bytes` from endpoint `src` to `dst` arrives at time `now_ns`.
  void inject(uint64_t id, int src, int dst, uint32_t bytes, int64_t now_ns);

  /// Moves every packet whose next step is due at `now_ns` or before; appends what left the
  /// network (delivered or dropped) to `out`, in the order of their times.
  void advance(int64_t now_ns, std::vector<Event>& out);

  /// When the next step is due; max() when no packet is inside.
  int64_t next_due() const {
    return due_.empty() ? std::numeric_limits<int64_t>::max() : due_.top().at;
  }
  size_t in_flight() const { return due_.size(); }
  const Stats& stats() const { return stats_; }

 private:
  struct Fifo {  // a rate-limited queue
    double ns_per_byte = 0;
    int64_t free_at = 0;
  };
  static constexpr int kMaxHops = 4;
  static constexpr uint32_t kDropped = 0x8000'0000u;  // in Due::packet: report as dropped
  struct Hop {
    int fifo;  // index into fifos_, or -1: the propagation stage
  };
  struct Packet {
    uint64_t id;
    int dst;
    uint32_t bytes;
    int hop;  // next hop to take
    int hops;
    Hop route[kMaxHops];
    const Path* path;
  };
  struct Due {
    int64_t at;
    uint64_t seq;  // ties leave in arrival order
    uint32_t packet;
    bool operator>(const Due& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };

  /// Takes packet `p`'s next hop at time `t`: schedules it, or finishes it into `out`.
  void step(uint32_t p, int64_t t, std::vector<Event>* out);
  uint32_t slot();

  Spec spec_;
  std::vector<Fifo> fifos_;  // up, down per endpoint; then a line per ordered pair of regions
  std::vector<std::pair<uint32_t, int>> routes_;  // sorted by address
  std::vector<Packet> packets_;
  std::vector<uint32_t> free_;
  std::priority_queue<Due, std::vector<Due>, std::greater<Due>> due_;
  uint64_t seq_ = 0;
  std::mt19937_64 rng_;
  Stats stats_;
};

}  // namespace shoal::wan
