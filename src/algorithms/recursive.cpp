// Recursive doubling and halving (Thakur, Rabenseifner & Gropp 2005): log2 p steps between
// ranks 2^k apart. all_reduce by recursive doubling exchanges the whole vector every step
// (latency-bound messages); Rabenseifner's all_reduce is a recursive-halving reduce-scatter
// followed by a recursive-doubling all-gather (bandwidth-bound messages). Any world size:
// the extra ranks fold into a power of two (tracked.hpp's Fold).
#include "algorithms/butterfly.hpp"
#include "algorithms/tracked.hpp"

namespace shoal::algorithms {

void recursive_doubling_all_reduce(Schedule& s, const CollectiveArgs& a) {
  const int p = a.size, r = a.rank;
  const uint64_t n = a.count * size_of(a.dtype);
  if (a.count == 0) return;
  Tracked t(s, a);
  const Slice in = t.in(0, n), out = t.out(0, n);
  if (p == 1) {
    t.copy(out, in);
    return;
  }
  const Fold f(p, r);
  if (f.v < 0) {  // sit out: hand the data over, get the result back
    t.send(r + 1, in);
    t.recv(r + 1, out);
    return;
  }
  const Slice tmp = t.scratch(t.alloc(n), n);
  Slice cur = in;
  if (r < 2 * f.rem) {
    t.recv(r - 1, tmp);
    t.reduce(out, tmp, in);
    cur = out;
  }
  // Partners combine the same two partial results with the lower group's first, so both
  // (and by induction all ranks) end with the same bits.
  for (int d = 1; d < f.p2; d <<= 1) {
    const int q = f.v ^ d;
    t.send(f.real(q), cur);
    t.recv(f.real(q), tmp);
    if (f.v < q)
      t.reduce(out, cur, tmp);
    else
      t.reduce(out, tmp, cur);
    cur = out;
  }
  if (a.op == ReduceOp::avg) t.finalize(out);
  if (r < 2 * f.rem) t.send(r - 1, out);
}

void rabenseifner_all_reduce(Schedule& s, const CollectiveArgs& a) {
  butterfly(s, a, halving_peer);
}
void recursive_halving_reduce_scatter(Schedule& s, const CollectiveArgs& a) {
  butterfly(s, a, halving_peer);
}
void recursive_doubling_all_gather(Schedule& s, const CollectiveArgs& a) {
  butterfly(s, a, halving_peer);
}

}  // namespace shoal::algorithms
