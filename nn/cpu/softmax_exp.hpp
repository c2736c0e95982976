#pragma once
// exp(x - max) for the softmaxes (Softmax, Attention), 0 below exp(-70) ~ 4e-31: such a weight is invisible next to
// the row's largest (1) in f32, but it would become subnormal (alone, or once divided by the row's sum), and every
// later multiply by a subnormal takes a slow microcode path: Swin's masked scores (-100) made its products by V 40x
// slower.
#include <cmath>

namespace sluice::nn::cpu {

inline float softmax_exp(float shifted) {
  constexpr float kNegligible = -70.0f;
  return shifted < kNegligible ? 0.0f : std::exp(shifted);  // NaN (a row of -inf) stays NaN
}

}  // namespace sluice::nn::cpu
