#pragma once
// exp(x - max) over a row for the softmaxes (Softmax, Attention), the row's time being mostly these exps.
#include <cstdint>

namespace sluice::nn::cpu {

// y[j] = exp(x[j] - max) for j < n (y may be x), and their sum. exp is a polynomial (Cephes' expf, within 2 ulp)
// that the compiler vectorises, built for AVX-512, AVX2 and plain x86-64 and picked on the first call. Weights under
// exp(-70) ~ 4e-31 are 0: invisible next to the row's largest (1) in f32, but they would become subnormal (alone,
// or once divided by the sum), and every later multiply by a subnormal takes a slow microcode path (Swin's masked
// scores, -100, made its products by V 40x slower). A NaN (a row of -inf) stays NaN.
float exp_shifted_row(const float* x, float* y, std::int64_t n, float max);

// Where exp_shifted_row gives 0: a score this far under the row's largest, or farther.
inline constexpr float kNegligibleSoftmaxExponent = -70.0f;

}  // namespace sluice::nn::cpu
