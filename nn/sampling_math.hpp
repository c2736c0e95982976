#pragma once
// GatherElements' index and GridSample's coordinates and taps: one definition each, used by constant folding,
// the CPU layers and the CUDA kernels (host and device), as nn/elementwise_math.hpp is for the elementwise ops.
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

enum class GridSamplePadding : std::uint8_t { zeros, border, reflection };

// PyTorch's reflect_coordinates: x reflected into [twice_low / 2, twice_high / 2].
SLUICE_HOST_DEVICE inline float grid_reflect(float x, int twice_low, int twice_high) {
  if (twice_low == twice_high) return 0.f;
  const float low = static_cast<float>(twice_low) / 2, span = static_cast<float>(twice_high - twice_low) / 2;
  x = fabsf(x - low);
  const float extra = fmodf(x, span);
  const float flips = floorf(x / span);  // kept a float: no integer overflow for far coordinates
  return fmodf(flips, 2.f) == 0.f ? extra + low : span - extra + low;
}

// The input coordinate (in pixels, 0 = the first pixel's centre) of a normalized grid coordinate g on an axis of
// `size` pixels, after border or reflection padding (PyTorch's grid_sampler_compute_source_index). Zeros padding
// leaves it as is, clamped to [-2, size + 1] (every tap outside the input either way) so that it converts to an
// integer; a NaN stays NaN (the taps then read as outside).
SLUICE_HOST_DEVICE inline float grid_source(float g, int size, GridSamplePadding padding, bool align_corners) {
  float x = align_corners ? (g + 1.f) / 2.f * static_cast<float>(size - 1)
                          : ((g + 1.f) * static_cast<float>(size) - 1.f) / 2.f;
  const float last = static_cast<float>(size - 1);
  if (padding == GridSamplePadding::reflection) {
    x = align_corners ? grid_reflect(x, 0, 2 * (size - 1)) : grid_reflect(x, -1, 2 * size - 1);
    padding = GridSamplePadding::border;  // then clipped, as PyTorch does
  }
  if (padding == GridSamplePadding::border) return x != x ? x : fminf(fmaxf(x, 0.f), last);
  return x != x ? x : fminf(fmaxf(x, -2.f), last + 2.f);
}

// One output element of GridSample: `at(iy, ix)` reads the input plane (only called inside it); outside taps
// read 0 (after border/reflection padding no tap with weight is outside).
template <typename Read>
SLUICE_HOST_DEVICE inline float grid_sample_at(float gx, float gy, int h, int w, bool nearest,
                                               GridSamplePadding padding, bool align_corners, const Read& at) {
  const float x = grid_source(gx, w, padding, align_corners), y = grid_source(gy, h, padding, align_corners);
  if (x != x || y != y) return 0.f;
  auto tap = [&](int iy, int ix) { return iy >= 0 && iy < h && ix >= 0 && ix < w ? at(iy, ix) : 0.f; };
  if (nearest) return tap(static_cast<int>(rintf(y)), static_cast<int>(rintf(x)));  // half to even, as PyTorch
  const float fx = floorf(x), fy = floorf(y);
  const int x0 = static_cast<int>(fx), y0 = static_cast<int>(fy);
  const float wx = x - fx, wy = y - fy;
  // Each tap's weight times its value, summed in PyTorch's order (nw, ne, sw, se).
  return tap(y0, x0) * ((1.f - wx) * (1.f - wy)) + tap(y0, x0 + 1) * (wx * (1.f - wy)) +
         tap(y0 + 1, x0) * ((1.f - wx) * wy) + tap(y0 + 1, x0 + 1) * (wx * wy);
}

}  // namespace sluice::nn
