// Resize of H and W (4-D NCHW): nearest (all ONNX nearest_modes) and bilinear, with the ONNX
// coordinate_transformation_modes half_pixel, pytorch_half_pixel, align_corners, asymmetric and
// tf_half_pixel_for_nearest.
#include <algorithm>
#include <cmath>

#include "nn/cpu/layer.hpp"

namespace sluice::nn::cpu {

namespace {

// Output position -> input coordinate along one axis, per coordinate_transformation_mode.
double input_coordinate(const std::string& mode, std::int64_t out_pos, std::int64_t in_len, std::int64_t out_len,
                        double scale) {
  const double x = static_cast<double>(out_pos);
  if (mode == "half_pixel") return (x + 0.5) / scale - 0.5;
  if (mode == "pytorch_half_pixel") return out_len > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
  if (mode == "align_corners")
    return out_len > 1 ? x * static_cast<double>(in_len - 1) / static_cast<double>(out_len - 1) : 0.0;
  if (mode == "asymmetric") return x / scale;
  return (x + 0.5) / scale;  // tf_half_pixel_for_nearest
}

std::int64_t nearest_index(const std::string& mode, double x, std::int64_t in_len) {
  double i;
  if (mode == "round_prefer_floor") {
    i = x == std::floor(x) + 0.5 ? std::floor(x) : std::round(x);
  } else if (mode == "round_prefer_ceil") {
    i = std::round(x);  // halves round away from zero, i.e. up for the non-negative halves that matter
    if (x < 0 && x == std::floor(x) + 0.5) i = std::ceil(x);
  } else if (mode == "floor") {
    i = std::floor(x);
  } else {  // ceil
    i = std::ceil(x);
  }
  return std::clamp<std::int64_t>(static_cast<std::int64_t>(i), 0, in_len - 1);
}

// Per output position along one axis: the two input positions and the weight of the second (nearest: one).
struct AxisTaps {
  std::vector<std::int64_t> low, high;
  std::vector<float> high_weight;
};

class ResizeLayer final : public Layer {
 public:
  ResizeLayer(bool linear, std::int64_t planes, std::int64_t in_h, std::int64_t in_w, AxisTaps rows, AxisTaps cols)
      : linear_(linear), planes_(planes), in_h_(in_h), in_w_(in_w), rows_(std::move(rows)), cols_(std::move(cols)) {}

  void run(const float* const* in, float* const* out, float*) const override {
    const std::size_t out_h = rows_.low.size(), out_w = cols_.low.size();
    float* y = out[0];
    for (std::int64_t p = 0; p < planes_; ++p) {
      const float* x = in[0] + p * in_h_ * in_w_;
      if (!linear_) {
        for (std::size_t oh = 0; oh < out_h; ++oh) {
          const float* row = x + rows_.low[oh] * in_w_;
          for (std::size_t ow = 0; ow < out_w; ++ow) *y++ = row[cols_.low[ow]];
        }
        continue;
      }
      for (std::size_t oh = 0; oh < out_h; ++oh) {
        const float* r0 = x + rows_.low[oh] * in_w_;
        const float* r1 = x + rows_.high[oh] * in_w_;
        const float wy = rows_.high_weight[oh];
        for (std::size_t ow = 0; ow < out_w; ++ow) {
          const std::int64_t c0 = cols_.low[ow], c1 = cols_.high[ow];
          const float wx = cols_.high_weight[ow];
          const float top = r0[c0] + (r0[c1] - r0[c0]) * wx;
          const float bottom = r1[c0] + (r1[c1] - r1[c0]) * wx;
          *y++ = top + (bottom - top) * wy;
        }
      }
    }
  }

 private:
  bool linear_;
  std::int64_t planes_, in_h_, in_w_;
  AxisTaps rows_, cols_;
};

AxisTaps plan_axis(bool linear, const std::string& transform, const std::string& nearest_mode, std::int64_t in_len,
                   std::int64_t out_len, double scale) {
  AxisTaps taps;
  for (std::int64_t o = 0; o < out_len; ++o) {
    const double x = input_coordinate(transform, o, in_len, out_len, scale);
    if (!linear) {
      const std::int64_t i = nearest_index(nearest_mode, x, in_len);
      taps.low.push_back(i);
      taps.high.push_back(i);
      taps.high_weight.push_back(0.0f);
      continue;
    }
    const double clamped = std::clamp(x, 0.0, static_cast<double>(in_len - 1));
    const auto low = static_cast<std::int64_t>(clamped);
    taps.low.push_back(low);
    taps.high.push_back(std::min(low + 1, in_len - 1));
    taps.high_weight.push_back(static_cast<float>(clamped - static_cast<double>(low)));
  }
  return taps;
}

}  // namespace

std::unique_ptr<Layer> make_resize(const LayerContext& ctx) {
  ctx.expect_inputs(1, 1);
  ctx.expect_outputs(1);
  const Shape& x = ctx.input_shape(0);
  if (x.size() != 4) ctx.fail("only 4-D NCHW input is supported, got " + to_string(x));
  const Shape sizes = ctx.required_ints("sizes");
  if (sizes.size() != 4 || sizes[0] != x[0] || sizes[1] != x[1] || sizes[2] < 1 || sizes[3] < 1)
    ctx.fail("sizes " + to_string(sizes) + " must keep N and C of " + to_string(x) + " and resize only H and W");
  if (x[2] < 1 || x[3] < 1) ctx.fail("cannot resize an empty image " + to_string(x));
  ctx.expect_output_shape(0, sizes);

  const std::string mode = ctx.attrs().s("mode", "nearest");
  if (mode != "nearest" && mode != "linear") ctx.fail("mode '" + mode + "' is not supported (nearest, linear)");
  const std::string transform = ctx.attrs().s("coordinate_transformation_mode", "half_pixel");
  if (transform != "half_pixel" && transform != "pytorch_half_pixel" && transform != "align_corners" &&
      transform != "asymmetric" && transform != "tf_half_pixel_for_nearest")
    ctx.fail("coordinate_transformation_mode '" + transform +
             "' is not supported (half_pixel, pytorch_half_pixel, align_corners, asymmetric, tf_half_pixel_for_nearest)");
  const std::string nearest_mode = ctx.attrs().s("nearest_mode", "round_prefer_floor");
  if (nearest_mode != "round_prefer_floor" && nearest_mode != "round_prefer_ceil" && nearest_mode != "floor" &&
      nearest_mode != "ceil")
    ctx.fail("nearest_mode '" + nearest_mode + "' is not supported (round_prefer_floor, round_prefer_ceil, floor, ceil)");

  // ONNX maps coordinates with the scale the model gave; when it gave sizes, the scale is their ratio. An
  // optional "scales" attribute (4 floats) keeps a model's own scales, which differ for non-integer ratios.
  const auto scales = ctx.attrs().floats("scales");
  if (!scales.empty() && scales.size() != 4) ctx.fail("scales needs 4 values");
  auto scale = [&](std::size_t d) {
    return scales.empty() ? static_cast<double>(sizes[d]) / static_cast<double>(x[d]) : static_cast<double>(scales[d]);
  };
  const bool linear = mode == "linear";
  return std::make_unique<ResizeLayer>(linear, x[0] * x[1], x[2], x[3],
                                       plan_axis(linear, transform, nearest_mode, x[2], sizes[2], scale(2)),
                                       plan_axis(linear, transform, nearest_mode, x[3], sizes[3], scale(3)));
}

}  // namespace sluice::nn::cpu
