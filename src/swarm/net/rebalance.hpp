// Adaptive rebalancing (SWARM, sec. 3.2 and Algorithm 2): the swarm's throughput is that of its
// slowest stage, the bottleneck b = min over stages of the summed throughput of its replicas.
// Periodically every peer reads the registry and evaluates every single move of one peer from a
// stage with more than one replica to the bottleneck stage. Stages are compared in leximin
// order (sorted throughputs, slowest first: b, then the second slowest, ...), so that with two
// stages tied at the bottom the first move still counts as progress. The best move is taken if,
// at the first position where it changes the sorted throughputs, it raises the value by more
// than `threshold` (relative); the peer it names moves.
// Why it cannot oscillate: with fixed peer speeds every accepted move strictly raises the
// placement in leximin order, a total order on the finitely many placements, so only finitely
// many moves happen; moving back would lower it and is never chosen. The threshold keeps noise
// in measured speeds from triggering moves that gain nothing real. A store counter lets only
// one peer act on a given placement, so two peers reading the same snapshot do not both move.
// Stages of unequal cost (an embedding, the loss, more blocks): a peer's throughput is its speed
// over its stage's cost per sample, so a moved peer is credited speed / cost of the stage it
// goes to. Each stage's cost is measured: its replicas' speed on a fixed probe (PeerRecord::speed)
// over their throughput there; where a stage has no measured replica, the mean of the others'.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "swarm/net/registry.hpp"

namespace shoal::swarm {

struct Move {
  std::string peer;
  int from = -1, to = -1;
  double bottleneck_before = 0, bottleneck_after = 0;
};

/// Summed throughput of each stage's replicas (a peer without a measurement counts as the mean
/// of the measured ones, so a fresh peer is not mistaken for a dead one).
std::vector<double> stage_throughputs(const std::vector<PeerRecord>& peers, int stages);

/// Each stage's cost per sample in probes (speed / throughput over its measured replicas, their
/// mean); 0 where no replica has both figures.
std::vector<double> stage_costs(const std::vector<PeerRecord>& peers, int stages);

/// The largest bottleneck any placement of these peers reaches (every peer on some stage, each
/// at its speed over that stage's cost, as plan_move credits a moved peer): brute force over the
/// stages^peers placements, up to 14 peers; 0 beyond, or without costs.
double best_bottleneck(const std::vector<PeerRecord>& peers, int stages);

/// The best single move, if it raises the bottleneck by more than `threshold`. Deterministic
/// for a given set of records (ties broken by stage, then by peer id).
std::optional<Move> plan_move(const std::vector<PeerRecord>& peers, int stages, double threshold);

}  // namespace shoal::swarm
