#pragma once
// The constant-velocity Kalman filter of SORT/ByteTrack on (cx, cy, aspect = w/h, h), in pixels and frames.
// ByteTrack's filter has an 8x8 covariance, but its transition, measurement and noise matrices act on each of
// the four coordinates separately (position and velocity of that coordinate; diagonal noise), so a covariance
// that starts diagonal stays four independent 2x2 blocks: this is the same filter, computed per coordinate.
// Noise scales with the box height as in ByteTrack (position 1/20, velocity 1/160 of h; aspect fixed).
namespace sluice::track {

struct Box {
  double cx = 0, cy = 0, aspect = 0, h = 0;
};

class Kalman {
 public:
  // A new track at `z` (velocities 0, ByteTrack's initial uncertainty).
  explicit Kalman(const Box& z);
  // One frame ahead. `freeze_height`: a lost track keeps its height (ByteTrack zeroes vh when not tracked).
  void predict(bool freeze_height);
  // Corrects with a measured box.
  void update(const Box& z);
  Box mean() const { return {x_[0], x_[1], x_[2], x_[3]}; }
  double velocity(int k) const { return v_[k]; }

 private:
  double x_[4], v_[4];               // position and velocity per coordinate
  double ppp_[4], ppv_[4], pvv_[4];  // the 2x2 covariance blocks: var(x), cov(x, v), var(v)
};

}  // namespace sluice::track
