// LayerNormalization: each row (the dimensions from `axis` on, contiguous in NCHW) normalized to mean 0 and
// variance 1 (two passes, accumulated in double; rows spread over the cores), then scaled and shifted by the broadcast Scale and B.
#include <algorithm>
#include <cmath>

#include "nn/cpu/layer.hpp"
#include "nn/cpu/parallel.hpp"

namespace sluice::nn::cpu {
namespace {

class LayerNormLayer final : public Layer {
 public:
  LayerNormLayer(std::int64_t rows, std::vector<float> scale, std::vector<float> bias, float epsilon)
      : rows_(rows), scale_(std::move(scale)), bias_(std::move(bias)), epsilon_(epsilon) {}

  void run(const float* const* in, float* const* out, float*) const override {
    const auto len = static_cast<std::int64_t>(scale_.size());
    parallel_ranges(rows_, std::max<std::int64_t>(1, 16384 / len), [&](std::int64_t first, std::int64_t end) {
      for (std::int64_t r = first; r < end; ++r) normalize_row(in[0] + r * len, out[0] + r * len, len);
    });
  }

 private:
  void normalize_row(const float* x, float* y, std::int64_t len) const {
    const double mean = sum_in_lanes(len, [&](std::int64_t k) { return static_cast<double>(x[k]); }) / static_cast<double>(len);
    const double squares = sum_in_lanes(len, [&](std::int64_t k) { return (x[k] - mean) * (x[k] - mean); });
    const auto m = static_cast<float>(mean);
    const auto inv = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(len) + epsilon_));
    const float* scale = scale_.data();
    const float* bias = bias_.data();
    for (std::int64_t k = 0; k < len; ++k) y[k] = (x[k] - m) * inv * scale[k] + bias[k];
  }

  // The sum of term(k) for k < len in eight interleaved double accumulators, which the compiler turns into
  // vector adds (one running sum is a chain of dependent adds); the same order on every run.
  template <typename Term>
  static double sum_in_lanes(std::int64_t len, Term term) {
    constexpr std::int64_t kLanes = 8;
    double lanes[kLanes] = {};
    std::int64_t k = 0;
    for (; k + kLanes <= len; k += kLanes)
      for (std::int64_t j = 0; j < kLanes; ++j) lanes[j] += term(k + j);
    for (; k < len; ++k) lanes[0] += term(k);
    double sum = 0;
    for (double lane : lanes) sum += lane;
    return sum;
  }

  std::int64_t rows_;
  std::vector<float> scale_, bias_;  // one value per element of a row
  float epsilon_;
};

// A constant repeated to the normalized dimensions' shape, or `fill` when absent.
std::vector<float> broadcast_parameter(const LayerContext& ctx, std::size_t input, const char* role,
                                       const Shape& normalized, float fill) {
  if (!ctx.has_input(input)) return std::vector<float>(static_cast<std::size_t>(element_count(normalized)), fill);
  return broadcast_tensor(ctx.constant_input(input, role), normalized).f32;  // a ModelError when it does not fit
}

}  // namespace

std::unique_ptr<Layer> make_layer_normalization(const LayerContext& ctx) {
  ctx.expect_inputs(2, 3);
  ctx.expect_outputs(1);
  const Shape& x = ctx.input_shape(0);
  ctx.expect_output_shape(0, x);
  const std::int64_t axis = ctx.attrs().i("axis", -1);
  if (axis < 0 || axis >= static_cast<std::int64_t>(x.size())) ctx.fail("axis is not canonical (the graph is not prepared)");
  const Shape normalized(x.begin() + axis, x.end());
  const std::int64_t len = element_count(normalized);
  if (len == 0) ctx.fail("normalizes over no elements");
  return std::make_unique<LayerNormLayer>(element_count(x) / len, broadcast_parameter(ctx, 1, "scale", normalized, 1.f),
                                          broadcast_parameter(ctx, 2, "bias", normalized, 0.f),
                                          ctx.attrs().f("epsilon", 1e-5f));
}

}  // namespace sluice::nn::cpu
