// Conv: Y = activation(conv(X, W) + B + R), 2-D, any group, stride, dilation and asymmetric padding, on
// oneDNN's convolution (its direct, 1x1, depthwise or GEMM-based kernels, whichever it picks for the shape and
// this CPU), with the residual and the activation as post-ops and all cores at work. X and Y may each be NCHW
// or NHWC (nn/cpu/layout.hpp); weights are reordered once, here, into the format the chosen kernel reads.
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "nn/cpu/activation.hpp"
#include "nn/cpu/layer.hpp"
#include "nn/cpu/onednn.hpp"
#include "runtime/checked_math.hpp"

namespace sluice::nn::cpu {

namespace {

struct ConvGeometry {
  std::int64_t batch, in_channels, in_h, in_w;
  std::int64_t out_channels, out_h, out_w;
  std::int64_t kernel_h, kernel_w, stride_h, stride_w, pad_top, pad_left, pad_bottom, pad_right, dilation_h,
      dilation_w, groups;
  Shape x() const { return {batch, in_channels, in_h, in_w}; }
  Shape y() const { return {batch, out_channels, out_h, out_w}; }
};

constexpr std::size_t kAlignFloats = 16;  // 64 bytes
std::size_t aligned_floats(std::size_t bytes) {
  const std::size_t floats = (bytes + sizeof(float) - 1) / sizeof(float);
  return (floats + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
}

class ConvLayer final : public Layer {
 public:
  ConvLayer(const ConvGeometry& g, const Tensor& weights, const Tensor* bias, bool residual, const Activation& act,
            Layout in_layout, Layout out_layout)
      : residual_(residual) {
    using dims = dnnl::memory::dims;
    using tag = dnnl::memory::format_tag;
    const auto f32 = dnnl::memory::data_type::f32;
    const dnnl::engine& engine = onednn_engine();
    const dnnl::memory::desc user_src = image_desc(g.x(), in_layout), dst = image_desc(g.y(), out_layout);
    const dnnl::memory::desc user_weights =
        g.groups == 1 ? dnnl::memory::desc(dims{g.out_channels, g.in_channels, g.kernel_h, g.kernel_w}, f32, tag::oihw)
                      : dnnl::memory::desc(dims{g.groups, g.out_channels / g.groups, g.in_channels / g.groups,
                                                g.kernel_h, g.kernel_w},
                                           f32, tag::goihw);
    const dnnl::memory::desc any_weights(user_weights.dims(), f32, tag::any);
    const dnnl::memory::desc bias_desc = bias ? dnnl::memory::desc(dims{g.out_channels}, f32, tag::x)
                                              : dnnl::memory::desc();

    dnnl::post_ops ops;
    // Y = act(conv + B + R): R read as a second source, so it is not copied into Y first.
    if (residual) ops.append_binary(dnnl::algorithm::binary_add, dst);
    append_activation(ops, act);
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);

    auto describe_for = [&](const dnnl::memory::desc& src) {
      const dnnl::convolution_forward::desc desc(
          dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src, any_weights, bias_desc, dst,
          dims{g.stride_h, g.stride_w}, dims{g.dilation_h - 1, g.dilation_w - 1}, dims{g.pad_top, g.pad_left},
          dims{g.pad_bottom, g.pad_right});
      return dnnl::convolution_forward::primitive_desc(desc, attr, engine);
    };
    auto pd = describe_for(user_src);
    // oneDNN has fast kernels for NCHW in and NHWC out only in some cases; otherwise X is reordered first.
    if (in_layout != out_layout && std::string(pd.impl_info_str()).rfind("ref", 0) == 0) {
      pd = describe_for(image_desc(g.x(), out_layout));
      src_reorder_ = dnnl::reorder(dnnl::memory(user_src, engine, DNNL_MEMORY_NONE),
                                   dnnl::memory(pd.src_desc(), engine, DNNL_MEMORY_NONE));
      user_src_ = dnnl::memory(user_src, engine, DNNL_MEMORY_NONE);
      reordered_src_floats_ = aligned_floats(pd.src_desc().get_size());
    }
    conv_ = dnnl::convolution_forward(pd);
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
    if (residual) {
      residual_memory_ = dnnl::memory(dst, engine, DNNL_MEMORY_NONE);
      args_.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, residual_memory_);
    }
  }

  std::size_t scratch_floats() const override { return reordered_src_floats_ + scratchpad_floats_; }

  void run(const float* const* in, float* const* out, float* scratch) const override {
    if (residual_) residual_memory_.set_data_handle(const_cast<float*>(in[3]));
    if (reordered_src_floats_ > 0) {
      user_src_.set_data_handle(const_cast<float*>(in[0]));
      src_.set_data_handle(scratch);
      src_reorder_.execute(stream_, user_src_, src_);
    } else {
      src_.set_data_handle(const_cast<float*>(in[0]));
    }
    dst_.set_data_handle(out[0]);
    scratchpad_.set_data_handle(scratch + reordered_src_floats_);
    conv_.execute(stream_, args_);
    stream_.wait();
  }

 private:
  bool residual_;
  // Memory objects are handles: run() points them at this call's buffers (one run at a time per engine), so
  // args_ is built once.
  mutable dnnl::stream stream_{onednn_engine()};
  dnnl::convolution_forward conv_;
  mutable dnnl::memory src_, dst_, weights_, bias_, scratchpad_, residual_memory_;
  std::unordered_map<int, dnnl::memory> args_;
  dnnl::reorder src_reorder_;
  mutable dnnl::memory user_src_;
  std::size_t reordered_src_floats_ = 0, scratchpad_floats_ = 0;
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
  geo.pad_bottom = pads[2];
  geo.pad_right = pads[3];
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

  const Tensor* bias = nullptr;
  if (ctx.has_input(2)) {
    bias = &ctx.constant_input(2, "bias B");
    if (bias->elements() != geo.out_channels)
      ctx.fail("bias B has shape " + to_string(bias->shape) + ", expected [" + std::to_string(geo.out_channels) + "]");
  }
  if (ctx.has_input(3) && ctx.input_shape(3) != y)
    ctx.fail("residual R has shape " + to_string(ctx.input_shape(3)) + ", expected the output's " + to_string(y));
  if (ctx.has_input(3) && ctx.input_layout(3) != ctx.output_layout(0))
    ctx.fail("residual R and the output are in different layouts (the layout plan ties them)");
  try {
    return std::make_unique<ConvLayer>(geo, w, bias, ctx.has_input(3), fused_activation(ctx), ctx.input_layout(0),
                                       ctx.output_layout(0));
  } catch (const dnnl::error& e) {
    ctx.fail(describe(e));
  }
}

}  // namespace sluice::nn::cpu
