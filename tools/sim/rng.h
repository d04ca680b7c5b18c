// Seeded pseudo-random numbers for the simulator: SplitMix64 to derive seeds, xoshiro256** to draw.
//
// The simulator draws every random decision (loss, tokens, payload patterns) from generators seeded
// from --seed, never from std::random_device or the clock, so a run is a function of its flags.
#pragma once

#include <cstdint>

namespace metaroce::sim {

// One SplitMix64 step: a well-mixed 64-bit value from `x` (also a good hash of small tuples).
constexpr uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Derives an independent seed for a sub-stream, e.g. DeriveSeed(seed, kLossStream, link_index).
constexpr uint64_t DeriveSeed(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
  return SplitMix64(SplitMix64(SplitMix64(SplitMix64(seed) ^ a) ^ b) ^ c);
}

// xoshiro256** (Blackman and Vigna), seeded through SplitMix64.
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed) {
    for (uint64_t& word : s_) {
      seed += 0x9e3779b97f4a7c15ull;
      word = SplitMix64(seed);
    }
  }
  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1) with 53 bits of precision.
  double NextUnit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace metaroce::sim
