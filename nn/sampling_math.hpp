#pragma once
// GatherElements' index: one definition, used by the CPU layer and the CUDA kernel (host and device), as
// nn/elementwise_math.hpp is for the elementwise ops.
//
// C++17 (nvcc includes it).
#include <math.h>

#include <cstdint>

#include "nn/elementwise_math.hpp"  // SLUICE_HOST_DEVICE

namespace sluice::nn {

// A GatherElements index held as a float (run-time index data, f32/f16/bf16): rounded to the nearest integer, a
// negative one counting from the end; -1 when it is NaN or outside [-dim, dim), which the caller turns into NaN.
SLUICE_HOST_DEVICE inline std::int64_t gather_position(float index, std::int64_t dim) {
  const float r = rintf(index);
  if (!(r >= -static_cast<float>(dim) && r < static_cast<float>(dim))) return -1;  // NaN fails both
  const auto i = static_cast<std::int64_t>(r);
  return i < 0 ? i + dim : i;
}

}  // namespace sluice::nn
