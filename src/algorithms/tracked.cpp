#include "algorithms/tracked.hpp"

#include <algorithm>

namespace shoal::algorithms {

Tracked::Tracked(Schedule& s, const CollectiveArgs& a) : s_(s), a_(a) {
  block_ = a.count * size_of(a.dtype);
}

uint64_t Tracked::alloc(uint64_t bytes) {
  const uint64_t off = s_.scratch_bytes;
  s_.scratch_bytes += bytes;
  return off;
}

Tracked::Range Tracked::map(const Slice& s) const {
  // Spaces: 0 user memory (input and output where they may alias), 1 output when it cannot
  // alias the input, 2 scratch.
  const uint64_t r = static_cast<uint64_t>(a_.rank);
  switch (s.buffer) {
    case Buffer::scratch:
      return {2, s.offset, s.offset + s.bytes};
    case Buffer::input:
      if (a_.collective == Collective::all_gather)
        return {0, r * block_ + s.offset, r * block_ + s.offset + s.bytes};
      return {0, s.offset, s.offset + s.bytes};
    case Buffer::output:
      switch (a_.collective) {
        case Collective::all_reduce:
          return {0, s.offset, s.offset + s.bytes};
        case Collective::all_gather:
          return {0, s.offset, s.offset + s.bytes};
        case Collective::reduce_scatter:
          return {0, r * block_ + s.offset, r * block_ + s.offset + s.bytes};
        default:
          return {1, s.offset, s.offset + s.bytes};
      }
  }
  return {0, 0, 0};
}

void Tracked::split(Segments& m, uint64_t x) {
  auto it = m.upper_bound(x);
  if (it == m.begin()) return;
  --it;
  if (it->first < x && x < it->second.hi) {
    Segment tail = it->second;
    it->second.hi = x;
    m.emplace(x, std::move(tail));
  }
}

void Tracked::track(uint32_t step, std::initializer_list<std::pair<Slice, bool>> acc) {
  // A read depends on the bytes' last writer; a write also on every read since. Earlier
  // accesses are ordered before those by the same rule, so the edges are complete.
  std::vector<uint32_t> deps;
  for (const auto& [slice, write] : acc) {
    const Range m = map(slice);
    if (m.lo >= m.hi) continue;
    Segments& segs = spaces_[static_cast<size_t>(m.space)];
    split(segs, m.lo);
    split(segs, m.hi);
    for (auto it = segs.lower_bound(m.lo); it != segs.end() && it->first < m.hi; ++it) {
      if (it->second.writer != Schedule::kNone) deps.push_back(it->second.writer);
      if (write) deps.insert(deps.end(), it->second.readers.begin(), it->second.readers.end());
    }
  }
  std::sort(deps.begin(), deps.end());
  deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
  for (uint32_t d : deps) s_.add_dep(step, d);
  // Record reads first, then writes: a byte this step both reads and writes ends with this
  // step as its writer and no readers.
  for (const auto& [slice, write] : acc) {
    const Range m = map(slice);
    if (write || m.lo >= m.hi) continue;
    Segments& segs = spaces_[static_cast<size_t>(m.space)];
    uint64_t at = m.lo;  // bytes before `at` are recorded
    auto it = segs.lower_bound(m.lo);
    while (at < m.hi) {
      if (it == segs.end() || it->first > at) {  // a gap nobody touched yet
        const uint64_t gap_hi = it == segs.end() ? m.hi : std::min(it->first, m.hi);
        it = segs.emplace_hint(it, at, Segment{gap_hi, Schedule::kNone, {step}});
      } else if (it->second.readers.empty() || it->second.readers.back() != step) {
        it->second.readers.push_back(step);
      }
      at = it->second.hi;
      ++it;
    }
  }
  for (const auto& [slice, write] : acc) {
    const Range m = map(slice);
    if (!write || m.lo >= m.hi) continue;
    Segments& segs = spaces_[static_cast<size_t>(m.space)];
    split(segs, m.lo);  // again: a read above may have filled a gap across the bounds
    split(segs, m.hi);
    segs.erase(segs.lower_bound(m.lo), segs.lower_bound(m.hi));
    segs.emplace(m.lo, Segment{m.hi, step, {}});
  }
}

// Empty transfers are dropped: both sides of a pair compute the same lengths, so they agree.
uint32_t Tracked::send(int peer, Slice src) {
  if (src.bytes == 0) return Schedule::kNone;
  const uint32_t id = s_.send(peer, src);
  track(id, {{src, false}});
  return id;
}

uint32_t Tracked::recv(int peer, Slice dst) {
  if (dst.bytes == 0) return Schedule::kNone;
  const uint32_t id = s_.recv(peer, dst);
  track(id, {{dst, true}});
  return id;
}

uint32_t Tracked::reduce(Slice dst, Slice x, Slice y) {
  const uint32_t id = s_.reduce(dst, x, y);
  track(id, {{x, false}, {y, false}, {dst, true}});
  return id;
}

uint32_t Tracked::copy(Slice dst, Slice src) {
  const uint32_t id = s_.copy(dst, src);
  track(id, {{src, false}, {dst, true}});
  return id;
}

uint32_t Tracked::finalize(Slice dst) {
  const uint32_t id = s_.finalize(dst);
  track(id, {{dst, true}});
  return id;
}

Fold::Fold(int size, int rank) : p(size) {
  while (p2 * 2 <= p) {
    p2 *= 2;
    ++levels;
  }
  rem = p - p2;
  if (rank < 2 * rem)
    v = rank % 2 == 0 ? -1 : rank / 2;
  else
    v = rank - rem;
}

}  // namespace shoal::algorithms
