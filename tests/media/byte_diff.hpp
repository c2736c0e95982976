#pragma once
// Largest and mean absolute difference between two byte streams (decoded frames against a reference).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace sluice::test {

struct ByteDiff {
  int max = 0;
  double mean = 0;
  std::size_t n = 0;
  void add(int a, int b) {
    const int d = std::abs(a - b);
    max = std::max(max, d);
    mean += (d - mean) / static_cast<double>(++n);
  }
};

inline ByteDiff compare_bytes(const std::uint8_t* a, const std::uint8_t* b, std::size_t n) {
  ByteDiff d;
  for (std::size_t i = 0; i < n; ++i) d.add(a[i], b[i]);
  return d;
}

}  // namespace sluice::test
