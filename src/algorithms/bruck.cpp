// Bruck all_gather (Bruck et al. 1997): ceil(log2 p) steps for any p. At the step of distance
// d every rank sends the min(d, p-d) blocks it has, starting at its own, to rank r-d and gets
// as many from r+d. Blocks go straight to their final place in the output (the rotation of the
// textbook version is only an indexing), so no scratch and no final shuffle; a range that wraps
// past the last block travels as two frames.
#include <algorithm>

#include "algorithms/tracked.hpp"

namespace shoal::algorithms {

void bruck_all_gather(Schedule& s, const CollectiveArgs& a) {
  const int p = a.size, r = a.rank;
  const uint64_t block = a.count * size_of(a.dtype);
  if (a.count == 0) return;
  Tracked t(s, a);
  t.copy(t.out(static_cast<uint64_t>(r) * block, block), t.in(0, block));
  // Blocks [first, first+m) mod p as at most two contiguous slices of the output.
  auto blocks = [&](int first, int m, auto&& emit) {
    const int head = std::min(m, p - first);
    emit(t.out(static_cast<uint64_t>(first) * block, static_cast<uint64_t>(head) * block));
    if (head < m) emit(t.out(0, static_cast<uint64_t>(m - head) * block));
  };
  for (int d = 1; d < p; d <<= 1) {
    const int m = std::min(d, p - d), to = mod(r - d, p), from = mod(r + d, p);
    blocks(r, m, [&](Slice x) { t.send(to, x); });
    blocks(from, m, [&](Slice x) { t.recv(from, x); });
  }
}

}  // namespace shoal::algorithms
