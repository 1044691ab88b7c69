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

// Sends block q of the input to rank q for every q != r, chunk by chunk, the peers' chunks
// interleaved so that every connection starts at once; then receives every peer's piece of
// block r and reduces them into `dst` (this rank's own piece first, then r-1, r-2, ...).
// What reads the sums later waits on them through their bytes.
void reduce_scatter_direct(Tracked& t, const CollectiveArgs& a, const Blocks& b, const Slice& dst) {
  const int p = a.size, r = a.rank;
  const uint64_t es = size_of(a.dtype), chunk = chunk_of(a);
  uint64_t most = 1;
  for (int q = 0; q < p; ++q) most = std::max(most, Chunking{b.bytes[q], chunk, es}.pieces());
  for (uint64_t c = 0; c < most; ++c)
    for (int i = 1; i < p; ++i) {
      const int q = mod(r + i, p);
      const Chunking ch{b.bytes[q], chunk, es};
      if (c < ch.pieces()) t.send(q, t.in(b.in[q] + ch.offset(c), ch.length(c)));
    }
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

}  // namespace

void direct_reduce_scatter(Schedule& s, const CollectiveArgs& a) {
  Tracked t(s, a);
  const uint64_t es = size_of(a.dtype), bytes = a.count * es;
  if (a.size == 1) {
    t.copy(t.out(0, bytes), t.in(0, bytes));
    return;  // avg over one rank is the identity
  }
  Blocks b;
  for (int q = 0; q < a.size; ++q) {
    b.in.push_back(static_cast<uint64_t>(q) * bytes);
    b.bytes.push_back(bytes);
  }
  reduce_scatter_direct(t, a, b, t.out(0, bytes));
}

void direct_all_gather(Schedule& s, const CollectiveArgs& a) {
  Tracked t(s, a);
  const int p = a.size, r = a.rank;
  const uint64_t es = size_of(a.dtype), bytes = a.count * es;
  const Chunking ch{bytes, chunk_of(a), es};
  for (uint64_t c = 0; c < ch.pieces() && p > 1; ++c)
    for (int i = 1; i < p; ++i) t.send(mod(r + i, p), t.in(ch.offset(c), ch.length(c)));
  for (uint64_t c = 0; c < ch.pieces() && p > 1; ++c)
    for (int i = 1; i < p; ++i) {
      const int q = mod(r - i, p);
      t.recv(q, t.out(static_cast<uint64_t>(q) * bytes + ch.offset(c), ch.length(c)));
    }
  // The own block last, as pairwise all_to_all's: the transfers are under way meanwhile.
  t.copy(t.out(static_cast<uint64_t>(r) * bytes, bytes), t.in(0, bytes));
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
  uint64_t most = 1;
  for (int q = 0; q < p; ++q) most = std::max(most, Chunking{b.bytes[q], chunk, es}.pieces());
  for (uint64_t c = 0; c < most; ++c)
    for (int i = 1; i < p; ++i) {
      const int q = mod(r - i, p);
      const Chunking ch{b.bytes[q], chunk, es};
      if (c < ch.pieces()) t.recv(q, t.out(b.in[q] + ch.offset(c), ch.length(c)));
    }
}

}  // namespace shoal::algorithms
