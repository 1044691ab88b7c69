// Binomial-tree broadcast and reduce (MPICH's), pipelined by chunk: a chunk moves down (or up)
// the tree as soon as it has arrived (or been reduced), so large messages stream.
#include <vector>

#include "algorithms/algorithms.hpp"

namespace shoal::algorithms {

namespace {

struct Tree {
  int parent = -1;            // real rank, -1 at the root
  std::vector<int> children;  // real ranks, in the order the parent serves them
};

// Broadcast tree: relative rank v receives from v - 2^k (its lowest set bit) and sends to
// v + 2^j for every 2^j below that bit, largest first (the largest subtree first).
Tree broadcast_tree(int rank, int root, int p) {
  Tree t;
  const int v = mod(rank - root, p);
  int mask = 1;
  while (mask < p) {
    if (v & mask) {
      t.parent = mod(v - mask + root, p);
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < p) t.children.push_back(mod(v + mask + root, p));
  return t;
}

}  // namespace

void binomial_broadcast(Schedule& s, const CollectiveArgs& a) {
  const uint64_t es = size_of(a.dtype), bytes = a.count * es;
  const Tree t = broadcast_tree(a.rank, a.root, a.size);
  Chunking ch{bytes, chunk_of(a), es};
  const bool is_root = a.rank == a.root;
  for (uint64_t c = 0; c < ch.pieces(); ++c) {
    Slice out{Buffer::output, ch.offset(c), ch.length(c)};
    uint32_t ready;
    Slice from = out;
    if (is_root) {
      from = {Buffer::input, ch.offset(c), ch.length(c)};
      ready = s.copy(out, from);
    } else {
      ready = s.recv(t.parent, out);
    }
    for (int child : t.children) s.send(child, from, {is_root ? Schedule::kNone : ready});
  }
}

void binomial_reduce(Schedule& s, const CollectiveArgs& a) {
  const uint64_t es = size_of(a.dtype), bytes = a.count * es, chunk = chunk_of(a);
  const int p = a.size, v = mod(a.rank - a.root, p);
  // Reduce tree: receive from v + 2^k for each 2^k below v's lowest set bit, smallest first,
  // then send the partial result to v - lowbit(v).
  std::vector<int> children;
  int parent = -1;
  for (int mask = 1; mask < p; mask <<= 1) {
    if (v & mask) {
      parent = mod(v - mask + a.root, p);
      break;
    }
    if (v + mask < p) children.push_back(mod(v + mask + a.root, p));
  }
  const bool is_root = parent < 0;
  Chunking ch{bytes, chunk, es};
  if (children.empty() && !is_root) {  // a leaf forwards its input
    for (uint64_t c = 0; c < ch.pieces(); ++c)
      s.send(parent, {Buffer::input, ch.offset(c), ch.length(c)});
    return;
  }
  // The partial result: in the output at the root, in scratch elsewhere.
  const Buffer acc_buffer = is_root ? Buffer::output : Buffer::scratch;
  const uint64_t acc_base = is_root ? 0 : s.scratch_bytes;
  if (!is_root) s.scratch_bytes += bytes;
  constexpr uint64_t kSlots = 8;
  const uint64_t slot_bytes = std::min(chunk, bytes);
  const uint64_t slot_base = s.scratch_bytes;
  s.scratch_bytes += kSlots * slot_bytes;
  std::vector<uint32_t> slot_free(kSlots, Schedule::kNone);
  uint64_t n_recv = 0;
  for (uint64_t c = 0; c < ch.pieces(); ++c) {
    const uint64_t off = ch.offset(c), len = ch.length(c);
    Slice acc{acc_buffer, acc_base + off, len};
    Slice mine{Buffer::input, off, len};
    uint32_t last = Schedule::kNone;
    if (children.empty()) last = s.copy(acc, mine);  // p == 1
    for (size_t j = 0; j < children.size(); ++j) {
      const uint64_t slot = n_recv++ % kSlots;
      Slice in{Buffer::scratch, slot_base + slot * slot_bytes, len};
      uint32_t rid = s.recv(children[j], in, {slot_free[slot]});
      last = s.reduce(acc, j == 0 ? mine : acc, in, {rid, last});
      slot_free[slot] = last;
    }
    if (is_root) {
      if (a.op == ReduceOp::avg && p > 1) s.finalize(acc, {last});
    } else {
      s.send(parent, acc, {last});
    }
  }
}

}  // namespace shoal::algorithms

// Binomial all_reduce for small messages: reduce to rank 0 along the reduce tree above, then
// broadcast back down the same tree. 2 ceil(log2 p) latencies; every rank receives rank 0's
// bits. Whole vectors, no chunking: for messages where latency dominates.
#include "algorithms/tracked.hpp"

namespace shoal::algorithms {

void binomial_all_reduce(Schedule& s, const CollectiveArgs& a) {
  const int p = a.size, r = a.rank;
  const uint64_t n = a.count * size_of(a.dtype);
  if (a.count == 0) return;
  Tracked t(s, a);
  const Slice out = t.out(0, n);
  t.copy(out, t.in(0, n));
  std::vector<int> children;  // smallest subtree first
  int parent = -1;
  for (int mask = 1; mask < p; mask <<= 1) {
    if (r & mask) {
      parent = r - mask;
      break;
    }
    if (r + mask < p) children.push_back(r + mask);
  }
  // Two receive slots: one child's data arrives while the previous one is reduced.
  const uint64_t slots = children.empty() ? 0 : t.alloc(2 * n);
  for (size_t j = 0; j < children.size(); ++j) {
    const Slice slot = t.scratch(slots + (j % 2) * n, n);
    t.recv(children[j], slot);
    t.reduce(out, out, slot);  // children hold higher ranks: ours comes first
  }
  if (parent >= 0) {
    t.send(parent, out);
    t.recv(parent, out);
  } else if (a.op == ReduceOp::avg && p > 1) {
    t.finalize(out);
  }
  for (auto it = children.rbegin(); it != children.rend(); ++it) t.send(*it, out);
}

}  // namespace shoal::algorithms
