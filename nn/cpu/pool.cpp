// MaxPool, AveragePool (2-D, NCHW; ceil_mode, count_include_pad, MaxPool dilations) and GlobalAveragePool.
#include <algorithm>
#include <limits>

#include "nn/cpu/layer.hpp"
#include "runtime/checked_math.hpp"

namespace sluice::nn::cpu {

namespace {

// One axis of a pooling window, per output position: the taps that land inside the input, and the divisor
// an average pool uses there.
struct AxisWindows {
  std::vector<std::int64_t> first_input;      // input position of tap 0 (may be negative)
  std::vector<std::int64_t> tap_begin, tap_end;  // valid taps [begin, end)
  std::vector<std::int64_t> padded_extent;    // taps inside input + padding (count_include_pad divisor factor)
};

AxisWindows plan_axis(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride,
                      std::int64_t dilation, std::int64_t pad_begin, std::int64_t pad_end) {
  AxisWindows a;
  for (std::int64_t o = 0; o < out; ++o) {
    const std::int64_t start = o * stride - pad_begin;
    // Taps t in [begin, end) with 0 <= start + t * dilation < in, in closed form (kernels may be huge).
    const std::int64_t begin = start >= 0 ? 0 : std::min(kernel, (-start + dilation - 1) / dilation);
    const std::int64_t last_inside = in - 1 - start;  // the largest t * dilation that stays inside
    const std::int64_t end = last_inside < 0 ? begin : std::clamp(last_inside / dilation + 1, begin, kernel);
    // Like PyTorch: the divisor counts the padding but not what ceil_mode adds beyond it.
    const std::int64_t padded_end = std::min(start + (kernel - 1) * dilation + 1, in + pad_end);
    a.first_input.push_back(start);
    a.tap_begin.push_back(begin);
    a.tap_end.push_back(end);
    a.padded_extent.push_back(std::max<std::int64_t>(padded_end - start, 0));
  }
  return a;
}

enum class PoolKind { max, average };

template <PoolKind Kind>
class PoolLayer final : public Layer {
 public:
  PoolLayer(std::int64_t planes, std::int64_t in_h, std::int64_t in_w, AxisWindows rows, AxisWindows cols,
            std::int64_t dilation_h, std::int64_t dilation_w, bool count_include_pad)
      : planes_(planes), in_h_(in_h), in_w_(in_w), rows_(std::move(rows)), cols_(std::move(cols)),
        dilation_h_(dilation_h), dilation_w_(dilation_w), count_include_pad_(count_include_pad) {}

  void run(const float* const* in, float* const* out, float*) const override {
    const std::size_t out_h = rows_.first_input.size(), out_w = cols_.first_input.size();
    for (std::int64_t p = 0; p < planes_; ++p) {
      const float* x = in[0] + p * in_h_ * in_w_;
      float* y = out[0] + p * static_cast<std::int64_t>(out_h * out_w);
      for (std::size_t oh = 0; oh < out_h; ++oh) {
        for (std::size_t ow = 0; ow < out_w; ++ow) {
          float acc = Kind == PoolKind::max ? -std::numeric_limits<float>::infinity() : 0.0f;
          for (std::int64_t kh = rows_.tap_begin[oh]; kh < rows_.tap_end[oh]; ++kh) {
            const float* row = x + (rows_.first_input[oh] + kh * dilation_h_) * in_w_ + cols_.first_input[ow];
            for (std::int64_t kw = cols_.tap_begin[ow]; kw < cols_.tap_end[ow]; ++kw) {
              if constexpr (Kind == PoolKind::max) {
                acc = std::max(acc, row[kw * dilation_w_]);
              } else {
                acc += row[kw];
              }
            }
          }
          if constexpr (Kind == PoolKind::average) {
            const std::int64_t divisor =
                count_include_pad_ ? rows_.padded_extent[oh] * cols_.padded_extent[ow]
                                   : (rows_.tap_end[oh] - rows_.tap_begin[oh]) * (cols_.tap_end[ow] - cols_.tap_begin[ow]);
            acc = divisor > 0 ? acc / static_cast<float>(divisor) : 0.0f;
          }
          *y++ = acc;
        }
      }
    }
  }

 private:
  std::int64_t planes_, in_h_, in_w_;
  AxisWindows rows_, cols_;
  std::int64_t dilation_h_, dilation_w_;
  bool count_include_pad_;
};

class GlobalAveragePoolLayer final : public Layer {
 public:
  GlobalAveragePoolLayer(std::int64_t planes, std::int64_t plane_size) : planes_(planes), plane_size_(plane_size) {}
  void run(const float* const* in, float* const* out, float*) const override {
    for (std::int64_t p = 0; p < planes_; ++p) {
      const float* x = in[0] + p * plane_size_;
      float sum = 0.0f;
      for (std::int64_t i = 0; i < plane_size_; ++i) sum += x[i];
      out[0][p] = sum / static_cast<float>(plane_size_);
    }
  }

