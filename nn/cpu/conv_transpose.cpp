// ConvTranspose: Y = conv_transpose(X, W) + B, 2-D, any group, stride, dilation, pads and output_padding, on
// oneDNN's deconvolution (the data gradient of a convolution). X and Y may each be NCHW or NHWC.
// W is ONNX's [C_in, C_out/group, kH, kW]: oneDNN reads it as iohw (giohw with groups) and reorders it once, here.
#include <algorithm>
#include <array>
#include <cstring>
#include <unordered_map>

#include "nn/cpu/layer.hpp"
#include "nn/cpu/onednn.hpp"
#include "runtime/checked_math.hpp"

namespace sluice::nn::cpu {

namespace {

struct TransposeGeometry {
  std::int64_t batch, in_channels, in_h, in_w, out_channels, out_h, out_w;
  std::int64_t kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w, groups;
  std::int64_t pad_top, pad_left, pad_bottom, pad_right, output_padding_h, output_padding_w;
};

std::size_t aligned_floats(std::size_t bytes) {
  constexpr std::size_t kAlignFloats = 16;  // 64 bytes
  const std::size_t floats = (bytes + sizeof(float) - 1) / sizeof(float);
  return (floats + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
}

class ConvTransposeLayer final : public Layer {
 public:
  ConvTransposeLayer(const TransposeGeometry& g, const Tensor& weights, const Tensor* bias, Layout in_layout,
                     Layout out_layout) {
    using dims = dnnl::memory::dims;
    using tag = dnnl::memory::format_tag;
    const auto f32 = dnnl::memory::data_type::f32;
    const dnnl::engine& engine = onednn_engine();
    const dnnl::memory::desc src = image_desc({g.batch, g.in_channels, g.in_h, g.in_w}, in_layout);
    const dnnl::memory::desc user_weights =
        g.groups == 1 ? dnnl::memory::desc(dims{g.out_channels, g.in_channels, g.kernel_h, g.kernel_w}, f32, tag::iohw)
                      : dnnl::memory::desc(dims{g.groups, g.out_channels / g.groups, g.in_channels / g.groups,
                                                g.kernel_h, g.kernel_w},
                                           f32, tag::giohw);
    const dnnl::memory::desc any_weights(user_weights.dims(), f32, tag::any);
    const dnnl::memory::desc bias_desc = bias ? dnnl::memory::desc(dims{g.out_channels}, f32, tag::x)
                                              : dnnl::memory::desc();
    // oneDNN relates the sizes like a convolution from Y to X, with floor division: output_padding below the
    // stride falls inside the floor. Beyond it (possible when dilation > stride) it comes off the end pad, and
    // where that pad is too small (oneDNN takes no negative pads) oneDNN computes Y without those last rows or
    // columns, which no input reaches, into scratch: run() copies it and gives the rest the bias.
    auto end_pad = [](std::int64_t pad, std::int64_t output_padding, std::int64_t stride) {
      return output_padding < stride ? pad : pad - output_padding;
    };
    const std::int64_t pad_bottom = end_pad(g.pad_bottom, g.output_padding_h, g.stride_h);
    const std::int64_t pad_right = end_pad(g.pad_right, g.output_padding_w, g.stride_w);
    out_ = {g.batch, g.out_channels, g.out_h, g.out_w};
    computed_h_ = g.out_h + std::min<std::int64_t>(0, pad_bottom);
    computed_w_ = g.out_w + std::min<std::int64_t>(0, pad_right);
    out_strides_ = out_layout == Layout::nhwc
                       ? dims{g.out_h * g.out_w * g.out_channels, 1, g.out_w * g.out_channels, g.out_channels}
                       : dims{g.out_channels * g.out_h * g.out_w, g.out_h * g.out_w, g.out_w, 1};
    const dnnl::memory::desc dst = image_desc({g.batch, g.out_channels, computed_h_, computed_w_}, out_layout);
    if (cut()) {  // oneDNN writes the window densely into scratch; run() copies it into Y
      window_floats_ = aligned_floats(dst.get_size());
      window_strides_ = out_layout == Layout::nhwc
                            ? dims{computed_h_ * computed_w_ * g.out_channels, 1, computed_w_ * g.out_channels,
                                   g.out_channels}
                            : dims{g.out_channels * computed_h_ * computed_w_, computed_h_ * computed_w_, computed_w_, 1};
    }
    if (bias) bias_values_ = bias->f32;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::deconvolution_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct, src, any_weights, bias_desc, dst,
        dims{g.stride_h, g.stride_w}, dims{g.dilation_h - 1, g.dilation_w - 1}, dims{g.pad_top, g.pad_left},
        dims{std::max<std::int64_t>(0, pad_bottom), std::max<std::int64_t>(0, pad_right)});
    const dnnl::deconvolution_forward::primitive_desc pd(desc, attr, engine);
    deconv_ = dnnl::deconvolution_forward(pd);
    src_ = dnnl::memory(pd.src_desc(), engine, DNNL_MEMORY_NONE);
    dst_ = dnnl::memory(pd.dst_desc(), engine, DNNL_MEMORY_NONE);
    scratchpad_ = dnnl::memory(pd.scratchpad_desc(), engine, DNNL_MEMORY_NONE);
    scratchpad_floats_ = aligned_floats(pd.scratchpad_desc().get_size());

    dnnl::stream stream(engine);
    weights_ = dnnl::memory(pd.weights_desc(), engine);
    dnnl::memory given(user_weights, engine, const_cast<float*>(weights.f32.data()));
    dnnl::reorder(given, weights_).execute(stream, given, weights_);
    if (bias) {
      bias_ = dnnl::memory(bias_desc, engine);
      std::memcpy(bias_.get_data_handle(), bias->f32.data(), bias->f32.size() * sizeof(float));
    }
    stream.wait();
    args_ = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, weights_}, {DNNL_ARG_DST, dst_}, {DNNL_ARG_SCRATCHPAD, scratchpad_}};
    if (bias) args_.emplace(DNNL_ARG_BIAS, bias_);
  }

