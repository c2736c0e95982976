// LayerNormalization: each row (the dimensions from `axis` on, contiguous in NCHW) normalized to mean 0 and
// variance 1 (two passes, accumulated in double), then scaled and shifted by the broadcast Scale and B.
#include <cmath>

#include "nn/cpu/layer.hpp"

namespace sluice::nn::cpu {
namespace {

class LayerNormLayer final : public Layer {
 public:
  LayerNormLayer(std::int64_t rows, std::vector<float> scale, std::vector<float> bias, float epsilon)
      : rows_(rows), scale_(std::move(scale)), bias_(std::move(bias)), epsilon_(epsilon) {}

  void run(const float* const* in, float* const* out, float*) const override {
    const auto len = static_cast<std::int64_t>(scale_.size());
    for (std::int64_t r = 0; r < rows_; ++r) {
      const float* x = in[0] + r * len;
      float* y = out[0] + r * len;
      double sum = 0;
      for (std::int64_t k = 0; k < len; ++k) sum += x[k];
      const double mean = sum / static_cast<double>(len);
      double squares = 0;
      for (std::int64_t k = 0; k < len; ++k) squares += (x[k] - mean) * (x[k] - mean);
      const auto m = static_cast<float>(mean);
      const auto inv = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(len) + epsilon_));
      for (std::int64_t k = 0; k < len; ++k) y[k] = (x[k] - m) * inv * scale_[static_cast<std::size_t>(k)] + bias_[static_cast<std::size_t>(k)];
    }
  }

 private:
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
