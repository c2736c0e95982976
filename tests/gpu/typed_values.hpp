#pragma once
// Host f32 values as a kernel's element type holds them (f32, f16, bf16): the bytes to copy to the device, the
// values read back, and a value rounded the way the device sees it (so a host reference reads exactly what the
// kernel reads). For the kernel tests that call launchers directly.
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/half.hpp"
#include "nn/cuda/kernels.cuh"

namespace sluice::nn::test {

inline float rounded(DType type, float v) {
  if (type == DType::f16) return kernels::half_bits_to_float(kernels::float_to_half_bits(v));
  if (type == DType::bf16) return kernels::bf16_bits_to_float(kernels::float_to_bf16_bits(v));
  return v;
}

inline std::vector<unsigned char> device_bytes(DType type, const std::vector<float>& v) {
  std::vector<unsigned char> out(v.size() * dtype_bytes(type));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (type == DType::f32) {
      std::memcpy(&out[i * 4], &v[i], 4);
    } else {
      const std::uint16_t bits = type == DType::f16 ? kernels::float_to_half_bits(v[i]) : kernels::float_to_bf16_bits(v[i]);
      std::memcpy(&out[i * 2], &bits, 2);
    }
  }
  return out;
}

inline std::vector<float> host_floats(DType type, const std::vector<unsigned char>& bytes) {
  const std::size_t n = bytes.size() / dtype_bytes(type);
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (type == DType::f32) {
      std::memcpy(&out[i], &bytes[i * 4], 4);
    } else {
      std::uint16_t bits;
      std::memcpy(&bits, &bytes[i * 2], 2);
      out[i] = type == DType::f16 ? kernels::half_bits_to_float(bits) : kernels::bf16_bits_to_float(bits);
    }
  }
  return out;
}

}  // namespace sluice::nn::test
