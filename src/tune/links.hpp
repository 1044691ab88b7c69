// The links between a communicator's ranks, as measured (Communicator::measure_links), and what
// the planner derives from them: the regions they form, the ring order the link_ring rows
// follow, and a row's time on them. Every function is deterministic: ranks that hold the same
// measurements derive the same order and the same picks.
//
// The model: a rank sends and receives at most as fast as its fastest measured link; a pair at
// most as fast as it measured alone; and ranks fall into regions (joined by links at least half
// as fast as the fastest), between two of which every pair shares one pipe per direction, as
// fast as the fastest pair between them measured alone (two data centres and the link between
// them; hosts behind one switch uplink).
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/registry.hpp"

namespace shoal::tune {

struct Links {
  int world = 0;
  /// Bytes per second from rank `from` to rank `to` at [from * world + to]; 0 on the diagonal.
  std::vector<double> bandwidth;
  /// One-way seconds of a message from `from` to `to`, at the same index; empty: not measured
  /// (every message's flight counted as nothing).
  std::vector<double> latency{};
  double at(int from, int to) const { return bandwidth[index(from, to)]; }
  double latency_at(int from, int to) const {
    return latency.empty() ? 0 : latency[index(from, to)];
  }
  size_t index(int from, int to) const {
    return static_cast<size_t>(from) * static_cast<size_t>(world) + static_cast<size_t>(to);
  }
};

/// InvalidArgumentError unless `links` holds world x world rates, positive and finite off the
/// diagonal, and no latencies or world x world of them, finite and not negative.
void check_links(const Links& links);

/// Each rank's region: ranks joined (in both directions) by links at least half as fast as the
/// fastest link, numbered in order of their lowest rank.
std::vector<int> regions_of(const Links& links);

/// Seconds per byte that every hop of a ring in `order` carries, in the model above: the
/// slowest hop alone, or the busiest pipe between two regions (hops through it over its rate).
double ring_seconds_per_byte(const Links& links, const std::vector<int>& order);

/// The ring order the link_ring rows follow: a permutation of the ranks, starting at rank 0,
/// whose slowest hop is as fast as any order's (the bottleneck), and among those, the fewest
/// seconds per byte summed over its hops (a travelling-salesman tour; exact up to 12 ranks,
/// nearest neighbour improved by 2-opt beyond). Rank order where it is no slower by
/// ring_seconds_per_byte.
std::vector<int> ring_order(const Links& links);

/// Seconds per byte of algorithms::model_bytes that a call of `row` (all_reduce, all_gather or
/// reduce_scatter) waits for on these links, from every rank's schedule (link_ring's in
/// `order`): the larger of two bounds, the busiest link (each rank's sending and receiving, each
/// pair, each pipe between regions: the bytes through it over its rate) and the longest chain of
/// dependent messages (each at its pair's rate), which a step-synchronous row pays step by step.
double link_seconds_per_byte(const algorithms::AlgorithmInfo& row, const Links& links,
                             const std::vector<int>& order);

/// Seconds a call of `row` waits for its messages' flight on these links, whatever its size:
/// the longest chain of dependent messages, each taking its pair's measured latency (0 where
/// none was measured). A ring pays every hop of its 2(p-1) steps, a butterfly log2 p hops, and
/// a row whose every step crosses between regions pays the slow pipe's latency at each.
double link_latency_seconds(const algorithms::AlgorithmInfo& row, const Links& links,
                            const std::vector<int>& order);

/// Both prices of `row` from one build of its schedules (what the dispatcher holds per row).
struct LinkPrice {
  double seconds_per_byte = 0;  // link_seconds_per_byte
  double latency_s = 0;         // link_latency_seconds
};
LinkPrice link_price(const algorithms::AlgorithmInfo& row, const Links& links,
                     const std::vector<int>& order);

}  // namespace shoal::tune
