// Conv: Y = activation(conv(X, W) + B + R), 2-D, NCHW, any group, stride, dilation and asymmetric padding.
// Three ways: a direct loop when each output channel reads one input channel (depthwise), one GEMM on the input
// itself for 1x1 stride-1 unpadded kernels, and im2col + GEMM (OpenBLAS) for everything else. In a batch whose
// output planes are small, the columns of several images sit side by side so that each GEMM is wide enough.
#include <cblas.h>

#include <algorithm>

#include "nn/cpu/activation.hpp"
#include "nn/cpu/layer.hpp"
#include "runtime/checked_math.hpp"

namespace sluice::nn::cpu {

namespace {

// The output positions o in [0, out) whose input position o * stride + offset lies in [0, size).
struct Range {
  std::int64_t begin, end;
};
Range valid_outputs(std::int64_t size, std::int64_t offset, std::int64_t stride, std::int64_t out) {
  auto ceil_div = [](std::int64_t a, std::int64_t b) { return a <= 0 ? -((-a) / b) : (a + b - 1) / b; };
  const std::int64_t begin = std::clamp<std::int64_t>(ceil_div(-offset, stride), 0, out);
  const std::int64_t end = std::clamp<std::int64_t>(ceil_div(size - offset, stride), begin, out);
  return {begin, end};
}

struct ConvGeometry {
  std::int64_t batch, in_channels, in_h, in_w;
  std::int64_t out_channels, out_h, out_w;
  std::int64_t kernel_h, kernel_w, stride_h, stride_w, pad_top, pad_left, dilation_h, dilation_w, groups;
  std::int64_t in_per_group() const { return in_channels / groups; }
  std::int64_t out_per_group() const { return out_channels / groups; }
};

class ConvLayer final : public Layer {
 public:
  ConvLayer(const ConvGeometry& geo, Activation act) : g_(geo), act_(act) {
    depthwise_ = g_.in_per_group() == 1;
    pointwise_ = g_.kernel_h == 1 && g_.kernel_w == 1 && g_.stride_h == 1 && g_.stride_w == 1 && g_.pad_top == 0 &&
                 g_.pad_left == 0 && g_.out_h == g_.in_h && g_.out_w == g_.in_w;
    // Small output planes make thin GEMMs that waste most of the BLAS kernel: put the columns of several
    // images side by side so that one GEMM has at least kWideColumns columns.
    const std::int64_t out_plane = g_.out_h * g_.out_w;
    images_per_gemm_ = depthwise_ ? 1 : std::clamp<std::int64_t>((kWideColumns + out_plane - 1) / out_plane, 1, g_.batch);
  }

  std::size_t scratch_floats() const override {
    if (depthwise_ || (pointwise_ && images_per_gemm_ == 1)) return 0;
    // make_conv checked that these products fit in 64 bits (images_per_gemm_ <= batch).
    const std::int64_t columns = images_per_gemm_ * g_.out_h * g_.out_w;
    const std::int64_t product = images_per_gemm_ > 1 ? g_.out_per_group() * columns : 0;
    const auto im2col = checked_product<std::int64_t>(Shape{g_.in_per_group(), g_.kernel_h, g_.kernel_w, columns});
    const auto total = im2col ? checked_add(*im2col, product) : std::nullopt;
    if (!total) throw ModelError("convolution scratch size overflows 64 bits");
    return static_cast<std::size_t>(*total);
  }

  void run(const float* const* in, float* const* out, float* scratch) const override {
    const float* x = in[0];
    const float* w = in[1];
    const float* bias = in[2];
    const float* residual = in[3];
    float* y = out[0];
    const std::int64_t in_image = g_.in_channels * g_.in_h * g_.in_w, out_image = g_.out_channels * g_.out_h * g_.out_w;
    for (std::int64_t n = 0; n < g_.batch; n += images_per_gemm_) {
      const std::int64_t images = std::min(images_per_gemm_, g_.batch - n);
      const float* rn = residual ? residual + n * out_image : nullptr;
      if (depthwise_) {
        depthwise(x + n * in_image, w, y + n * out_image);
        finish(y + n * out_image, bias, rn);
      } else if (images == 1) {
        convolve_one(x + n * in_image, w, y + n * out_image, scratch);
        finish(y + n * out_image, bias, rn);
      } else {
        convolve_side_by_side(x + n * in_image, w, images, y + n * out_image, bias, rn, scratch);
      }
    }
  }

