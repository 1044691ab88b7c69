#include "algorithms/schedule.hpp"

#include <algorithm>
#include <cstring>

#include "algorithms/registry.hpp"

namespace shoal::algorithms {

std::string_view to_string(Collective c) {
  switch (c) {
    case Collective::all_reduce:
      return "all_reduce";
    case Collective::all_gather:
      return "all_gather";
    case Collective::reduce_scatter:
      return "reduce_scatter";
    case Collective::broadcast:
      return "broadcast";
    case Collective::reduce:
      return "reduce";
    case Collective::all_to_all:
      return "all_to_all";
    case Collective::gather:
      return "gather";
    case Collective::scatter:
      return "scatter";
    case Collective::barrier:
      return "barrier";
    case Collective::send:
      return "send";
    case Collective::recv:
      return "recv";
  }
  return "unknown";
}

uint64_t Chunking::pieces() const { return total == 0 ? 0 : (total + chunk - 1) / chunk; }
uint64_t Chunking::offset(uint64_t i) const { return i * chunk; }
uint64_t Chunking::length(uint64_t i) const {
  uint64_t off = i * chunk;
  return total - off < chunk ? total - off : chunk;
}

uint64_t block_begin(uint64_t count, int p, int b) {
  const uint64_t base = count / static_cast<uint64_t>(p), extra = count % static_cast<uint64_t>(p);
  const uint64_t ub = static_cast<uint64_t>(b);
  return ub * base + (ub < extra ? ub : extra);
}

uint64_t input_bytes(const CollectiveArgs& a) {
  const uint64_t es = size_of(a.dtype), p = static_cast<uint64_t>(a.size);
  switch (a.collective) {
    case Collective::reduce_scatter:
    case Collective::all_to_all:
      return a.count * es * p;
    case Collective::scatter:
      return a.rank == a.root ? a.count * es * p : 0;
    case Collective::recv:
    case Collective::barrier:
      return 0;
    case Collective::broadcast:
      return a.rank == a.root ? a.count * es : 0;
    default:
      return a.count * es;
  }
}

uint64_t output_bytes(const CollectiveArgs& a) {
  const uint64_t es = size_of(a.dtype), p = static_cast<uint64_t>(a.size);
  switch (a.collective) {
    case Collective::all_gather:
    case Collective::all_to_all:
      return a.count * es * p;
    case Collective::gather:
      return a.rank == a.root ? a.count * es * p : 0;
    case Collective::reduce:
      return a.rank == a.root ? a.count * es : 0;
    case Collective::send:
    case Collective::barrier:
      return 0;
    default:
      return a.count * es;
  }
}

uint32_t signature(const CollectiveArgs& a) {
  // A word-wise multiply-xorshift hash of the fields every participant must agree on (every
  // call computes it, the smallest ones too: a byte-wise hash of these 40 bytes took about a
  // tenth of an 8-byte flat all_reduce).
  uint64_t fields[5] = {static_cast<uint64_t>(a.collective), static_cast<uint64_t>(a.dtype),
                        static_cast<uint64_t>(a.op), a.count, static_cast<uint64_t>(a.root + 1)};
  const bool reduces = a.collective == Collective::all_reduce ||
                       a.collective == Collective::reduce ||
                       a.collective == Collective::reduce_scatter;
  if (!reduces) fields[2] = 0;
  if (a.collective == Collective::send || a.collective == Collective::recv) {
    fields[0] = 0xfeed;  // a send and its recv carry the same signature
    fields[4] = static_cast<uint64_t>(static_cast<uint32_t>(a.tag));
  }
  uint64_t h = 0x9e3779b97f4a7c15ull;
  auto mix = [&h](uint64_t v) {
    h = (h ^ v) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  };
  for (uint64_t f : fields) mix(f);
  mix(a.unchecked);
  // The algorithm too: ranks that chose differently (SHOAL_ALGO differs) fail with a
  // MismatchError on the first frame instead of waiting for frames that never come.
  const AlgorithmInfo& row = choose(a);
  const std::string_view name = row.name;
  for (size_t i = 0; i < name.size(); i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, name.data() + i, std::min<size_t>(8, name.size() - i));
    mix(word);
  }
  mix(name.size());
  if (a.ring_order && row.follows_links)
    for (int r : *a.ring_order) mix(static_cast<uint64_t>(r));
  return static_cast<uint32_t>(h ^ (h >> 32));
}

}  // namespace shoal::algorithms
