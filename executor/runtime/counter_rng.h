// SplitMix64 as a counter-based generator: output n of stream `seed` without generating outputs 0..n−1.
#pragma once

#include <cstdint>

namespace shardplan::runtime {

// Steele, Lea & Flood 2014, "Fast splittable pseudorandom number generators" (java.util.SplittableRandom's mix):
// output n is the finaliser applied to seed + (n+1)·γ. Used wherever a value must depend only on (seed, index) —
// parameter init per element (Note [Sharded init]) and dataset windows per batch — so results never depend on how
// many values were drawn before, on which rank, or on the standard library.
inline std::uint64_t splitmix64(std::uint64_t seed, std::uint64_t n) {
  std::uint64_t z = seed + (n + 1) * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace shardplan::runtime
