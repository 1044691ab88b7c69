// Direct reduce-scatter and all-gather, and the all_reduce made of the two ("two-shot", as
// TensorRT-LLM and NCCL's NVLS call it): every rank exchanges with every other at once, so a
// phase is one dependent step whatever p, where the ring takes p-1. Each rank sends the ring's
// bytes, (p-1)/p of the vector per phase, but to p-1 peers at once. That pays where a step's
// flight is what costs (a WAN: the ring pays it 2(p-1) times, two-shot twice); on a LAN the
// per-message overhead is paid p-1 times per phase either way (registry.cpp, direct_phase).
//
// Chunks move on as soon as they are ready: a chunk of this rank's block is reduced as the
// peers' pieces arrive (in a fixed peer order, so the bits do not depend on arrival order), and
// two-shot sends each reduced chunk to every peer at once. Dependencies come from the byte
// ranges (Tracked), with the in-place aliasing of each collective.
#include <algorithm>
#include <vector>

#include "algorithms/algorithms.hpp"
#include "algorithms/tracked.hpp"

namespace shoal::algorithms {

namespace {

constexpr uint64_t kSlotsPerPeer = 4;  // chunk-sized receive buffers in flight per peer

// Byte ranges of every rank's block in the input (all_reduce: in the output too).
struct Blocks {
  std::vector<uint64_t> in, bytes;
};

// Calls f(q, offset, length) for chunk c of block q of every peer q, chunk-major (every peer's
// first chunk, then every peer's second, ...) so that every connection starts at once; peers in
// the order r+1, r+2, ... (`step` 1) or r-1, r-2, ... (`step` -1). Blocks may differ in length.
template <class F>
void each_peer_chunk(const CollectiveArgs& a, const Blocks& b, int step, F&& f) {
  const int p = a.size;
  const uint64_t es = size_of(a.dtype), chunk = chunk_of(a);
  uint64_t most = 1;
  for (int q = 0; q < p; ++q) most = std::max(most, Chunking{b.bytes[q], chunk, es}.pieces());
  for (uint64_t c = 0; c < most; ++c)
    for (int i = 1; i < p; ++i) {
      const int q = mod(a.rank + step * i, p);
      const Chunking ch{b.bytes[q], chunk, es};
      if (c < ch.pieces()) f(q, ch.offset(c), ch.length(c));
    }
}

// Sends block q of the input to rank q for every q != r, chunk by chunk, the peers' chunks
// interleaved so that every connection starts at once; then receives every peer's piece of
// block r and reduces them into `dst` (this rank's own piece first, then r-1, r-2, ...).
// What reads the sums later waits on them through their bytes.
void reduce_scatter_direct(Tracked& t, const CollectiveArgs& a, const Blocks& b, const Slice& dst) {
  const int p = a.size, r = a.rank;
  const uint64_t es = size_of(a.dtype), chunk = chunk_of(a);
  each_peer_chunk(a, b, 1,
                  [&](int q, uint64_t off, uint64_t len) { t.send(q, t.in(b.in[q] + off, len)); });
  const Chunking own{b.bytes[r], chunk, es};
  const uint64_t slot_bytes = std::min(chunk, b.bytes[r]);
  const uint64_t slots = t.alloc(static_cast<uint64_t>(p - 1) * kSlotsPerPeer * slot_bytes);
  for (uint64_t c = 0; c < own.pieces(); ++c) {
    const uint64_t len = own.length(c);
    const Slice mine = t.in(b.in[r] + own.offset(c), len);
    const Slice sum{dst.buffer, dst.offset + own.offset(c), len};
    for (int i = 1; i < p; ++i) {
      const uint64_t slot = static_cast<uint64_t>(i - 1) * kSlotsPerPeer + c % kSlotsPerPeer;
      const Slice piece = t.scratch(slots + slot * slot_bytes, len);
      t.recv(mod(r - i, p), piece);
      t.reduce(sum, i == 1 ? mine : sum, piece);
    }
    if (a.op == ReduceOp::avg) t.finalize(sum);
  }
}

// Rank q's block of count elements at q x count (all_gather's output, reduce_scatter's input).
Blocks equal_blocks(const CollectiveArgs& a) {
  const uint64_t bytes = a.count * size_of(a.dtype);
  Blocks b;
  for (int q = 0; q < a.size; ++q) {
    b.in.push_back(static_cast<uint64_t>(q) * bytes);
    b.bytes.push_back(bytes);
  }
  return b;
}

}  // namespace

void direct_reduce_scatter(Schedule& s, const CollectiveArgs& a) {
  Tracked t(s, a);
  const uint64_t bytes = a.count * size_of(a.dtype);
  if (a.size == 1) {
    t.copy(t.out(0, bytes), t.in(0, bytes));
    return;  // avg over one rank is the identity
  }
  reduce_scatter_direct(t, a, equal_blocks(a), t.out(0, bytes));
}

void direct_all_gather(Schedule& s, const CollectiveArgs& a) {
  Tracked t(s, a);
  const Blocks b = equal_blocks(a);
  // Every peer gets the same chunks of the input; block q of the output arrives from q.
  each_peer_chunk(a, b, 1, [&](int q, uint64_t off, uint64_t len) { t.send(q, t.in(off, len)); });
  each_peer_chunk(a, b, -1,
                  [&](int q, uint64_t off, uint64_t len) { t.recv(q, t.out(b.in[q] + off, len)); });
  // The own block last, as pairwise all_to_all's: the transfers are under way meanwhile.
  const int r = a.rank;
  t.copy(t.out(b.in[r], b.bytes[r]), t.in(0, b.bytes[r]));
}

void two_shot_all_reduce(Schedule& s, const CollectiveArgs& a) {
  Tracked t(s, a);
  const int p = a.size, r = a.rank;
  const uint64_t es = size_of(a.dtype), chunk = chunk_of(a);
  if (p == 1) {
    const uint64_t bytes = a.count * es;
    t.copy(t.out(0, bytes), t.in(0, bytes));
    return;
  }
  Blocks b;
  for (int q = 0; q < p; ++q) {
    b.in.push_back(block_begin(a.count, p, q) * es);
    b.bytes.push_back(block_count(a.count, p, q) * es);
  }
  reduce_scatter_direct(t, a, b, t.out(b.in[r], b.bytes[r]));
  // Every reduced chunk to every peer at once (each send waits for its chunk's sum).
  const Chunking own{b.bytes[r], chunk, es};
  for (uint64_t c = 0; c < own.pieces(); ++c)
    for (int i = 1; i < p; ++i)
      t.send(mod(r + i, p), t.out(b.in[r] + own.offset(c), own.length(c)));
  each_peer_chunk(a, b, -1,
                  [&](int q, uint64_t off, uint64_t len) { t.recv(q, t.out(b.in[q] + off, len)); });
}

}  // namespace shoal::algorithms
