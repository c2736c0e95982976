#pragma once
// Element-wise comparison of an image tensor from a GPU kernel (preprocess, ROI crop) with its CPU twin's, in
// the tensor's dtype, with the error bounds those kernels document (see test_preprocess_gpu.cpp's header).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/half.hpp"
#include "runtime/format.hpp"

namespace sluice::test {

constexpr double kF32MaxAbs = 1e-4;
constexpr double kF16MaxAbs = 2e-3;
constexpr double kF16MaxRel = 1e-2;
constexpr double kBf16MaxAbs = 1e-2;
constexpr double kBf16MaxRel = 1e-2;

// gpu and cpu: n elements of `dtype` each (raw bytes). CHECKs that every element is within the bound; NaN (an
// element never written) fails.
inline void check_image_tensor(DType dtype, const std::uint8_t* gpu_raw, const std::uint8_t* cpu_raw, std::size_t n) {
  std::vector<float> gpu(n), cpu(n);
  if (dtype == DType::f32) {
    std::memcpy(gpu.data(), gpu_raw, n * sizeof(float));
    std::memcpy(cpu.data(), cpu_raw, n * sizeof(float));
  } else {
    const bool bf = dtype == DType::bf16;
    for (std::size_t i = 0; i < n; ++i) {
      std::uint16_t g, c;
      std::memcpy(&g, gpu_raw + 2 * i, 2);
      std::memcpy(&c, cpu_raw + 2 * i, 2);
      gpu[i] = bf ? kernels::bf16_bits_to_float(g) : kernels::half_bits_to_float(g);
      cpu[i] = bf ? kernels::bf16_bits_to_float(c) : kernels::half_bits_to_float(c);
    }
  }
  const double max_abs = dtype == DType::f32 ? kF32MaxAbs : dtype == DType::f16 ? kF16MaxAbs : kBf16MaxAbs;
  const double max_rel = dtype == DType::f32 ? 0.0 : dtype == DType::f16 ? kF16MaxRel : kBf16MaxRel;
  std::size_t bad = 0, worst = 0;
  double worst_err = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double err = std::fabs(static_cast<double>(gpu[i]) - static_cast<double>(cpu[i]));
    const bool ok = err <= max_abs || err <= max_rel * std::fabs(static_cast<double>(cpu[i]));
    if (!ok) {  // also catches NaN (unwritten or bad) elements
      if (bad == 0) worst = i;
      ++bad;
    }
    if (err > worst_err) {
      worst_err = err;
      if (bad == 0) worst = i;
    }
  }
  INFO("max abs error " << worst_err << "; elements out of bound: " << bad << " of " << n << "; element " << worst
                        << ": gpu " << (n ? gpu[worst] : 0.f) << " cpu " << (n ? cpu[worst] : 0.f));
  CHECK(bad == 0);
}

}  // namespace sluice::test
