// SplitMix64 (Steele, Lea, Flood 2014): the core's one source of pseudo-random numbers, drawn
// from a state the caller seeds (ConnectionConfig::seed), so every run of the same inputs makes
// the same choices (port rotation, the spray's pacing phase).
#pragma once

#include <cstdint>

namespace metaroce::core {

// Advances `state` and returns the next value.
inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace metaroce::core
