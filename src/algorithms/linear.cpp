// Direct exchanges: pairwise all_to_all, linear gather and scatter, point-to-point.
#include "algorithms/algorithms.hpp"

namespace shoal::algorithms {

void pairwise_all_to_all(Schedule& s, const CollectiveArgs& a) {
  const int p = a.size, r = a.rank;
  const uint64_t block = a.count * size_of(a.dtype), total = block * static_cast<uint64_t>(p);
  // In place, the input is staged in scratch so receives can overwrite the buffer at once.
  Buffer src = Buffer::input;
  uint32_t staged = Schedule::kNone;
  if (a.in_place && p > 1 && total > 0) {
    src = Buffer::scratch;
    s.scratch_bytes = total;
    staged = s.copy({Buffer::scratch, 0, total}, {Buffer::input, 0, total});
  }
  auto at = [&](Buffer b, int i) { return Slice{b, static_cast<uint64_t>(i) * block, block}; };
  // Step i: send to r+i, receive from r-i — every pair talks once, in both directions.
  for (int i = 1; i < p; ++i) {
    s.send(mod(r + i, p), at(src, mod(r + i, p)), {staged});
    s.recv(mod(r - i, p), at(Buffer::output, mod(r - i, p)), {staged});
  }
  // The own block last: steps become ready in order, so the transfers are under way (a large
  // one on shared memory pulled by its receiver) while this rank copies.
  if (!a.in_place) s.copy(at(Buffer::output, r), at(Buffer::input, r));
}

void linear_gather(Schedule& s, const CollectiveArgs& a) {
  const uint64_t block = a.count * size_of(a.dtype);
  if (a.rank != a.root) {
    s.send(a.root, {Buffer::input, 0, block});
    return;
  }
  auto dst = [&](int i) { return Slice{Buffer::output, static_cast<uint64_t>(i) * block, block}; };
  for (int i = 0; i < a.size; ++i)
    if (i != a.rank) s.recv(i, dst(i));
  s.copy(dst(a.rank), {Buffer::input, 0, block});  // last, as all_to_all's
}

void linear_scatter(Schedule& s, const CollectiveArgs& a) {
  const uint64_t block = a.count * size_of(a.dtype);
  if (a.rank != a.root) {
    s.recv(a.root, {Buffer::output, 0, block});
    return;
  }
  auto src = [&](int i) { return Slice{Buffer::input, static_cast<uint64_t>(i) * block, block}; };
  for (int i = 0; i < a.size; ++i)
    if (i != a.rank) s.send(i, src(i));
  s.copy({Buffer::output, 0, block}, src(a.rank));  // last, as all_to_all's
}

void point_to_point(Schedule& s, const CollectiveArgs& a) {
  const uint64_t bytes = a.count * size_of(a.dtype);
  if (a.collective == Collective::send)
    s.send(a.peer, {Buffer::input, 0, bytes});
  else
    s.recv(a.peer, {Buffer::output, 0, bytes});
}

}  // namespace shoal::algorithms
