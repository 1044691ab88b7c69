// Helpers of the log-depth algorithms (butterfly.cpp, bruck.cpp, tree.cpp):
//  - Tracked: emits steps and derives their dependency edges from the byte ranges they touch
//    (read after write, write after read, write after write), so a builder states only what
//    moves where. Per space it keeps an interval map of the bytes' last writer and the readers
//    since, so each step costs O(log n + ranges it overlaps), not a scan of every earlier step
//    (Swing's thousands of frames per rank at 4,096 ranks). Input and output are assumed to
//    alias the way the in-place API lays them out (all_reduce: same memory; all_gather: input =
//    output block `rank`; reduce_scatter: output = input block `rank`), since a rank cannot
//    tell from its arguments alone.
//  - Fold: the usual reduction of any world size to the largest power of two p2 <= p.
#pragma once

#include <array>
#include <map>
#include <vector>

#include "algorithms/algorithms.hpp"

namespace shoal::algorithms {

class Tracked {
 public:
  Tracked(Schedule& s, const CollectiveArgs& a);

  /// Reserves `bytes` of scratch; returns its offset.
  uint64_t alloc(uint64_t bytes);
  Slice in(uint64_t off, uint64_t len) const { return {Buffer::input, off, len}; }
  Slice out(uint64_t off, uint64_t len) const { return {Buffer::output, off, len}; }
  Slice scratch(uint64_t off, uint64_t len) const { return {Buffer::scratch, off, len}; }

  uint32_t send(int peer, Slice src);
  uint32_t recv(int peer, Slice dst);
  uint32_t reduce(Slice dst, Slice x, Slice y);
  uint32_t copy(Slice dst, Slice src);
  uint32_t finalize(Slice dst);

 private:
  struct Range {
    int space;
    uint64_t lo, hi;
  };
  // Bytes [lo, hi) of a space (lo is the map key): the step that last wrote them (kNone: not
  // written yet) and the steps that read them since.
  struct Segment {
    uint64_t hi;
    uint32_t writer;
    std::vector<uint32_t> readers;
  };
  using Segments = std::map<uint64_t, Segment>;
  Range map(const Slice& s) const;
  // Adds the edges `step` needs for the accesses `acc`, then records them.
  void track(uint32_t step, std::initializer_list<std::pair<Slice, bool>> acc);
  // Makes x a segment boundary (splits the segment that straddles it, if any).
  static void split(Segments& m, uint64_t x);

  Schedule& s_;
  const CollectiveArgs& a_;
  uint64_t block_ = 0;  // bytes of the rank's block for the aliasing of all_gather/reduce_scatter
  std::array<Segments, 3> spaces_;
};

struct Fold {
  int p = 1, p2 = 1, rem = 0, levels = 0;
  int v = 0;  // virtual rank, -1 when this rank sits out (an even rank below 2*rem)
  Fold(int size, int rank);
  /// The real rank that plays virtual rank `vr`.
  int real(int vr) const { return vr < rem ? 2 * vr + 1 : vr + rem; }
  /// The first real rank whose data virtual rank `vr` carries: vr carries [first(vr), first(vr+1)).
  int first(int vr) const { return vr < rem ? 2 * vr : vr + rem; }
};

}  // namespace shoal::algorithms
