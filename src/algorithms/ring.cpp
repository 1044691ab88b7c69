// Ring all_gather, reduce_scatter and all_reduce (Patarasuk & Yuan; NCCL's rings): p-1 steps,
// each rank sending to its right and receiving from its left neighbour. Blocks are cut into
// chunks, and every chunk moves on as soon as it is reduced, so the reduction of one chunk
// overlaps the transfer of the next. The rows "ring" go around in rank order; "link_ring" in
// CollectiveArgs::ring_order (the order measured links give, tune/links.hpp): the phases
// below work on positions around the ring, and the blocks are indexed by position.
#include <algorithm>
#include <unordered_map>
#include <vector>

#include "algorithms/algorithms.hpp"
#include "core/check.hpp"

namespace shoal::algorithms {

namespace {

constexpr uint64_t kRecvSlots = 8;  // chunk-sized receive buffers in flight per ring

struct Blocks {
  std::vector<uint64_t> offset, bytes;  // byte range of each rank's block in the input
};

// This rank's place on the ring: its position and the ranks at the positions either side.
struct Ring {
  int pos = 0, p = 1, right = 0, left = 0;
};

Ring ring_of(const CollectiveArgs& a, const std::vector<int>* order) {
  const int p = a.size;
  if (!order) return {a.rank, p, mod(a.rank + 1, p), mod(a.rank - 1, p)};
  const auto& o = *order;
  SHOAL_CHECK(o.size() == static_cast<size_t>(p), Internal,
              "a ring order of " << o.size() << " ranks for a call on " << p);
  const int pos = static_cast<int>(std::find(o.begin(), o.end(), a.rank) - o.begin());
  return {pos, p, o[mod(pos + 1, p)], o[mod(pos - 1, p)]};
}

struct Piece {
  uint32_t producer;  // step that makes it ready (kNone: ready at start)
  Slice slice;
};

// Reduce-scatter phase shared by reduce_scatter and all_reduce. On return, `finals` holds,
// for each chunk of block `rank`, the step that wrote its fully reduced value to `final_dst`,
// and `last_use[b][c]` the last step that read chunk c of block b (input or partial sum).
// `acc(t, b, off, len)` gives where the partial sum of block b at ring step t is kept; a
// reduce into it waits for the send that last read the same place (write after read).
template <class AccFn>
void reduce_scatter_phase(Schedule& s, const CollectiveArgs& a, const Ring& ring, const Blocks& blk,
                          uint64_t final_offset, Buffer final_buffer, AccFn acc,
                          std::vector<std::vector<uint32_t>>& last_use,
                          std::vector<uint32_t>& finals) {
  const int p = ring.p, r = ring.pos, right = ring.right, left = ring.left;
  const uint64_t es = size_of(a.dtype), chunk = chunk_of(a);
  uint64_t max_block = 0;
  for (uint64_t b : blk.bytes) max_block = std::max(max_block, b);
  const uint64_t slot_bytes = std::min(chunk, max_block);
  const uint64_t slot_base = s.scratch_bytes;
  s.scratch_bytes += kRecvSlots * slot_bytes;
  std::vector<uint32_t> slot_free(kRecvSlots, Schedule::kNone);
  uint64_t n_recv = 0;
  std::unordered_map<uint64_t, uint32_t> reader_of;  // (buffer, offset) -> last send reading it
  auto key = [](const Slice& sl) { return (static_cast<uint64_t>(sl.buffer) << 62) | sl.offset; };

  last_use.assign(p, {});
  // Step 0 sends this rank's own contribution to block r-1 straight from the input.
  const int b0 = mod(r - 1, p);
  Chunking c0{blk.bytes[b0], chunk, es};
  std::vector<Piece> pending;
  for (uint64_t c = 0; c < c0.pieces(); ++c)
    pending.push_back(
        {Schedule::kNone, {Buffer::input, blk.offset[b0] + c0.offset(c), c0.length(c)}});
  last_use[b0].assign(c0.pieces(), Schedule::kNone);

  for (int t = 0; t <= p - 2; ++t) {
    const int sb = mod(r - t - 1, p), rb = mod(r - t - 2, p);
    for (uint64_t c = 0; c < pending.size(); ++c) {
      uint32_t id = s.send(right, pending[c].slice, {pending[c].producer});
      last_use[sb][c] = id;
      reader_of[key(pending[c].slice)] = id;
    }
    Chunking cr{blk.bytes[rb], chunk, es};
    std::vector<Piece> next;
    last_use[rb].assign(cr.pieces(), Schedule::kNone);
    for (uint64_t c = 0; c < cr.pieces(); ++c) {
      const uint64_t slot = n_recv++ % kRecvSlots;
      Slice in_slot{Buffer::scratch, slot_base + slot * slot_bytes, cr.length(c)};
      uint32_t rid = s.recv(left, in_slot, {slot_free[slot]});
      Slice mine{Buffer::input, blk.offset[rb] + cr.offset(c), cr.length(c)};
      const bool last = t == p - 2;  // rb == r: the last contribution; the result is final
      Slice dst = last ? Slice{final_buffer, final_offset + cr.offset(c), cr.length(c)}
                       : acc(t, rb, cr.offset(c), cr.length(c));
      uint32_t war = Schedule::kNone;
      if (auto it = reader_of.find(key(dst)); it != reader_of.end()) war = it->second;
      uint32_t red = s.reduce(dst, mine, in_slot, {rid, war});
      slot_free[slot] = red;
      last_use[rb][c] = red;
      if (last)
        finals.push_back(red);
      else
        next.push_back({red, dst});
    }
    pending = std::move(next);
  }
}

// All-gather phase: block `r` of `out` is ready chunk by chunk (producers), the other blocks
// arrive from the left. `guard` (may be empty) are steps that must finish before a block of
// the output is overwritten.
void all_gather_phase(Schedule& s, const CollectiveArgs& a, const Ring& ring, const Blocks& out,
                      std::vector<uint32_t> producers,
                      const std::vector<std::vector<uint32_t>>* guard) {
  const int p = ring.p, r = ring.pos, right = ring.right, left = ring.left;
  const uint64_t es = size_of(a.dtype), chunk = chunk_of(a);
  for (int t = 0; t <= p - 2; ++t) {
    const int sb = mod(r - t, p), rb = mod(r - t - 1, p);
    Chunking cs{out.bytes[sb], chunk, es};
    for (uint64_t c = 0; c < cs.pieces(); ++c)
      s.send(right, {Buffer::output, out.offset[sb] + cs.offset(c), cs.length(c)}, {producers[c]});
    Chunking cr{out.bytes[rb], chunk, es};
    std::vector<uint32_t> next(cr.pieces());
    for (uint64_t c = 0; c < cr.pieces(); ++c) {
      uint32_t g = (guard && c < (*guard)[rb].size()) ? (*guard)[rb][c] : Schedule::kNone;
      next[c] = s.recv(left, {Buffer::output, out.offset[rb] + cr.offset(c), cr.length(c)}, {g});
    }
    producers = std::move(next);
  }
}

Blocks even_blocks(uint64_t count, int p, uint64_t es) {
  Blocks b;
  for (int i = 0; i < p; ++i) {
    b.offset.push_back(block_begin(count, p, i) * es);
    b.bytes.push_back(block_count(count, p, i) * es);
  }
  return b;
}

// Rank i's block of count elements at i x count, listed by position around the ring.
Blocks equal_blocks(uint64_t count, const Ring& ring, uint64_t es, const std::vector<int>* order) {
  Blocks b;
  for (int i = 0; i < ring.p; ++i) {
    b.offset.push_back(static_cast<uint64_t>(order ? (*order)[i] : i) * count * es);
    b.bytes.push_back(count * es);
  }
  return b;
}

void all_gather_on(Schedule& s, const CollectiveArgs& a, const std::vector<int>* order) {
  const uint64_t es = size_of(a.dtype), bytes = a.count * es;
  const Ring ring = ring_of(a, order);
  Blocks out = equal_blocks(a.count, ring, es, order);
  Chunking own{bytes, chunk_of(a), es};
  std::vector<uint32_t> producers;
  for (uint64_t c = 0; c < own.pieces(); ++c)
    producers.push_back(
        s.copy({Buffer::output, out.offset[ring.pos] + own.offset(c), own.length(c)},
               {Buffer::input, own.offset(c), own.length(c)}));
  all_gather_phase(s, a, ring, out, producers, nullptr);
}

void reduce_scatter_on(Schedule& s, const CollectiveArgs& a, const std::vector<int>* order) {
  const uint64_t es = size_of(a.dtype), bytes = a.count * es;
  const Ring ring = ring_of(a, order);
  Blocks in = equal_blocks(a.count, ring, es, order);
  std::vector<uint32_t> finals;
  if (a.size == 1) {
    Chunking ch{bytes, chunk_of(a), es};
    for (uint64_t c = 0; c < ch.pieces(); ++c)
      finals.push_back(s.copy({Buffer::output, ch.offset(c), ch.length(c)},
                              {Buffer::input, ch.offset(c), ch.length(c)}));
  } else {
    // Partial sums live in two block-sized scratch areas used by alternate ring steps.
    const uint64_t acc_base = s.scratch_bytes;
    s.scratch_bytes += 2 * bytes;
    std::vector<std::vector<uint32_t>> last_use;
    auto acc = [&](int t, int, uint64_t off, uint64_t len) {
      return Slice{Buffer::scratch, acc_base + static_cast<uint64_t>(t % 2) * bytes + off, len};
    };
    reduce_scatter_phase(s, a, ring, in, 0, Buffer::output, acc, last_use, finals);
  }
  if (a.op == ReduceOp::avg) {
    Chunking ch{bytes, chunk_of(a), es};
    for (uint64_t c = 0; c < ch.pieces(); ++c)
      s.finalize({Buffer::output, ch.offset(c), ch.length(c)}, {finals[c]});
  }
}

// Blocks are by position: which rank reduces which part of the vector does not change the
// result, and every rank ends with the same bits.
void all_reduce_on(Schedule& s, const CollectiveArgs& a, const std::vector<int>* order) {
  const uint64_t es = size_of(a.dtype);
  Blocks blk = even_blocks(a.count, a.size, es);
  const Ring ring = ring_of(a, order);
  const int r = ring.pos;
  std::vector<uint32_t> finals;
  if (a.size == 1) {
    Chunking ch{blk.bytes[0], chunk_of(a), es};
    for (uint64_t c = 0; c < ch.pieces(); ++c)
      finals.push_back(s.copy({Buffer::output, ch.offset(c), ch.length(c)},
                              {Buffer::input, ch.offset(c), ch.length(c)}));
    return;  // avg over one rank is the identity
  }
  // Partial sums live in the output itself: block b's partial sum is written where block b's
  // result will land, and forwarded from there.
  std::vector<std::vector<uint32_t>> last_use;
  auto acc = [&](int, int b, uint64_t off, uint64_t len) {
    return Slice{Buffer::output, blk.offset[b] + off, len};
  };
  reduce_scatter_phase(s, a, ring, blk, blk.offset[r], Buffer::output, acc, last_use, finals);
  if (a.op == ReduceOp::avg) {
    Chunking ch{blk.bytes[r], chunk_of(a), es};
    for (uint64_t c = 0; c < ch.pieces(); ++c)
      finals[c] =
          s.finalize({Buffer::output, blk.offset[r] + ch.offset(c), ch.length(c)}, {finals[c]});
  }
  // A block of the output may be overwritten by the gather only after the reduce-scatter has
  // forwarded it (and, in place, read this rank's input there).
  all_gather_phase(s, a, ring, blk, finals, &last_use);
}

}  // namespace

void ring_all_gather(Schedule& s, const CollectiveArgs& a) { all_gather_on(s, a, nullptr); }
void ring_reduce_scatter(Schedule& s, const CollectiveArgs& a) { reduce_scatter_on(s, a, nullptr); }
void ring_all_reduce(Schedule& s, const CollectiveArgs& a) { all_reduce_on(s, a, nullptr); }

void link_ring_all_gather(Schedule& s, const CollectiveArgs& a) {
  all_gather_on(s, a, a.ring_order);
}
void link_ring_reduce_scatter(Schedule& s, const CollectiveArgs& a) {
  reduce_scatter_on(s, a, a.ring_order);
}
void link_ring_all_reduce(Schedule& s, const CollectiveArgs& a) {
  all_reduce_on(s, a, a.ring_order);
}

}  // namespace shoal::algorithms
