// Small values core tests build from: deterministic pseudo-random bytes and
// paths written as literals.
#pragma once

#include <random>
#include <string>

#include "daemon/core/types.h"

namespace perch::testing {

// The block size of core's tests over in-memory stores.
inline constexpr uint64_t kBlock = 1000;

// `n` pseudo-random bytes, the same for the same seed.
inline std::string Data(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// A path known to be valid. REQUIRES: `s` parses.
inline core::ObjectPath P(const std::string& s) { return *core::ObjectPath::Parse(s); }

}  // namespace perch::testing