  std::size_t scratch_floats() const override { return window_floats_ + scratchpad_floats_; }

  void run(const float* const* in, float* const* out, float* scratch) const override {
    src_.set_data_handle(const_cast<float*>(in[0]));
    dst_.set_data_handle(cut() ? scratch : out[0]);
    scratchpad_.set_data_handle(scratch + window_floats_);
    deconv_.execute(stream_, args_);
    stream_.wait();
    if (cut()) copy_window(scratch, out[0]);
  }

 private:
  bool cut() const { return computed_h_ != out_[2] || computed_w_ != out_[3]; }

  // Y = the computed window, and the bias alone in the rows and columns past it (no input reaches them).
  void copy_window(const float* window, float* y) const {
    for (std::int64_t n = 0; n < out_[0]; ++n)
      for (std::int64_t c = 0; c < out_[1]; ++c) {
        const float bias = bias_values_.empty() ? 0.f : bias_values_[static_cast<std::size_t>(c)];
        float* plane = y + n * out_strides_[0] + c * out_strides_[1];
        const float* from = window + n * window_strides_[0] + c * window_strides_[1];
        for (std::int64_t h = 0; h < out_[2]; ++h)
          for (std::int64_t w = 0; w < out_[3]; ++w)
            plane[h * out_strides_[2] + w * out_strides_[3]] =
                h < computed_h_ && w < computed_w_ ? from[h * window_strides_[2] + w * window_strides_[3]] : bias;
      }
  }

  std::array<std::int64_t, 4> out_{};
  dnnl::memory::dims out_strides_, window_strides_;  // element strides per logical N, C, H, W
  std::int64_t computed_h_ = 0, computed_w_ = 0;
  std::size_t window_floats_ = 0;
  std::vector<float> bias_values_;
  mutable dnnl::stream stream_{onednn_engine()};
  dnnl::deconvolution_forward deconv_;
  mutable dnnl::memory src_, dst_, weights_, bias_, scratchpad_;
  std::unordered_map<int, dnnl::memory> args_;
  std::size_t scratchpad_floats_ = 0;
};

}  // namespace

