// MaxPool, AveragePool (2-D, NCHW or NHWC; ceil_mode, count_include_pad, MaxPool dilations) and GlobalAveragePool.
#include <algorithm>
#include <limits>

#include "nn/cpu/layer.hpp"
#include "nn/cpu/parallel.hpp"
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

// NCHW: window by window over each plane. NHWC: window by window over each image, every tap a contiguous row
// of channels (vectorised across channels). Planes (NCHW) or output rows (NHWC) are spread over the cores
// (ResNet-50's MaxPool on one core was 8% of its batch on 16).
template <PoolKind Kind>
class PoolLayer final : public Layer {
 public:
  PoolLayer(const Shape& x, AxisWindows rows, AxisWindows cols, std::int64_t dilation_h, std::int64_t dilation_w,
            bool count_include_pad, bool channels_last)
      : images_(x[0]), channels_(x[1]), in_h_(x[2]), in_w_(x[3]), rows_(std::move(rows)), cols_(std::move(cols)),
        dilation_h_(dilation_h), dilation_w_(dilation_w), count_include_pad_(count_include_pad),
        channels_last_(channels_last) {}

  void run(const float* const* in, float* const* out, float*) const override {
    if (channels_last_) run_channels_last(in[0], out[0]);
    else run_planes(in[0], out[0]);
  }

 private:
  static constexpr float kStart = Kind == PoolKind::max ? -std::numeric_limits<float>::infinity() : 0.0f;
  static constexpr std::int64_t kGrain = 16384;  // output elements a thread should get at least

  // The average pool's divisor at output (oh, ow).
  std::int64_t divisor(std::size_t oh, std::size_t ow) const {
    return count_include_pad_ ? rows_.padded_extent[oh] * cols_.padded_extent[ow]
                              : (rows_.tap_end[oh] - rows_.tap_begin[oh]) * (cols_.tap_end[ow] - cols_.tap_begin[ow]);
  }

  void run_planes(const float* input, float* output) const {
    const std::size_t out_h = rows_.first_input.size(), out_w = cols_.first_input.size();
    const auto plane_size = static_cast<std::int64_t>(out_h * out_w);
    parallel_ranges(images_ * channels_, kGrain / std::max<std::int64_t>(1, plane_size),
                    [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t p = begin; p < end; ++p) {
        const float* x = input + p * in_h_ * in_w_;
        float* y = output + p * plane_size;
        for (std::size_t oh = 0; oh < out_h; ++oh) {
          for (std::size_t ow = 0; ow < out_w; ++ow) {
            float acc = kStart;
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
              const std::int64_t d = divisor(oh, ow);
              acc = d > 0 ? acc / static_cast<float>(d) : 0.0f;
            }
            *y++ = acc;
          }
        }
      }
    });
  }

  void run_channels_last(const float* input, float* output) const {
    const std::size_t out_h = rows_.first_input.size(), out_w = cols_.first_input.size();
    const std::int64_t c_count = channels_, row_size = static_cast<std::int64_t>(out_w) * c_count;
    parallel_ranges(images_ * static_cast<std::int64_t>(out_h), kGrain / std::max<std::int64_t>(1, row_size),
                    [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) {
        const std::int64_t n = r / static_cast<std::int64_t>(out_h);
        const auto oh = static_cast<std::size_t>(r % static_cast<std::int64_t>(out_h));
        const float* image = input + n * in_h_ * in_w_ * c_count;
        float* y = output + r * row_size;
        for (std::size_t ow = 0; ow < out_w; ++ow, y += c_count) {
          std::fill(y, y + c_count, kStart);
          for (std::int64_t kh = rows_.tap_begin[oh]; kh < rows_.tap_end[oh]; ++kh) {
            const std::int64_t ih = rows_.first_input[oh] + kh * dilation_h_;
            for (std::int64_t kw = cols_.tap_begin[ow]; kw < cols_.tap_end[ow]; ++kw) {
              const float* px = image + (ih * in_w_ + cols_.first_input[ow] + kw * dilation_w_) * c_count;
              for (std::int64_t c = 0; c < c_count; ++c) {
                if constexpr (Kind == PoolKind::max) {
                  y[c] = std::max(y[c], px[c]);
                } else {
                  y[c] += px[c];
                }
              }
            }
          }
          if constexpr (Kind == PoolKind::average) {
            const std::int64_t d = divisor(oh, ow);
            const float scale = d > 0 ? 1.0f / static_cast<float>(d) : 0.0f;
            for (std::int64_t c = 0; c < c_count; ++c) y[c] = d > 0 ? y[c] * scale : 0.0f;
          }
        }
      }
    });
  }

  std::int64_t images_, channels_, in_h_, in_w_;
  AxisWindows rows_, cols_;
  std::int64_t dilation_h_, dilation_w_;
  bool count_include_pad_, channels_last_;
};

// Mean of each (image, channel) plane; an NHWC input is summed pixel by pixel into a row of channel sums. Planes
// (NCHW) or images (NHWC) are spread over the cores.
class GlobalAveragePoolLayer final : public Layer {
 public:
  GlobalAveragePoolLayer(std::int64_t images, std::int64_t channels, std::int64_t plane_size, bool channels_last)
      : images_(images), channels_(channels), plane_size_(plane_size), channels_last_(channels_last) {}
  void run(const float* const* in, float* const* out, float*) const override {
    const float scale = 1.0f / static_cast<float>(plane_size_);
    constexpr std::int64_t kGrain = 16384;  // input elements a thread should get at least
    if (!channels_last_) {
      parallel_ranges(images_ * channels_, kGrain / std::max<std::int64_t>(1, plane_size_),
                      [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t p = begin; p < end; ++p) {
          const float* x = in[0] + p * plane_size_;
          float sum = 0.0f;
          for (std::int64_t i = 0; i < plane_size_; ++i) sum += x[i];
          out[0][p] = sum * scale;
        }
      });
      return;
    }
    parallel_ranges(images_, kGrain / std::max<std::int64_t>(1, plane_size_ * channels_),
                    [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t n = begin; n < end; ++n) {
        float* y = out[0] + n * channels_;
        std::fill(y, y + channels_, 0.0f);
        const float* x = in[0] + n * plane_size_ * channels_;
        for (std::int64_t i = 0; i < plane_size_; ++i, x += channels_)
          for (std::int64_t c = 0; c < channels_; ++c) y[c] += x[c];
        for (std::int64_t c = 0; c < channels_; ++c) y[c] *= scale;
      }
    });
  }

 private:
  std::int64_t images_, channels_, plane_size_;
  bool channels_last_;
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
  const bool is_max = ctx.node().op == Op::MaxPool;
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
  if (ctx.input_layout(0) != ctx.output_layout(0)) ctx.fail("input and output layouts differ (internal error)");
  const bool channels_last = ctx.input_layout(0) == Layout::nhwc;
  if (is_max)
    return std::make_unique<PoolLayer<PoolKind::max>>(x, std::move(rows), std::move(cols), dilations[0], dilations[1],
                                                      false, channels_last);
  return std::make_unique<PoolLayer<PoolKind::average>>(x, std::move(rows), std::move(cols), 1, 1, count_include_pad,
                                                        channels_last);
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
  if (ctx.output_layout(0) != Layout::nchw) ctx.fail("output is channels last (internal error)");
  return std::make_unique<GlobalAveragePoolLayer>(x[0], x[1], element_count(spatial),
                                                  ctx.input_layout(0) == Layout::nhwc);
}

}  // namespace sluice::nn::cpu
