// splitmix64 (Steele, Lea & Flood 2014): a 64-bit value mixed into an unrelated one, for seeds
// derived from several numbers (every process that derives one gets the same).
#pragma once

#include <cstdint>

namespace shoal {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace shoal
