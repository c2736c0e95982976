// ConvTranspose on cuDNN: a transposed convolution is the data gradient of a convolution, so
// cudnnConvolutionBackwardData computes it with ConvTranspose's input as "dy", its weights [C_in, C_out/group, kH,
// kW] as the forward filter [K, C/group, R, S] (re-laid KRSC for NHWC) and its output as "dx"; then the bias.
//
// cuDNN knows symmetric pads only, and sizes related by a convolution's floor division. Per spatial dimension the
// full transposed output F spans stride * (in - 1) + (kernel - 1) * dilation + 1 pixels (zeros beyond), and Y is
// F[pad_begin, pad_begin + out). With symmetric pad p cuDNN writes F[p, p + held), for any `held` in
// [F - 2p, F - 2p + stride - 1]. When p = pad_begin and held = out fit, cuDNN writes Y directly; otherwise it
// writes F[p, p + held) into scratch and the pad kernel crops Y out of it (zeros past its end).
#include <algorithm>
#include <limits>
#include <sstream>

#include "nn/cuda/check.hpp"
#include "nn/cuda/cudnn_handles.hpp"
#include "nn/cuda/layer.hpp"

namespace sluice::nn::cuda {
namespace {

const char* algo_name(cudnnConvolutionBwdDataAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0: return "ALGO_0";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1: return "ALGO_1";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING: return "FFT_TILING";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    default: return "?";
  }
}

// What cuDNN computes along one spatial dimension: pad p, `held` pixels from F[p], and where Y starts in them.
struct HeldSpan {
  int pad = 0, held = 0, crop = 0;
};

HeldSpan held_span(std::int64_t in, std::int64_t kernel, std::int64_t stride, std::int64_t dilation,
                   std::int64_t pad_begin, std::int64_t pad_end, std::int64_t output_padding, std::int64_t out) {
  const std::int64_t full = stride * (in - 1) + (kernel - 1) * dilation + 1;
  // The largest symmetric pad p <= pad_begin whose longest span still reaches Y's end:
  // pad_begin - p + out <= full - 2p + stride - 1, i.e. p <= stride - 1 + pad_end - output_padding. (PyTorch's
  // stride 2, pad 1, output_padding 1 gives p = 1 = pad_begin: cuDNN writes Y directly.)
  const std::int64_t p = std::min(pad_begin, std::max<std::int64_t>(0, stride - 1 + pad_end - output_padding));
  const std::int64_t held = std::clamp(pad_begin - p + out, full - 2 * p, full - 2 * p + stride - 1);
  return {static_cast<int>(p), static_cast<int>(held), static_cast<int>(pad_begin - p)};
}

class ConvTransposeLayer : public Layer {
 public:
  ConvTransposeLayer(const Node& node, BuildContext& ctx, std::size_t workspace_limit)
      : Layer(node), type_(ctx.values.type()), cudnn_(ctx.cudnn), workspace_limit_(workspace_limit) {
    const Graph& g = ctx.graph;
    auto fail = [&](const std::string& what) { throw ModelError(g.source + ": " + node.where() + ": " + what); };
    if (node.inputs.size() < 2 || node.outputs.size() != 1) fail("expects X, W[, B] and one output");
    if (g.is_constant(node.inputs[0])) fail("X must not be a constant");
    if (!g.is_constant(node.inputs[1])) fail("W must be a constant");
    const Shape& xs = g.shape_of(node.inputs[0]);
    const Shape& ws = g.shape_of(node.inputs[1]);
    const Shape& ys = g.shape_of(node.outputs[0]);
    if (xs.size() != 4 || ws.size() != 4 || ys.size() != 4) fail("only 2-D transposed convolutions are supported");
    const auto strides = node.attrs.ints("strides", {1, 1}), dil = node.attrs.ints("dilations", {1, 1});
    const auto pads = node.attrs.ints("pads", {0, 0, 0, 0}), out_pad = node.attrs.ints("output_padding", {0, 0});
    if (strides.size() != 2 || dil.size() != 2 || pads.size() != 4 || out_pad.size() != 2)
      fail("strides, dilations and output_padding need 2 values and pads 4");
    const int groups = static_cast<int>(node.attrs.i("group", 1));
    x_ = ctx.values.id(node.inputs[0]);
    y_ = ctx.values.id(node.outputs[0]);
    n_ = static_cast<int>(xs[0]);
    in_c_ = static_cast<int>(xs[1]);
    in_h_ = static_cast<int>(xs[2]);
    in_w_ = static_cast<int>(xs[3]);
    out_c_ = static_cast<int>(ys[1]);
    out_h_ = static_cast<int>(ys[2]);
    out_w_ = static_cast<int>(ys[3]);
    const int r = static_cast<int>(ws[2]), s = static_cast<int>(ws[3]);
    if (groups < 1 || ws[0] != in_c_ || in_c_ % groups != 0 || ws[1] * groups != out_c_)
      fail("W " + nn::to_string(ws) + " does not fit X " + nn::to_string(xs) + " and Y " + nn::to_string(ys) +
           " with group " + std::to_string(groups));
    rows_ = held_span(in_h_, r, strides[0], dil[0], pads[0], pads[2], out_pad[0], out_h_);
    cols_ = held_span(in_w_, s, strides[1], dil[1], pads[1], pads[3], out_pad[1], out_w_);
    direct_ = rows_.crop == 0 && rows_.held == out_h_ && cols_.crop == 0 && cols_.held == out_w_;

    // Weights [C_in, C_out/group, kH, kW] -> KRSC: [C_in, kH, kW, C_out/group].
    const Tensor& wt = g.constants.at(node.inputs[1]);
    const int cg = out_c_ / groups;
    std::vector<float> krsc(wt.f32.size());
    for (int k = 0; k < in_c_; ++k)
      for (int c = 0; c < cg; ++c)
        for (int i = 0; i < r * s; ++i)
          krsc[(static_cast<std::size_t>(k) * r * s + i) * cg + c] = wt.f32[(static_cast<std::size_t>(k) * cg + c) * r * s + i];
    weight_ = ctx.upload(krsc);
    if (node.inputs.size() > 2 && !node.inputs[2].empty()) {
      const std::vector<float>& bias = g.constants.at(node.inputs[2]).f32;
      if (bias.size() != static_cast<std::size_t>(out_c_))
        fail("B has " + std::to_string(bias.size()) + " values for " + std::to_string(out_c_) + " output channels");
      bias_ = ctx.upload(bias);
    }

    const cudnnDataType_t dt = cudnn_type(type_);
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(filter_.get(), dt, CUDNN_TENSOR_NHWC, in_c_, cg, r, s));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_.get(), rows_.pad, cols_.pad, static_cast<int>(strides[0]),
                                                static_cast<int>(strides[1]), static_cast<int>(dil[0]),
                                                static_cast<int>(dil[1]), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv_.get(), groups));
    // f32 must match the CPU: no TF32 (FMA only). f16/bf16: tensor cores.
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.get(), type_ == DType::f32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));

    // The algorithm: cuDNN's first suggestion that runs within the workspace limit at the full batch, tried on
    // scratch buffers (a suggestion can still refuse the shape when called).
    PerCount& full = per_count_[n_];
    describe_tensors(full, n_);
    CUDNN_CHECK(cudnnSetStream(cudnn_, ctx.stream));
    choose_algorithm(full, workspace_limit_, ctx.stream);
    algo_ = full.algo;
    workspace_ = full.workspace;
  }

  void prepare(int count, cudnnHandle_t cudnn) override {
    cudnn_ = cudnn;
    if (per_count_.count(count)) return;
    PerCount& pc = per_count_[count];
    describe_tensors(pc, count);
    pc.algo = algo_;
    if (cudnnGetConvolutionBackwardDataWorkspaceSize(cudnn_, filter_.get(), pc.dy.get(), conv_.get(), pc.dx.get(),
                                                     algo_, &pc.workspace) == CUDNN_STATUS_SUCCESS &&
        pc.workspace <= workspace_)
      return;
    choose_algorithm(pc, workspace_, nullptr);  // the engine's workspace is sized by the full batch
  }

  void run(const RunContext& ctx) override {
    const PerCount& pc = per_count_.at(ctx.count);
    void* y = ctx.at(y_);
    void* dx = direct_ ? y : ctx.scratch;
    const float one = 1.f, zero = 0.f;
    const cudnnStatus_t st = cudnnConvolutionBackwardData(ctx.cudnn, &one, filter_.get(), weight_, pc.dy.get(), ctx.at(x_),
                                                          conv_.get(), pc.algo, ctx.workspace, ctx.workspace_bytes,
                                                          &zero, pc.dx.get(), dx);
    if (st != CUDNN_STATUS_SUCCESS)
      throw GpuError("node '" + name() + "' (ConvTranspose): cuDNN refused the transposed convolution: " +
                     cudnnGetErrorString(st));
    if (!direct_) {  // Y = the window of F that cuDNN held, zeros past its end
      const std::int64_t out_shape[4] = {ctx.count, out_h_, out_w_, out_c_};
      const std::int64_t in_shape[4] = {ctx.count, rows_.held, cols_.held, out_c_};
      const std::int64_t in_stride[4] = {static_cast<std::int64_t>(rows_.held) * cols_.held * out_c_,
                                         static_cast<std::int64_t>(cols_.held) * out_c_, out_c_, 1};
      const std::int64_t begin[4] = {0, -rows_.crop, -cols_.crop, 0};
      pad(type_, y, 4, out_shape, dx, in_shape, in_stride, begin, PadMode::constant, 0.f, ctx.stream);
    }
    if (bias_)
      bias_residual_activation(type_, y, bias_, nullptr, static_cast<std::int64_t>(ctx.count) * out_h_ * out_w_ * out_c_,
                               out_c_, ActivationParams{}, ctx.stream);
  }

  std::string kernel() const override {
    std::ostringstream k;
    k << "cudnn conv backward data " << algo_name(algo_);
    if (!direct_) k << " -> crop (asymmetric pads or output_padding)";
    if (bias_) k << " -> epilogue bias";
    return k.str();
  }
  std::size_t workspace_bytes() const override { return workspace_; }
  std::size_t scratch_bytes() const override {
    if (direct_) return 0;
    return static_cast<std::size_t>(n_) * rows_.held * cols_.held * out_c_ * dtype_bytes(type_);
  }

 private:
  struct PerCount {
    TensorDesc dy, dx;
    cudnnConvolutionBwdDataAlgo_t algo{};
    std::size_t workspace = 0;
  };

  void describe_tensors(PerCount& pc, int count) const {
    const cudnnDataType_t dt = cudnn_type(type_);
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(pc.dy.get(), CUDNN_TENSOR_NHWC, dt, count, in_c_, in_h_, in_w_));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(pc.dx.get(), CUDNN_TENSOR_NHWC, dt, count, out_c_, rows_.held, cols_.held));
  }

  // `trial_stream` non-null: each candidate is also run once on scratch buffers (construction only).
  void choose_algorithm(PerCount& pc, std::size_t limit, cudaStream_t trial_stream) const {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int returned = 0;
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnn_, filter_.get(), pc.dy.get(), conv_.get(), pc.dx.get(),
                                                            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, perf));
    Memory dy, dx;
    if (trial_stream) {
      dy = Memory(MemoryKind::device, static_cast<std::size_t>(n_) * in_c_ * in_h_ * in_w_ * dtype_bytes(type_));
      dx = Memory(MemoryKind::device,
                  static_cast<std::size_t>(n_) * out_c_ * rows_.held * cols_.held * dtype_bytes(type_));
      CUDA_CHECK(cudaMemsetAsync(dy.data(), 0, dy.bytes(), trial_stream));
    }
    for (int i = 0; i < returned; ++i) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
      std::size_t bytes = 0;
      if (cudnnGetConvolutionBackwardDataWorkspaceSize(cudnn_, filter_.get(), pc.dy.get(), conv_.get(), pc.dx.get(),
                                                       perf[i].algo, &bytes) != CUDNN_STATUS_SUCCESS ||
          bytes > limit)
        continue;
      if (trial_stream) {
        const Memory workspace(MemoryKind::device, std::max<std::size_t>(bytes, 256));
        const float one = 1.f, zero = 0.f;
        const cudnnStatus_t st = cudnnConvolutionBackwardData(cudnn_, &one, filter_.get(), weight_, pc.dy.get(), dy.data(),
                                                              conv_.get(), perf[i].algo, workspace.data(), bytes, &zero,
                                                              pc.dx.get(), dx.data());
        CUDA_CHECK(cudaStreamSynchronize(trial_stream));  // before `workspace` is freed
        if (st != CUDNN_STATUS_SUCCESS) continue;
      }
      pc.algo = perf[i].algo;
      pc.workspace = bytes;
      return;
    }
    throw GpuError("node '" + name() + "' (ConvTranspose): no cuDNN algorithm runs it within " +
                   std::to_string(limit) + " bytes of workspace");
  }

  DType type_;
  cudnnHandle_t cudnn_;
  std::size_t workspace_limit_;
  int x_ = -1, y_ = -1;
  int n_ = 0, in_c_ = 0, in_h_ = 0, in_w_ = 0, out_c_ = 0, out_h_ = 0, out_w_ = 0;
  HeldSpan rows_, cols_;
  bool direct_ = true;
  void* weight_ = nullptr;
  void* bias_ = nullptr;  // engine type, null without B
  FilterDesc filter_;
  ConvDesc conv_;
  cudnnConvolutionBwdDataAlgo_t algo_{};
  std::size_t workspace_ = 0;
  std::map<int, PerCount> per_count_;
};

}  // namespace

std::unique_ptr<Layer> make_conv_transpose(const Node& node, BuildContext& ctx, std::size_t workspace_limit) {
  return std::make_unique<ConvTransposeLayer>(node, ctx, workspace_limit);
}

}  // namespace sluice::nn::cuda
