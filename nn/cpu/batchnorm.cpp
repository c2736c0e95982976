// BatchNormalization in inference mode, where no Conv precedes it to fold into: y = x * a[c] + b[c].
#include <cmath>

#include "nn/cpu/layer.hpp"

namespace sluice::nn::cpu {

namespace {

class BatchNormLayer final : public Layer {
 public:
  BatchNormLayer(std::int64_t batch, std::int64_t plane, std::vector<float> scale, std::vector<float> shift)
      : batch_(batch), plane_(plane), scale_(std::move(scale)), shift_(std::move(shift)) {}

  void run(const float* const* in, float* const* out, float*) const override {
    const float* x = in[0];
    float* y = out[0];
    for (std::int64_t n = 0; n < batch_; ++n) {
      for (std::size_t c = 0; c < scale_.size(); ++c) {
        const float a = scale_[c], b = shift_[c];
        for (std::int64_t i = 0; i < plane_; ++i) y[i] = x[i] * a + b;
        x += plane_;
        y += plane_;
      }
    }
  }

 private:
  std::int64_t batch_, plane_;
  std::vector<float> scale_, shift_;
};

}  // namespace

std::unique_ptr<Layer> make_batchnorm(const LayerContext& ctx) {
  ctx.expect_inputs(5, 5);
  if (ctx.node().outputs.size() != 1) ctx.fail("training mode (running mean/var outputs) is not supported");
  ctx.expect_outputs(1);
  if (ctx.attrs().i("training_mode", 0) != 0) ctx.fail("training_mode is not supported");
  const Shape& x = ctx.input_shape(0);
  if (x.size() < 2) ctx.fail("input needs a channel dimension, has shape " + to_string(x));
  ctx.expect_output_shape(0, x);
  const std::int64_t channels = x[1];
  const Tensor* params[4];
  const char* roles[4] = {"scale", "bias", "mean", "var"};
  for (std::size_t i = 0; i < 4; ++i) {
    params[i] = &ctx.constant_input(i + 1, roles[i]);
    if (params[i]->elements() != channels)
      ctx.fail(std::string(roles[i]) + " has " + std::to_string(params[i]->elements()) + " values for " +
               std::to_string(channels) + " channels");
  }
  const float epsilon = ctx.attrs().f("epsilon", 1e-5f);
  std::vector<float> scale(static_cast<std::size_t>(channels)), shift(scale.size());
  for (std::size_t c = 0; c < scale.size(); ++c) {
    scale[c] = params[0]->f32[c] / std::sqrt(params[3]->f32[c] + epsilon);
    shift[c] = params[1]->f32[c] - params[2]->f32[c] * scale[c];
  }
  const std::int64_t plane = element_count(Shape(x.begin() + 2, x.end()));
  return std::make_unique<BatchNormLayer>(x[0], plane, std::move(scale), std::move(shift));
}

}  // namespace sluice::nn::cpu
