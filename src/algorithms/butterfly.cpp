// Butterfly reduce-scatter / all-gather over a power-of-two fold (see butterfly.hpp).
// Non-powers of two: the even ranks below 2*rem hand their data to their odd neighbour first
// and get the result back at the end (Thakur, Rabenseifner & Gropp 2005, section 4.4).
// Every block is reduced by exactly one rank and copied to the others, so all ranks end with
// the same bits.
#include "algorithms/butterfly.hpp"

#include <algorithm>

#include "algorithms/tracked.hpp"

namespace shoal::algorithms {

namespace {

void collect(int q, int step, int levels, int p2, PeerFn peer, std::vector<int>& out) {
  for (; step < levels; ++step) collect(peer(q, step, p2), step + 1, levels, p2, peer, out);
  out.push_back(q);
}

struct Run {
  uint64_t offset, bytes;
};

}  // namespace

std::vector<int> butterfly_blocks(int v, int step, int levels, int p2, PeerFn peer) {
  std::vector<int> out;
  collect(v, step, levels, p2, peer, out);
  std::sort(out.begin(), out.end());
  return out;
}

int halving_peer(int v, int step, int p2) { return v ^ (p2 >> (step + 1)); }

int swing_peer(int v, int step, int p2) {
  int64_t rho = 0, pw = 1;
  for (int i = 0; i <= step; ++i, pw *= -2) rho += pw;
  const int64_t q = v % 2 == 0 ? v + rho : v - rho;
  return static_cast<int>(((q % p2) + p2) % p2);
}

void butterfly(Schedule& s, const CollectiveArgs& a, PeerFn peer) {
  const int p = a.size, r = a.rank;
  const uint64_t es = size_of(a.dtype), block = a.count * es;
  if (a.count == 0) return;
  Tracked t(s, a);
  const bool gather = a.collective == Collective::all_gather;
  const bool scatter = a.collective == Collective::reduce_scatter;
  const bool avg = a.op == ReduceOp::avg && !gather;
  if (p == 1) {
    t.copy(t.out(0, block), t.in(0, block));
    return;
  }
  const Fold f(p, r);
  // The working vector: the output for all_reduce and all_gather, scratch for reduce_scatter
  // (its output holds one block only).
  const uint64_t n =
      a.collective == Collective::all_reduce ? block : block * static_cast<uint64_t>(p);
  auto vb = [&](int vr) -> uint64_t {  // first byte of virtual block vr
    if (a.collective == Collective::all_reduce) return block_begin(a.count, f.p2, vr) * es;
    return static_cast<uint64_t>(f.first(vr)) * block;
  };
  auto runs = [&](const std::vector<int>& set) {  // contiguous non-empty byte ranges of a set
    std::vector<Run> out;
    for (size_t i = 0; i < set.size();) {
      size_t j = i + 1;
      while (j < set.size() && set[j] == set[j - 1] + 1) ++j;
      const uint64_t lo = vb(set[i]), hi = vb(set[j - 1] + 1);
      if (hi > lo) out.push_back({lo, hi - lo});
      i = j;
    }
    return out;
  };
  const uint64_t acc_base = scatter ? t.alloc(n) : 0;
  auto acc = [&](uint64_t off, uint64_t len) {
    return scatter ? t.scratch(acc_base + off, len) : t.out(off, len);
  };

  if (gather) {
    const uint64_t mine = static_cast<uint64_t>(r) * block;
    t.copy(t.out(mine, block), t.in(0, block));
    if (f.v < 0) {  // hand the block over, get everything else back
      t.send(r + 1, t.out(mine, block));
      t.recv(r + 1, t.out(0, mine));  // r > 0 or empty: empty slices are skipped below
      t.recv(r + 1, t.out(mine + block, n - mine - block));
      return;
    }
    if (r < 2 * f.rem) t.recv(r - 1, t.out(mine - block, block));
  }

  // Reduction half (all_reduce, reduce_scatter).
  if (!gather) {
    if (f.v < 0) {
      t.send(r + 1, t.in(0, n));
      if (scatter) {
        t.recv(r + 1, t.out(0, block));
        if (avg) t.finalize(t.out(0, block));
      } else {
        t.recv(r + 1, t.out(0, n));  // already averaged
      }
      return;
    }
    const uint64_t tmp = t.alloc(n);
    bool from_input = true;
    if (r < 2 * f.rem) {  // the left (even) neighbour's data comes first in every reduction
      t.recv(r - 1, t.scratch(tmp, n));
      t.reduce(acc(0, n), t.scratch(tmp, n), t.in(0, n));
      from_input = false;
    }
    for (int st = 0; st < f.levels; ++st) {
      const int q = peer(f.v, st, f.p2);
      const bool lower = f.v < q;
      auto src = [&](const Run& x) {
        return from_input ? t.in(x.offset, x.bytes) : acc(x.offset, x.bytes);
      };
      const auto give = runs(butterfly_blocks(q, st + 1, f.levels, f.p2, peer));
      const auto keep = runs(butterfly_blocks(f.v, st + 1, f.levels, f.p2, peer));
      for (const Run& x : give) t.send(f.real(q), src(x));
      for (const Run& x : keep) t.recv(f.real(q), t.scratch(tmp + x.offset, x.bytes));
      for (const Run& x : keep) {
        Slice theirs = t.scratch(tmp + x.offset, x.bytes);
        t.reduce(acc(x.offset, x.bytes), lower ? src(x) : theirs, lower ? theirs : src(x));
      }
      from_input = false;
    }
    if (scatter) {
      const uint64_t mine = static_cast<uint64_t>(r) * block;
      t.copy(t.out(0, block), acc(mine, block));
      if (avg) t.finalize(t.out(0, block));
      if (r < 2 * f.rem) t.send(r - 1, acc(mine - block, block));
      return;
    }
    if (avg) t.finalize(acc(vb(f.v), vb(f.v + 1) - vb(f.v)));
  }

  // Gathering half (all_reduce, all_gather): retrace the steps backwards.
  for (int st = f.levels - 1; st >= 0; --st) {
    const int q = peer(f.v, st, f.p2);
    for (const Run& x : runs(butterfly_blocks(f.v, st + 1, f.levels, f.p2, peer)))
      t.send(f.real(q), t.out(x.offset, x.bytes));
    for (const Run& x : runs(butterfly_blocks(q, st + 1, f.levels, f.p2, peer)))
      t.recv(f.real(q), t.out(x.offset, x.bytes));
  }
  if (r < 2 * f.rem) {  // give the result to the even neighbour that sat out
    if (gather) {
      const uint64_t theirs = static_cast<uint64_t>(r - 1) * block;
      t.send(r - 1, t.out(0, theirs));
      t.send(r - 1, t.out(theirs + block, n - theirs - block));
    } else {
      t.send(r - 1, t.out(0, n));
    }
  }
}

}  // namespace shoal::algorithms
