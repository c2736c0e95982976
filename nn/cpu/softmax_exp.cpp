#include "nn/cpu/softmax_exp.hpp"

#include <bit>

namespace sluice::nn::cpu {
namespace {

// exp(x) for x <= 0: x = n ln2 + r with |r| <= ln2 / 2, exp(r) by Cephes' polynomial, 2^n put in the exponent
// bits. n comes from adding 1.5 * 2^23, which leaves round(x / ln2) in the low mantissa bits (no float to int
// conversion, so a NaN stays a NaN and nothing is undefined).
inline float exp_nonpositive(float x) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  const float t = x * 1.44269504088896341f + kRound;
  const float n = t - kRound;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const std::int32_t exponent = std::bit_cast<std::int32_t>(t) - std::bit_cast<std::int32_t>(kRound) + 127;
  return p * std::bit_cast<float>(exponent << 23);
}

// The row, inlined into one copy per instruction set below.
[[gnu::always_inline]] inline float exp_shifted_row_body(const float* x, float* y, std::int64_t n, float max) {
  for (std::int64_t j = 0; j < n; ++j) {
    const float shifted = x[j] - max;
    const float e = exp_nonpositive(shifted < kNegligibleSoftmaxExponent ? kNegligibleSoftmaxExponent : shifted);
    y[j] = shifted < kNegligibleSoftmaxExponent ? 0.0f : e;
  }
  constexpr std::int64_t kLanes = 16;  // independent partial sums, added in the same order on every run
  float lanes[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (std::int64_t l = 0; l < kLanes; ++l) lanes[l] += y[j + l];
  for (; j < n; ++j) lanes[0] += y[j];
  float sum = 0.0f;
  for (float lane : lanes) sum += lane;
  return sum;
}

[[gnu::target("avx512f")]] float exp_shifted_row_avx512(const float* x, float* y, std::int64_t n, float max) {
  return exp_shifted_row_body(x, y, n, max);
}
[[gnu::target("avx2")]] float exp_shifted_row_avx2(const float* x, float* y, std::int64_t n, float max) {
  return exp_shifted_row_body(x, y, n, max);
}
float exp_shifted_row_plain(const float* x, float* y, std::int64_t n, float max) {
  return exp_shifted_row_body(x, y, n, max);
}

using ExpRow = float (*)(const float*, float*, std::int64_t, float);

// Picked on the first call, not by an ifunc (target_clones): an ifunc resolver runs while the loader relocates,
// before a sanitizer's runtime is up, and ThreadSanitizer builds crashed there.
ExpRow pick_exp_row() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return exp_shifted_row_avx512;
  if (__builtin_cpu_supports("avx2")) return exp_shifted_row_avx2;
  return exp_shifted_row_plain;
}

}  // namespace

float exp_shifted_row(const float* x, float* y, std::int64_t n, float max) {
  static const ExpRow row = pick_exp_row();
  return row(x, y, n, max);
}

}  // namespace sluice::nn::cpu
