#pragma once
// What the CPU op tests share: running a CPU engine on feeds, and the relative error of a result against its
// reference.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "nn/cpu/engine.hpp"

namespace sluice::nn::test {

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
  for (const auto& o : engine.graph().outputs) {
    std::int64_t n = 1;
    for (const std::int64_t d : o.shape) n *= d;
    results.emplace_back(static_cast<std::size_t>(n), std::nanf(""));
  }
  std::vector<const float*> in;
  for (const auto& f : feeds) in.push_back(f.data());
  std::vector<float*> out;
  for (auto& r : results) out.push_back(r.data());
  engine.run(in, out);
  return results;
}

}  // namespace sluice::nn::test