 private:
  std::int64_t planes_, plane_size_;
};

// Output length of one axis: floor mode, and ceil mode with PyTorch's rule that the last window must start
// inside the input or its leading padding.
std::int64_t pooled_length(std::int64_t in, std::int64_t kernel, std::int64_t stride, std::int64_t dilation,
                           std::int64_t pad_begin, std::int64_t pad_end, bool ceil_mode, bool drop_outside) {
  // Attribute values come from the file: overflowing arithmetic counts as "no output" (refused by the caller).
  const auto padded = checked_add(in, pad_begin);
  const auto padded_both = padded ? checked_add(*padded, pad_end) : std::nullopt;
  const auto dilated = checked_mul(dilation, kernel - 1);
  if (!padded_both || !dilated) return 0;
  const std::int64_t span = *padded_both - *dilated - 1;
  if (span < 0) return 0;
  std::int64_t out = (ceil_mode ? span / stride + (span % stride != 0) : span / stride) + 1;
  const auto last_start = checked_mul(out - 1, stride);
  if (ceil_mode && drop_outside && (!last_start || *last_start >= *padded)) --out;
  return out;
}

}  // namespace

std::unique_ptr<Layer> make_pool(const LayerContext& ctx) {
  ctx.expect_inputs(1, 1);
  ctx.expect_outputs(1);
  const bool is_max = ctx.node().op == "MaxPool";
  const Shape& x = ctx.input_shape(0);
  if (x.size() != 4) ctx.fail("only 2-D pooling (4-D NCHW input) is supported, input has shape " + to_string(x));
  if (ctx.attrs().s("auto_pad", "NOTSET") != "NOTSET")
    ctx.fail("auto_pad must be resolved into pads by prepare(), got '" + ctx.attrs().s("auto_pad", "") + "'");
  const auto kernel = ctx.required_ints("kernel_shape");
  const auto strides = ctx.attrs().ints("strides", {1, 1});
  const auto pads = ctx.attrs().ints("pads", {0, 0, 0, 0});
  const auto dilations = ctx.attrs().ints("dilations", {1, 1});
  if (kernel.size() != 2 || strides.size() != 2 || pads.size() != 4 || dilations.size() != 2)
    ctx.fail("kernel_shape, strides and dilations need 2 values and pads 4");
  if (kernel[0] < 1 || kernel[1] < 1 || strides[0] < 1 || strides[1] < 1 || dilations[0] < 1 || dilations[1] < 1)
    ctx.fail("kernel_shape, strides and dilations must be positive");
  if (std::any_of(pads.begin(), pads.end(), [](std::int64_t p) { return p < 0; })) ctx.fail("pads must not be negative");
  if (!is_max && (dilations[0] != 1 || dilations[1] != 1)) ctx.fail("dilated AveragePool is not supported");
  const bool ceil_mode = ctx.attrs().i("ceil_mode", 0) != 0;
  const bool count_include_pad = ctx.attrs().i("count_include_pad", 0) != 0;

  // In ceil mode, accept both the ONNX formula and PyTorch's (they differ only when the last window would
  // start in the trailing padding); the windows below are right for either.
  const Shape& given = ctx.output_shape(0);
  Shape computed{x[0], x[1], pooled_length(x[2], kernel[0], strides[0], dilations[0], pads[0], pads[2], ceil_mode, true),
                 pooled_length(x[3], kernel[1], strides[1], dilations[1], pads[1], pads[3], ceil_mode, true)};
  if (ceil_mode && given != computed) {
    computed[2] = pooled_length(x[2], kernel[0], strides[0], dilations[0], pads[0], pads[2], true, false);
    computed[3] = pooled_length(x[3], kernel[1], strides[1], dilations[1], pads[1], pads[3], true, false);
  }
  ctx.expect_output_shape(0, computed);
  if (computed[2] < 1 || computed[3] < 1) ctx.fail("the window is larger than the padded input " + to_string(x));

  AxisWindows rows = plan_axis(x[2], computed[2], kernel[0], strides[0], dilations[0], pads[0], pads[2]);
  AxisWindows cols = plan_axis(x[3], computed[3], kernel[1], strides[1], dilations[1], pads[1], pads[3]);
  if (is_max)
    return std::make_unique<PoolLayer<PoolKind::max>>(x[0] * x[1], x[2], x[3], std::move(rows), std::move(cols),
                                                      dilations[0], dilations[1], false);
  return std::make_unique<PoolLayer<PoolKind::average>>(x[0] * x[1], x[2], x[3], std::move(rows), std::move(cols), 1, 1,
                                                        count_include_pad);
}

std::unique_ptr<Layer> make_global_average_pool(const LayerContext& ctx) {
  ctx.expect_inputs(1, 1);
  ctx.expect_outputs(1);
  const Shape& x = ctx.input_shape(0);
  if (x.size() < 3) ctx.fail("needs an input with spatial dimensions, got " + to_string(x));
  Shape y(x.size(), 1);
  y[0] = x[0];
  y[1] = x[1];
  ctx.expect_output_shape(0, y);
  const Shape spatial(x.begin() + 2, x.end());
  return std::make_unique<GlobalAveragePoolLayer>(x[0] * x[1], element_count(spatial));
}

}  // namespace sluice::nn::cpu
