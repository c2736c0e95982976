// Softmax and LogSoftmax along one axis, or (coerce_2d, opset < 13) over all dimensions from the axis on; the
// maximum is subtracted first, so large inputs do not overflow exp.
#include <algorithm>
#include <cmath>
#include <limits>

#include "nn/cpu/layer.hpp"
#include "nn/cpu/softmax_exp.hpp"
#include "nn/cpu/parallel.hpp"

namespace sluice::nn::cpu {

namespace {

// outer x length x inner: softmax over `length` elements at distance `inner`.
class SoftmaxLayer final : public Layer {
 public:
  SoftmaxLayer(std::int64_t outer, std::int64_t length, std::int64_t inner, bool log)
      : outer_(outer), length_(length), inner_(inner), log_(log) {}

  void run(const float* const* in, float* const* out, float*) const override {
    // Each of the outer * inner softmaxes on its own, spread over the cores.
    parallel_ranges(outer_ * inner_, std::max<std::int64_t>(1, 16384 / length_), [&](std::int64_t first, std::int64_t end) {
      for (std::int64_t which = first; which < end; ++which) {
        const std::int64_t o = which / inner_, i = which % inner_;
        const float* x = in[0] + o * length_ * inner_ + i;
        float* y = out[0] + o * length_ * inner_ + i;
        float max = -std::numeric_limits<float>::infinity();
        for (std::int64_t k = 0; k < length_; ++k) max = std::max(max, x[k * inner_]);
        float sum = 0.0f;
        if (inner_ == 1) {  // along the last axis: the vectorised row
          sum = exp_shifted_row(x, y, length_, max);
        } else {
          for (std::int64_t k = 0; k < length_; ++k) {
            const float shifted = x[k * inner_] - max;
            sum += (y[k * inner_] = shifted < kNegligibleSoftmaxExponent ? 0.0f : std::exp(shifted));
          }
        }
        if (log_) {  // x - max - log(sum), from x: the log of an exp that underflowed to 0 would be -inf
          const float log_sum = std::log(sum);
          for (std::int64_t k = 0; k < length_; ++k) y[k * inner_] = (x[k * inner_] - max) - log_sum;
          continue;
        }
        const float scale = 1.0f / sum;
        for (std::int64_t k = 0; k < length_; ++k) y[k * inner_] *= scale;
      }
    });
  }

 private:
  std::int64_t outer_, length_, inner_;
  bool log_;
};

}  // namespace

std::unique_ptr<Layer> make_softmax(const LayerContext& ctx) {
  ctx.expect_inputs(1, 1);
  ctx.expect_outputs(1);
  const Shape& x = ctx.input_shape(0);
  ctx.expect_output_shape(0, x);
  if (x.empty()) ctx.fail("needs an input with at least one dimension");
  const std::int64_t axis = ctx.attrs().i("axis", static_cast<std::int64_t>(x.size()) - 1);
  if (axis < 0 || axis >= static_cast<std::int64_t>(x.size()))
    ctx.fail("axis " + std::to_string(axis) + " is outside [0, " + std::to_string(x.size()) + ")");
  const auto split = x.begin() + axis;
  const std::int64_t outer = element_count(Shape(x.begin(), split));
  const bool log = ctx.node().op == Op::LogSoftmax;
  if (ctx.attrs().i("coerce_2d", 0) != 0)
    return std::make_unique<SoftmaxLayer>(outer, element_count(Shape(split, x.end())), 1, log);
  return std::make_unique<SoftmaxLayer>(outer, *split, element_count(Shape(split + 1, x.end())), log);
}

}  // namespace sluice::nn::cpu