 private:
  static constexpr std::int64_t kWideColumns = 1024;  // GEMM width from which OpenBLAS runs near its best

  std::int64_t k() const { return g_.in_per_group() * g_.kernel_h * g_.kernel_w; }

  void gemm(const float* w, const float* columns, std::int64_t width, float* product) const {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(g_.out_per_group()), static_cast<int>(width),
                static_cast<int>(k()), 1.0f, w, static_cast<int>(k()), columns, static_cast<int>(width), 0.0f, product,
                static_cast<int>(width));
  }

  // One image, group by group, the GEMM writing the output in place.
  void convolve_one(const float* x, const float* w, float* y, float* scratch) const {
    const std::int64_t in_plane = g_.in_h * g_.in_w, out_plane = g_.out_h * g_.out_w;
    for (std::int64_t group = 0; group < g_.groups; ++group) {
      const float* xg = x + group * g_.in_per_group() * in_plane;
      const float* columns = xg;
      if (!pointwise_) {
        im2col(xg, scratch, out_plane);
        columns = scratch;
      }
      gemm(w + group * g_.out_per_group() * k(), columns, out_plane, y + group * g_.out_per_group() * out_plane);
    }
  }

  // Several images in one GEMM per group: their columns side by side, the product [Mg, images * plane] then
  // spread back to NCHW by the epilogue.
  void convolve_side_by_side(const float* x, const float* w, std::int64_t images, float* y, const float* bias,
                             const float* residual, float* scratch) const {
    const std::int64_t in_plane = g_.in_h * g_.in_w, out_plane = g_.out_h * g_.out_w;
    const std::int64_t width = images * out_plane;
    float* columns = scratch;
    float* product = scratch + k() * width;
    for (std::int64_t group = 0; group < g_.groups; ++group) {
      for (std::int64_t i = 0; i < images; ++i)
        im2col(x + i * g_.in_channels * in_plane + group * g_.in_per_group() * in_plane, columns + i * out_plane, width);
      gemm(w + group * g_.out_per_group() * k(), columns, width, product);
      for (std::int64_t i = 0; i < images; ++i) {
        const std::int64_t first = i * g_.out_channels * out_plane + group * g_.out_per_group() * out_plane;
        for (std::int64_t m = 0; m < g_.out_per_group(); ++m) {
          const std::int64_t channel = group * g_.out_per_group() + m;
          apply_activation(act_, product + m * width + i * out_plane, bias ? bias[channel] : 0.0f,
                           residual ? residual + first + m * out_plane : nullptr, y + first + m * out_plane,
                           static_cast<std::size_t>(out_plane));
        }
      }
    }
  }

  // y = activation(y + bias + residual) for one image, in place.
  void finish(float* y, const float* bias, const float* residual) const {
    const std::int64_t out_plane = g_.out_h * g_.out_w;
    for (std::int64_t m = 0; m < g_.out_channels; ++m)
      apply_activation(act_, y + m * out_plane, bias ? bias[m] : 0.0f, residual ? residual + m * out_plane : nullptr,
                       y + m * out_plane, static_cast<std::size_t>(out_plane));
  }

  // Every output channel from its one input channel.
  void depthwise(const float* x, const float* w, float* y) const {
    const std::int64_t in_plane = g_.in_h * g_.in_w, out_plane = g_.out_h * g_.out_w;
    for (std::int64_t m = 0; m < g_.out_channels; ++m)
      depthwise_channel(x + (m / g_.out_per_group()) * in_plane, w + m * g_.kernel_h * g_.kernel_w, y + m * out_plane);
  }

