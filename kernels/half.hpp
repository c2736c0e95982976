#pragma once
// IEEE binary16 and bfloat16 <-> binary32 bit conversions in plain C++ (CPU twin, tests; also callable from CUDA
// device code). float_to_half_bits rounds exactly like __float2half_rn, float_to_bf16_bits like
// __float2bfloat16_rn (nearest, ties to even).
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SLUICE_HALF_HD __host__ __device__
#else
#define SLUICE_HALF_HD
#endif

namespace sluice::kernels {

SLUICE_HALF_HD inline std::uint16_t float_to_half_bits(float f) {
  std::uint32_t x = 0;
  std::memcpy(&x, &f, sizeof x);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t ax = x & 0x7fffffffu;

  if (ax >= 0x7f800000u) {  // inf or nan; a nan stays a nan (quiet bit set, top payload bits kept)
    if (ax == 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  }
  if (ax >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520: rounds to inf
  if (ax >= 0x38800000u) {  // normal half: rebias exponent 127 -> 15, round away 13 mantissa bits
    std::uint32_t h = (ax - 0x38000000u) >> 13;
    const std::uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is correct
    return static_cast<std::uint16_t>(sign | h);
  }
  if (ax <= 0x33000000u) return sign;  // <= 2^-25: ties to even -> zero
  // Subnormal half: count units of 2^-24. value = m * 2^(e-150), so units = m >> (126 - e).
  const int e = static_cast<int>(ax >> 23);
  const std::uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  const int shift = 126 - e;  // 14..24 here
  std::uint32_t h = m >> shift;
  const std::uint32_t rem = m & ((1u << shift) - 1u);
  const std::uint32_t halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (h & 1u))) ++h;  // may reach 0x400, the smallest normal: correct
  return static_cast<std::uint16_t>(sign | h);
}

SLUICE_HALF_HD inline float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu;
  const std::uint32_t m = h & 0x3ffu;
  std::uint32_t x = 0;
  if (e == 0) {
    if (m == 0) {
      x = sign;
    } else {  // subnormal: m * 2^-24 is exact in float
      float v = static_cast<float>(m) * 5.9604644775390625e-8f;
      return sign ? -v : v;
    }
  } else if (e == 31) {
    x = sign | 0x7f800000u | (m << 13);
  } else {
    x = sign | ((e + 112u) << 23) | (m << 13);
  }
  float f = 0.f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}

// bfloat16: the top 16 bits of a binary32 (same exponent range), mantissa rounded to nearest, ties to even.
// Overflow rounds to inf like IEEE; a nan stays a nan (quiet bit set, sign and top payload bits kept).
SLUICE_HALF_HD inline std::uint16_t float_to_bf16_bits(float f) {
  std::uint32_t x = 0;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  x += 0x7fffu + ((x >> 16) & 1u);  // a carry into the exponent (even up to inf) is correct
  return static_cast<std::uint16_t>(x >> 16);
}

SLUICE_HALF_HD inline float bf16_bits_to_float(std::uint16_t h) {
  const std::uint32_t x = static_cast<std::uint32_t>(h) << 16;
  float f = 0.f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}

}  // namespace sluice::kernels

#undef SLUICE_HALF_HD