std::unique_ptr<Layer> make_conv_transpose(const LayerContext& ctx) {
  ctx.expect_inputs(2, 3);
  ctx.expect_outputs(1);
  const Shape& x = ctx.input_shape(0);
  if (x.size() != 4) ctx.fail("only 2-D transposed convolutions (4-D NCHW input) are supported, input has shape " + to_string(x));
  if (ctx.graph().is_constant(ctx.node().inputs[0])) ctx.fail("input X must not be a constant (fold it)");
  const Tensor& w = ctx.constant_input(1, "weight W");
  if (w.shape.size() != 4) ctx.fail("weight W must be [C_in, C_out/group, kH, kW], has shape " + to_string(w.shape));
  const auto strides = ctx.required_ints("strides"), pads = ctx.required_ints("pads");
  const auto dilations = ctx.required_ints("dilations"), output_padding = ctx.required_ints("output_padding");
  if (strides.size() != 2 || pads.size() != 4 || dilations.size() != 2 || output_padding.size() != 2)
    ctx.fail("strides, dilations and output_padding need 2 values and pads 4");

  TransposeGeometry geo{};
  geo.batch = x[0];
  geo.in_channels = x[1];
  geo.in_h = x[2];
  geo.in_w = x[3];
  geo.groups = ctx.attrs().i("group", 1);
  if (geo.groups < 1 || w.shape[0] != geo.in_channels || geo.in_channels % geo.groups != 0)
    ctx.fail("weight W " + to_string(w.shape) + " does not fit input " + to_string(x) + " with group " +
             std::to_string(geo.groups));
  const auto out_channels = checked_mul(w.shape[1], geo.groups);
  if (!out_channels) ctx.fail("output channels overflow 64 bits");
  geo.out_channels = *out_channels;
  geo.kernel_h = w.shape[2];
  geo.kernel_w = w.shape[3];
  geo.stride_h = strides[0];
  geo.stride_w = strides[1];
  geo.dilation_h = dilations[0];
  geo.dilation_w = dilations[1];
  geo.pad_top = pads[0];
  geo.pad_left = pads[1];
  geo.pad_bottom = pads[2];
  geo.pad_right = pads[3];
  geo.output_padding_h = output_padding[0];
  geo.output_padding_w = output_padding[1];
  // The output's extents are the shape pass's (checked there); the layer only needs them to agree with it.
  const Shape& y = ctx.output_shape(0);
  if (y.size() != 4 || y[0] != geo.batch || y[1] != geo.out_channels) ctx.fail("output shape " + to_string(y) + " does not fit");
  geo.out_h = y[2];
  geo.out_w = y[3];
  auto extent = [](std::int64_t in, std::int64_t stride, std::int64_t kernel, std::int64_t dilation,
                   std::int64_t out_pad, std::int64_t pad_begin, std::int64_t pad_end) {
    return stride * (in - 1) + out_pad + (kernel - 1) * dilation + 1 - pad_begin - pad_end;
  };
  if (geo.out_h != extent(geo.in_h, geo.stride_h, geo.kernel_h, geo.dilation_h, geo.output_padding_h, geo.pad_top,
                          geo.pad_bottom) ||
      geo.out_w != extent(geo.in_w, geo.stride_w, geo.kernel_w, geo.dilation_w, geo.output_padding_w, geo.pad_left,
                          geo.pad_right))
    ctx.fail("output shape " + to_string(y) + " does not follow from the input, weights and attributes");

  const Tensor* bias = nullptr;
  if (ctx.has_input(2)) {
    bias = &ctx.constant_input(2, "bias B");
    if (bias->elements() != geo.out_channels)
      ctx.fail("bias B has shape " + to_string(bias->shape) + ", expected [" + std::to_string(geo.out_channels) + "]");
  }
  try {
    return std::make_unique<ConvTransposeLayer>(geo, w, bias, ctx.input_layout(0), ctx.output_layout(0));
  } catch (const dnnl::error& e) {
    ctx.fail(describe(e));
  }
}

}  // namespace sluice::nn::cpu