  // columns[(c, kh, kw), (oh, ow)] = x[c, oh*sh - pt + kh*dh, ow*sw - pl + kw*dw], zero outside the image;
  // rows `row_stride` floats apart (wider than one image's plane when images sit side by side).
  void im2col(const float* x, float* columns, std::int64_t row_stride) const {
    float* row = columns;
    for (std::int64_t c = 0; c < g_.in_per_group(); ++c) {
      const float* plane = x + c * g_.in_h * g_.in_w;
      for (std::int64_t kh = 0; kh < g_.kernel_h; ++kh) {
        for (std::int64_t kw = 0; kw < g_.kernel_w; ++kw, row += row_stride) {
          const std::int64_t col_offset = kw * g_.dilation_w - g_.pad_left;
          const Range cols = valid_outputs(g_.in_w, col_offset, g_.stride_w, g_.out_w);
          for (std::int64_t oh = 0; oh < g_.out_h; ++oh) {
            float* dst = row + oh * g_.out_w;
            const std::int64_t ih = oh * g_.stride_h - g_.pad_top + kh * g_.dilation_h;
            if (ih < 0 || ih >= g_.in_h) {
              std::fill(dst, dst + g_.out_w, 0.0f);
              continue;
            }
            const float* src = plane + ih * g_.in_w + col_offset;
            std::fill(dst, dst + cols.begin, 0.0f);
            if (g_.stride_w == 1) {
              std::copy(src + cols.begin, src + cols.end, dst + cols.begin);
            } else {
              for (std::int64_t ow = cols.begin; ow < cols.end; ++ow) dst[ow] = src[ow * g_.stride_w];
            }
            std::fill(dst + cols.end, dst + g_.out_w, 0.0f);
          }
        }
      }
    }
  }

  // One output channel from its one input channel: y = sum over taps of w * shifted x (bias etc. come after).
  void depthwise_channel(const float* x, const float* w, float* y) const {
    std::fill(y, y + g_.out_h * g_.out_w, 0.0f);
    for (std::int64_t kw = 0; kw < g_.kernel_w; ++kw) {
      const std::int64_t col_offset = kw * g_.dilation_w - g_.pad_left;
      const Range cols = valid_outputs(g_.in_w, col_offset, g_.stride_w, g_.out_w);
      for (std::int64_t oh = 0; oh < g_.out_h; ++oh) {
        float* dst = y + oh * g_.out_w;
        for (std::int64_t kh = 0; kh < g_.kernel_h; ++kh) {
          const std::int64_t ih = oh * g_.stride_h - g_.pad_top + kh * g_.dilation_h;
          if (ih < 0 || ih >= g_.in_h) continue;
          const float tap = w[kh * g_.kernel_w + kw];
          const float* src = x + ih * g_.in_w + col_offset;
          if (g_.stride_w == 1) {
            for (std::int64_t ow = cols.begin; ow < cols.end; ++ow) dst[ow] += tap * src[ow];
          } else {
            const std::int64_t s = g_.stride_w;
            for (std::int64_t ow = cols.begin; ow < cols.end; ++ow) dst[ow] += tap * src[ow * s];
          }
        }
      }
    }
  }

  ConvGeometry g_;
  Activation act_;
  bool depthwise_ = false;
  bool pointwise_ = false;
  std::int64_t images_per_gemm_ = 1;
};

std::vector<std::int64_t> ints_or(const LayerContext& ctx, const std::string& name, std::vector<std::int64_t> fallback,
                                  std::size_t count) {
  auto v = ctx.attrs().ints(name, fallback);
  if (v.size() != count) ctx.fail("attribute '" + name + "' must have " + std::to_string(count) + " values");
  return v;
}

}  // namespace

