#include "stages/track/kalman.hpp"

namespace sluice::track {
namespace {

constexpr double kWeightPosition = 1.0 / 20, kWeightVelocity = 1.0 / 160;

// Standard deviations per coordinate for a box of height h: cx, cy, h scale with h, the aspect is fixed.
void position_std(double h, double (&s)[4], double aspect_std) {
  s[0] = kWeightPosition * h, s[1] = kWeightPosition * h, s[2] = aspect_std, s[3] = kWeightPosition * h;
}

}  // namespace

Kalman::Kalman(const Box& z) {
  const double at[4] = {z.cx, z.cy, z.aspect, z.h};
  const double sp[4] = {2 * kWeightPosition * z.h, 2 * kWeightPosition * z.h, 1e-2, 2 * kWeightPosition * z.h};
  const double sv[4] = {10 * kWeightVelocity * z.h, 10 * kWeightVelocity * z.h, 1e-5, 10 * kWeightVelocity * z.h};
  for (int k = 0; k < 4; ++k) {
    x_[k] = at[k], v_[k] = 0;
    ppp_[k] = sp[k] * sp[k], ppv_[k] = 0, pvv_[k] = sv[k] * sv[k];
  }
}

void Kalman::predict(bool freeze_height) {
  if (freeze_height) v_[3] = 0;
  double sp[4];
  position_std(x_[3], sp, 1e-2);
  const double sv[4] = {kWeightVelocity * x_[3], kWeightVelocity * x_[3], 1e-5, kWeightVelocity * x_[3]};
  for (int k = 0; k < 4; ++k) {
    x_[k] += v_[k];
    // P = F P F^T + Q with F = [[1, 1], [0, 1]].
    const double pp = ppp_[k] + 2 * ppv_[k] + pvv_[k], pv = ppv_[k] + pvv_[k];
    ppp_[k] = pp + sp[k] * sp[k];
    ppv_[k] = pv;
    pvv_[k] += sv[k] * sv[k];
  }
}

void Kalman::update(const Box& z) {
  double sr[4];
  position_std(x_[3], sr, 1e-1);  // measurement noise (ByteTrack's project())
  const double at[4] = {z.cx, z.cy, z.aspect, z.h};
  for (int k = 0; k < 4; ++k) {
    const double s = ppp_[k] + sr[k] * sr[k];  // innovation variance
    const double kp = ppp_[k] / s, kv = ppv_[k] / s;  // gain
    const double innovation = at[k] - x_[k];
    x_[k] += kp * innovation;
    v_[k] += kv * innovation;
    // P = (I - K H) P
    const double pp = ppp_[k], pv = ppv_[k];
    ppp_[k] = pp - kp * pp;
    ppv_[k] = pv - kp * pv;
    pvv_[k] -= kv * pv;
  }
}

}  // namespace sluice::track
