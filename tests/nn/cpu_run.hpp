#pragma once
// What the CPU op tests share: random data, row-major index arithmetic for the references, running a CPU engine
// on feeds, and the relative error of a result against its reference.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "nn/cpu/engine.hpp"

namespace sluice::nn::test {

inline std::int64_t count(const Shape& s) { return element_count(s); }

inline std::vector<float> random_floats(std::mt19937& rng, std::int64_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// Row-major: a flat offset's index in `shape`, and back.
inline std::vector<std::int64_t> unravel(std::int64_t flat, const Shape& shape) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}
inline std::int64_t ravel(const std::vector<std::int64_t>& idx, const Shape& shape) {
  std::int64_t flat = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + idx[d];
  return flat;
}

// max |got - want| / max |want| (absolute when the reference is all zeros). A NaN or an infinity where the other
// has none is an infinite error; the same NaN or infinity in both counts as equal.
inline double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) return std::numeric_limits<double>::infinity();
    if (std::isnan(want[i]) || (std::isinf(want[i]) && got[i] == want[i])) continue;
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return scale > 0.0 ? diff / scale : diff;
}

// The engine's outputs for `feeds` (in its graph's input order); each output starts as NaN, so one the engine
// leaves unwritten shows.
inline std::vector<std::vector<float>> run_engine(CpuEngine& engine, const std::vector<std::vector<float>>& feeds) {
  std::vector<std::vector<float>> results;
  for (const auto& o : engine.graph().outputs) results.emplace_back(static_cast<std::size_t>(count(o.shape)), std::nanf(""));
  std::vector<const float*> in;
  for (const auto& f : feeds) in.push_back(f.data());
  std::vector<float*> out;
  for (auto& r : results) out.push_back(r.data());
  engine.run(in, out);
  return results;
}

}  // namespace sluice::nn::test