std::unique_ptr<Layer> make_conv(const LayerContext& ctx) {
  ctx.expect_inputs(2, 4);
  ctx.expect_outputs(1);
  const Shape& x = ctx.input_shape(0);
  if (x.size() != 4) ctx.fail("only 2-D convolutions (4-D NCHW input) are supported, input has shape " + to_string(x));
  if (ctx.graph().is_constant(ctx.node().inputs[0])) ctx.fail("input X must not be a constant (fold it)");
  const Tensor& w = ctx.constant_input(1, "weight W");
  if (w.shape.size() != 4) ctx.fail("weight W must be OIHW, has shape " + to_string(w.shape));
  if (ctx.attrs().s("auto_pad", "NOTSET") != "NOTSET")
    ctx.fail("auto_pad must be resolved into pads by prepare(), got '" + ctx.attrs().s("auto_pad", "") + "'");

  ConvGeometry geo{};
  geo.batch = x[0];
  geo.in_channels = x[1];
  geo.in_h = x[2];
  geo.in_w = x[3];
  geo.out_channels = w.shape[0];
  geo.kernel_h = w.shape[2];
  geo.kernel_w = w.shape[3];
  geo.groups = ctx.attrs().i("group", 1);
  if (geo.groups < 1 || geo.in_channels % geo.groups != 0 || geo.out_channels % geo.groups != 0)
    ctx.fail("group " + std::to_string(geo.groups) + " does not divide " + std::to_string(geo.in_channels) +
             " input and " + std::to_string(geo.out_channels) + " output channels");
  if (w.shape[1] != geo.in_channels / geo.groups)
    ctx.fail("weight W has shape " + to_string(w.shape) + " but the input has " + std::to_string(geo.in_channels) +
             " channels in " + std::to_string(geo.groups) + " groups");
  if (ctx.attrs().has("kernel_shape") && ctx.attrs().ints("kernel_shape") != std::vector{geo.kernel_h, geo.kernel_w})
    ctx.fail("kernel_shape does not match the weight's shape " + to_string(w.shape));
  const auto strides = ints_or(ctx, "strides", {1, 1}, 2);
  const auto pads = ints_or(ctx, "pads", {0, 0, 0, 0}, 4);
  const auto dilations = ints_or(ctx, "dilations", {1, 1}, 2);
  if (strides[0] < 1 || strides[1] < 1 || dilations[0] < 1 || dilations[1] < 1)
    ctx.fail("strides and dilations must be positive");
  if (std::any_of(pads.begin(), pads.end(), [](std::int64_t p) { return p < 0; })) ctx.fail("pads must not be negative");
  geo.stride_h = strides[0];
  geo.stride_w = strides[1];
  geo.dilation_h = dilations[0];
  geo.dilation_w = dilations[1];
  geo.pad_top = pads[0];
  geo.pad_left = pads[1];
  // Extents come from the file: every step is checked, so a huge input or pad is an error, not a wrapped size.
  auto out_extent = [&](std::int64_t size, std::int64_t pad_begin, std::int64_t pad_end, std::int64_t dilation,
                        std::int64_t kernel, std::int64_t stride) -> std::int64_t {
    const auto padded_begin = checked_add(size, pad_begin);
    const auto padded = padded_begin ? checked_add(*padded_begin, pad_end) : std::nullopt;
    const auto dilated = checked_mul(dilation, kernel - 1);
    const auto window = dilated ? checked_add(*dilated, std::int64_t{1}) : std::nullopt;
    if (!padded || !window || kernel < 1)
      ctx.fail("input " + to_string(x) + " with pads and kernel " + to_string(w.shape) + " overflows 64-bit sizes");
    if (*padded < *window) return 0;
    return (*padded - *window) / stride + 1;
  };
  geo.out_h = out_extent(geo.in_h, pads[0], pads[2], geo.dilation_h, geo.kernel_h, geo.stride_h);
  geo.out_w = out_extent(geo.in_w, pads[1], pads[3], geo.dilation_w, geo.kernel_w, geo.stride_w);
  if (geo.out_h < 1 || geo.out_w < 1) ctx.fail("the kernel is larger than the padded input " + to_string(x));
  if (!checked_product<std::int64_t>(Shape{geo.batch, geo.out_channels, geo.out_h, geo.out_w}) ||
      !checked_product<std::int64_t>(Shape{geo.in_channels, geo.kernel_h, geo.kernel_w, geo.batch, geo.out_h, geo.out_w}))
    ctx.fail("input " + to_string(x) + " and weights " + to_string(w.shape) + " need more elements than fit in 64 bits");
  const Shape y{geo.batch, geo.out_channels, geo.out_h, geo.out_w};
  ctx.expect_output_shape(0, y);

  if (ctx.has_input(2)) {
    const Tensor& b = ctx.constant_input(2, "bias B");
    if (b.elements() != geo.out_channels)
      ctx.fail("bias B has shape " + to_string(b.shape) + ", expected [" + std::to_string(geo.out_channels) + "]");
  }
  if (ctx.has_input(3) && ctx.input_shape(3) != y)
    ctx.fail("residual R has shape " + to_string(ctx.input_shape(3)) + ", expected the output's " + to_string(y));
  return std::make_unique<ConvLayer>(geo, fused_activation(ctx));
}

}  // namespace sluice::nn::cpu
