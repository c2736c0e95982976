#include "nn/cuda/conv_layer.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "nn/cuda/check.hpp"
#include "nn/cuda/gemm.hpp"
#include "nn/cuda/stream_stopwatch.hpp"

namespace sluice::nn::cuda {
namespace {

const char* algo_name(cudnnConvolutionFwdAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    default: return "?";
  }
}

// Median-free best-of-n: the fastest of a few runs is the least disturbed one.
constexpr int kTrialRuns = 3;

}  // namespace

ActivationParams fused_activation(const Node& node) {
  if (const auto act = fused_activation_params(node.attrs)) return *act;  // the op table's defaults
  throw ModelError(node.where() + ": fused activation '" + node.attrs.s("activation", "") +
                   "' is not one of Relu, LeakyRelu, Clip, Sigmoid, HardSigmoid, HardSwish, Tanh");
}

ConvLayer::ConvLayer(const Node& node, BuildContext& ctx) : Layer(node), type_(ctx.values.type()), cudnn_(ctx.cudnn) {
  const Graph& g = ctx.graph;
  if (node.inputs.size() < 2 || node.outputs.size() != 1) throw ModelError(g.source + ": " + node.where() + ": expects X, W[, B[, R]] and one output");
  if (g.is_constant(node.inputs[0])) throw ModelError(g.source + ": " + node.where() + ": X must not be a constant");
  const Shape& xs = g.shape_of(node.inputs[0]);
  const Shape& ws = g.shape_of(node.inputs[1]);
  const Shape& ys = g.shape_of(node.outputs[0]);
  if (xs.size() != 4 || ws.size() != 4 || ys.size() != 4)
    throw ModelError(g.source + ": " + node.where() + ": only 2-D convolutions (4-D NCHW tensors) are supported");
  if (!g.is_constant(node.inputs[1])) throw ModelError(g.source + ": " + node.where() + ": W must be a constant");
  x_ = ctx.values.id(node.inputs[0]);
  y_ = ctx.values.id(node.outputs[0]);
  if (node.inputs.size() > 3 && !node.inputs[3].empty()) residual_ = ctx.values.id(node.inputs[3]);
  n_ = static_cast<int>(xs[0]);
  c_ = static_cast<int>(xs[1]);
  h_ = static_cast<int>(xs[2]);
  w_ = static_cast<int>(xs[3]);
  k_ = static_cast<int>(ws[0]);
  r_ = static_cast<int>(ws[2]);
  s_ = static_cast<int>(ws[3]);
  out_h_ = static_cast<int>(ys[2]);
  out_w_ = static_cast<int>(ys[3]);
  groups_ = static_cast<int>(node.attrs.i("group", 1));
  const auto strides = node.attrs.ints("strides", {1, 1});
  const auto dil = node.attrs.ints("dilations", {1, 1});
  const auto pads = node.attrs.ints("pads", {0, 0, 0, 0});
  if (strides.size() != 2 || dil.size() != 2 || pads.size() != 4)
    throw ModelError(g.source + ": " + node.where() + ": strides/dilations need 2 values and pads 4");
  if (groups_ < 1 || c_ % groups_ != 0 || ws[1] * groups_ != c_)
    throw ModelError(g.source + ": " + node.where() + ": W " + nn::to_string(ws) + " does not match X " + nn::to_string(xs) +
                     " with group " + std::to_string(groups_));
  stride_h_ = static_cast<int>(strides[0]);
  stride_w_ = static_cast<int>(strides[1]);
  dil_h_ = static_cast<int>(dil[0]);
  dil_w_ = static_cast<int>(dil[1]);
  pad_h_ = static_cast<int>(std::min(pads[0], pads[2]));
  pad_w_ = static_cast<int>(std::min(pads[1], pads[3]));
  extra_top_ = static_cast<int>(pads[0]) - pad_h_;
  extra_bottom_ = static_cast<int>(pads[2]) - pad_h_;
  extra_left_ = static_cast<int>(pads[1]) - pad_w_;
  extra_right_ = static_cast<int>(pads[3]) - pad_w_;
  act_ = fused_activation(node);
  pointwise_ = r_ == 1 && s_ == 1 && stride_h_ == 1 && stride_w_ == 1 && groups_ == 1 && pads[0] == 0 && pads[1] == 0 &&
               pads[2] == 0 && pads[3] == 0;
  depthwise_ = groups_ == c_ && k_ == c_;
  pad_begin_ = {static_cast<int>(pads[0]), static_cast<int>(pads[1])};

  // Weights OIHW -> KRSC (the filter layout of NHWC convolutions).
  const Tensor& wt = g.constants.at(node.inputs[1]);
  const int cg = c_ / groups_;
  std::vector<float> krsc(wt.f32.size());
  for (int k = 0; k < k_; ++k)
    for (int c = 0; c < cg; ++c)
      for (int r = 0; r < r_; ++r)
        for (int s = 0; s < s_; ++s)
          krsc[((static_cast<std::size_t>(k) * r_ + r) * s_ + s) * cg + c] =
              wt.f32[((static_cast<std::size_t>(k) * cg + c) * r_ + r) * s_ + s];
  weight_ = ctx.upload(krsc);
  if (depthwise_) {  // [C, 1, R, S] -> f32 [R, S, C]: a thread's channels are adjacent in every tap
    std::vector<float> rsc(wt.f32.size());
    for (int c = 0; c < c_; ++c)
      for (int rs = 0; rs < r_ * s_; ++rs)
        rsc[static_cast<std::size_t>(rs) * c_ + c] = wt.f32[static_cast<std::size_t>(c) * r_ * s_ + rs];
    depthwise_weight_ = ctx.upload(rsc, /*as_f32=*/true);
  }
  std::vector<float> bias(static_cast<std::size_t>(k_), 0.f);
  if (node.inputs.size() > 2 && !node.inputs[2].empty()) {
    has_bias_ = true;
    bias = g.constants.at(node.inputs[2]).f32;
    if (bias.size() != static_cast<std::size_t>(k_))
      throw ModelError(g.source + ": " + node.where() + ": B has " + std::to_string(bias.size()) + " values for " +
                       std::to_string(k_) + " output channels");
  }
  bias_ = ctx.upload(bias);
  if (depthwise_ && has_bias_) depthwise_bias_ = ctx.upload(bias, /*as_f32=*/true);

  const cudnnDataType_t dt = cudnn_type(type_);
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(filter_.get(), dt, CUDNN_TENSOR_NHWC, k_, cg, r_, s_));
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_.get(), pad_h_, pad_w_, stride_h_, stride_w_, dil_h_, dil_w_,
                                              CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv_.get(), groups_));
  // f32 must match the CPU: no TF32 (FMA only). f16/bf16: tensor cores.
  CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.get(), type_ == DType::f32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(bias_desc_.get(), CUDNN_TENSOR_NHWC, dt, 1, k_, 1, 1));
  CUDNN_CHECK(cudnnSetActivationDescriptor(act_desc_.get(),
                                           act_.kind == ActivationKind::relu ? CUDNN_ACTIVATION_RELU
                                                                         : CUDNN_ACTIVATION_IDENTITY,
                                           CUDNN_NOT_PROPAGATE_NAN, 0.0));
  PerCount probe;
  describe_tensors(probe, n_);
  int on = 0, oc = 0, oh = 0, ow = 0;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv_.get(), probe.x.get(), filter_.get(), &on, &oc, &oh, &ow));
  if (oc != k_ || oh != out_h_ || ow != out_w_)
    throw ModelError(g.source + ": " + node.where() + ": output " + nn::to_string(ys) + " does not follow from X " +
                     nn::to_string(xs) + ", W " + nn::to_string(ws) + ", strides, pads and dilations");
}

void ConvLayer::describe_tensors(PerCount& pc, int count) const {
  const cudnnDataType_t dt = cudnn_type(type_);
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(pc.x.get(), CUDNN_TENSOR_NHWC, dt, count, c_,
                                         h_ + extra_top_ + extra_bottom_, w_ + extra_left_ + extra_right_));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(pc.y.get(), CUDNN_TENSOR_NHWC, dt, count, k_, out_h_, out_w_));
}

std::size_t ConvLayer::scratch_bytes() const {
  if (!extra_top_ && !extra_bottom_ && !extra_left_ && !extra_right_) return 0;
  return static_cast<std::size_t>(n_) * c_ * (h_ + extra_top_ + extra_bottom_) * (w_ + extra_left_ + extra_right_) *
         dtype_bytes(type_);
}

std::size_t ConvLayer::workspace_for(const PerCount& pc, cudnnConvolutionFwdAlgo_t algo) const {
  std::size_t bytes = 0;
  if (cudnnGetConvolutionForwardWorkspaceSize(cudnn_, pc.x.get(), filter_.get(), conv_.get(), pc.y.get(), algo,
                                              &bytes) != CUDNN_STATUS_SUCCESS)
    return std::numeric_limits<std::size_t>::max();
  return bytes;
}

cudnnStatus_t ConvLayer::launch(const PerCount& pc, const RunContext& ctx) const {
  if (pc.mode == ConvMode::depthwise) {  // pads, bias, residual and activation all inside the kernel
    DepthwiseConv2dParams p;
    p.n = ctx.count;
    p.h = h_;
    p.w = w_;
    p.c = c_;
    p.out_h = out_h_;
    p.out_w = out_w_;
    p.kernel_h = r_;
    p.kernel_w = s_;
    p.stride_h = stride_h_;
    p.stride_w = stride_w_;
    p.dilation_h = dil_h_;
    p.dilation_w = dil_w_;
    p.pad_top = pad_begin_[0];
    p.pad_left = pad_begin_[1];
    p.keep_rows = pc.depthwise_rows;
    depthwise_conv2d(type_, p, ctx.at(y_), ctx.at(x_), static_cast<const float*>(depthwise_weight_),
                     static_cast<const float*>(depthwise_bias_), residual_ >= 0 ? ctx.at(residual_) : nullptr, act_,
                     ctx.stream);
    return CUDNN_STATUS_SUCCESS;
  }
  const void* x = ctx.at(x_);
  if (scratch_bytes()) {  // the asymmetric part of the padding, explicitly
    const std::int64_t hp = h_ + extra_top_ + extra_bottom_, wp = w_ + extra_left_ + extra_right_;
    const std::int64_t out_shape[4] = {ctx.count, hp, wp, c_};
    const std::int64_t in_shape[4] = {ctx.count, h_, w_, c_};
    const std::int64_t in_stride[4] = {static_cast<std::int64_t>(h_) * w_ * c_, static_cast<std::int64_t>(w_) * c_, c_, 1};
    const std::int64_t begin[4] = {0, extra_top_, extra_left_, 0};
    pad(type_, ctx.scratch, 4, out_shape, x, in_shape, in_stride, begin, PadMode::constant, 0.f, ctx.stream);
    x = ctx.scratch;
  }
  void* y = ctx.at(y_);
  const void* residual = residual_ >= 0 ? ctx.at(residual_) : nullptr;
  const float one = 1.f, zero = 0.f;
  const std::int64_t elements = static_cast<std::int64_t>(ctx.count) * out_h_ * out_w_ * k_;
  if (pc.mode == ConvMode::gemm) {  // Y[pixels, K] = X[pixels, C] W[K, C]^T
    row_major_gemm(ctx.cublas, type_, false, true, static_cast<std::int64_t>(ctx.count) * h_ * w_, k_, c_, 1.f, x, 0,
                   weight_, 0, 0.f, y, 1);
    if (has_bias_ || residual || act_.kind != ActivationKind::none)
      bias_residual_activation(type_, y, has_bias_ ? bias_ : nullptr, residual, elements, k_, act_, ctx.stream);
    return CUDNN_STATUS_SUCCESS;
  }
  if (pc.mode == ConvMode::fused) {
    const float alpha2 = residual ? 1.f : 0.f;
    return cudnnConvolutionBiasActivationForward(ctx.cudnn, &one, pc.x.get(), x, filter_.get(), weight_, conv_.get(),
                                                 pc.algo, ctx.workspace, ctx.workspace_bytes, &alpha2, pc.y.get(),
                                                 residual ? residual : y, bias_desc_.get(), bias_, act_desc_.get(),
                                                 pc.y.get(), y);
  }
  const cudnnStatus_t st = cudnnConvolutionForward(ctx.cudnn, &one, pc.x.get(), x, filter_.get(), weight_, conv_.get(),
                                                   pc.algo, ctx.workspace, ctx.workspace_bytes, &zero, pc.y.get(), y);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  if (has_bias_ || residual || act_.kind != ActivationKind::none)
    bias_residual_activation(type_, y, has_bias_ ? bias_ : nullptr, residual, elements, k_, act_, ctx.stream);
  return CUDNN_STATUS_SUCCESS;
}

std::string ConvLayer::cache_key(const std::string& device_name) const {
  std::ostringstream k;
  k << device_name << "|cudnn " << cudnnGetVersion() << "|" << to_string(type_) << "|x " << n_ << "," << c_ << ","
    << h_ << "," << w_ << "|w " << k_ << "," << r_ << "," << s_ << "|g " << groups_ << "|stride " << stride_h_ << ","
    << stride_w_ << "|pad " << pad_h_ << "," << pad_w_ << "+" << extra_top_ << "," << extra_left_ << ","
    << extra_bottom_ << "," << extra_right_ << "|dil " << dil_h_ << "," << dil_w_ << "|epilogue "
    << (has_bias_ ? "b" : "") << (residual_ >= 0 ? "r" : "") << static_cast<int>(act_.kind);
  // Entries measured before the depthwise kernel existed never tried it: a new key measures it.
  if (depthwise_) k << "|own depthwise";
  return k.str();
}

void ConvLayer::select_algorithm(ConvSelection& sel) {
  PerCount full;
  describe_tensors(full, n_);
  RunContext trial;
  trial.stream = sel.stream;
  trial.count = n_;
  trial.ptr = sel.ptr;
  trial.cudnn = sel.cudnn;
  trial.cublas = sel.cublas;
  trial.workspace = sel.workspace;
  trial.workspace_bytes = sel.workspace_limit;
  trial.scratch = sel.scratch;
  CUDNN_CHECK(cudnnSetStream(sel.cudnn, sel.stream));
  CUBLAS_CHECK(cublasSetStream(sel.cublas, sel.stream));
  const bool fusable = sel.allow_fused && (act_.kind == ActivationKind::none || act_.kind == ActivationKind::relu);
  const bool gemm_ok = sel.allow_gemm && pointwise_;
  const bool depthwise_ok = sel.allow_depthwise && depthwise_;
  const std::string key = cache_key(sel.device_name);

  if (auto cached = sel.cache.find(key)) {
    const auto algo = static_cast<cudnnConvolutionFwdAlgo_t>(cached->algo);
    const bool own_kernel = cached->mode == ConvMode::gemm || cached->mode == ConvMode::depthwise;
    const std::size_t bytes = own_kernel ? 0 : workspace_for(full, algo);
    const bool legal = cached->mode == ConvMode::gemm        ? gemm_ok
                       : cached->mode == ConvMode::depthwise ? depthwise_ok
                       : cached->mode == ConvMode::separate  ? sel.allow_separate
                                                             : fusable;
    if (bytes <= sel.workspace_limit && legal) {
      mode_ = cached->mode;
      algo_ = algo;
      depthwise_rows_ = mode_ == ConvMode::depthwise && cached->algo == 1;
      workspace_ = bytes;
      from_cache_ = true;
      return;
    }
  }

  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int returned = 0;
  CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(sel.cudnn, full.x.get(), filter_.get(), conv_.get(), full.y.get(),
                                                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
  StreamStopwatch stopwatch;
  double best = std::numeric_limits<double>::infinity();
  // Times one candidate (best of a few runs); infinity when it does not run.
  auto trial_ms = [&](PerCount& pc) {
    if (launch(pc, trial) != CUDNN_STATUS_SUCCESS) return std::numeric_limits<double>::infinity();
    double fastest = std::numeric_limits<double>::infinity();
    for (int run = 0; run < kTrialRuns; ++run) {
      const float ms = stopwatch.time_ms(sel.stream, [&] { launch(pc, trial); });
      fastest = std::min(fastest, static_cast<double>(ms));
    }
    return fastest;
  };
  for (ConvMode mode : {ConvMode::fused, ConvMode::separate}) {
    full.mode = mode;
    if ((mode == ConvMode::fused && !fusable) || (mode == ConvMode::separate && !sel.allow_separate)) continue;
    for (int i = 0; i < returned; ++i) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
      full.algo = perf[i].algo;
      const std::size_t bytes = workspace_for(full, full.algo);
      if (bytes > sel.workspace_limit) continue;
      const double ms = trial_ms(full);  // a refused fused call (identity needs PRECOMP_GEMM) is infinite
      if (ms < best) {
        best = ms;
        mode_ = mode;
        algo_ = full.algo;
        workspace_ = bytes;
      }
    }
  }
  if (gemm_ok) {
    full.mode = ConvMode::gemm;
    const double ms = trial_ms(full);
    if (ms < best) {
      best = ms;
      mode_ = ConvMode::gemm;
      workspace_ = 0;
    }
  }
  if (depthwise_ok) {  // both variants where rows fit in registers: which is faster depends on C and the GPU
    full.mode = ConvMode::depthwise;
    for (bool rows : {false, true}) {
      if (rows && !depthwise_keeps_rows(s_, stride_w_, dil_w_)) continue;
      full.depthwise_rows = rows;
      const double ms = trial_ms(full);
      if (ms < best) {
        best = ms;
        mode_ = ConvMode::depthwise;
        depthwise_rows_ = rows;
        workspace_ = 0;
      }
    }
  }
  CUDA_CHECK(cudaGetLastError());
  if (!std::isfinite(best))
    throw GpuError("node '" + name() + "' (Conv): no allowed way runs this convolution within the workspace limit");
  measured_ms_ = best;
  const int algo = mode_ == ConvMode::gemm ? 0 : mode_ == ConvMode::depthwise ? (depthwise_rows_ ? 1 : 0)
                                                                              : static_cast<int>(algo_);
  sel.cache.put(key, ConvChoice{mode_, algo});
}

void ConvLayer::prepare(int count, cudnnHandle_t cudnn) {
  cudnn_ = cudnn;
  if (per_count_.count(count)) return;
  PerCount& pc = per_count_[count];
  describe_tensors(pc, count);
  pc.mode = mode_;
  pc.algo = algo_;
  pc.depthwise_rows = depthwise_rows_;
  pc.workspace = mode_ == ConvMode::gemm || mode_ == ConvMode::depthwise ? 0 : workspace_for(pc, algo_);
  if (pc.workspace <= workspace_) return;
  // The measured algorithm needs more workspace at this count: take cuDNN's first suggestion that fits.
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int returned = 0;
  CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(cudnn_, pc.x.get(), filter_.get(), conv_.get(), pc.y.get(),
                                                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > workspace_) continue;
    pc.mode = ConvMode::separate;
    pc.algo = perf[i].algo;
    pc.workspace = perf[i].memory;
    return;
  }
  per_count_.erase(count);
  throw GpuError("node '" + name() + "' (Conv): no cuDNN algorithm fits the workspace for " + std::to_string(count) +
                 " items");
}

void ConvLayer::run(const RunContext& ctx) {
  const cudnnStatus_t st = launch(per_count_.at(ctx.count), ctx);
  if (st != CUDNN_STATUS_SUCCESS)
    throw GpuError("node '" + name() + "' (Conv): cuDNN refused the convolution: " + cudnnGetErrorString(st));
}

std::string ConvLayer::kernel() const {
  static const char* act_names[] = {"", "relu", "leaky_relu", "clip", "sigmoid", "hard_sigmoid", "hard_swish", "tanh"};
  const bool fused = mode_ == ConvMode::fused;
  std::ostringstream k;
  if (mode_ == ConvMode::depthwise) {
    k << "sluice depthwise conv " << r_ << "x" << s_ << " NHWC (" << depthwise_channels_per_thread(type_, c_)
      << " channels x 4 pixels per thread" << (depthwise_rows_ ? ", rows in registers" : "")
      << ")";
    if (has_bias_ || residual_ >= 0 || act_.kind != ActivationKind::none)
      k << " +epilogue" << (has_bias_ ? " bias" : "") << (residual_ >= 0 ? " residual" : "") << " "
        << act_names[static_cast<int>(act_.kind)];
  } else if (mode_ == ConvMode::gemm)
    k << "cublas gemm (1x1 conv)";
  else
    k << (fused ? "cudnn conv+bias" : "cudnn conv") << (fused && residual_ >= 0 ? "+residual" : "")
      << (fused && act_.kind == ActivationKind::relu ? "+relu" : "") << " " << algo_name(algo_);
  if (!fused && mode_ != ConvMode::depthwise && (has_bias_ || residual_ >= 0 || act_.kind != ActivationKind::none))
    k << " -> epilogue" << (has_bias_ ? " bias" : "") << (residual_ >= 0 ? " residual" : "") << " "
      << act_names[static_cast<int>(act_.kind)];
  if (scratch_bytes() && mode_ != ConvMode::depthwise) k << " (explicit asymmetric pad)";
  if (from_cache_)
    k << " [cached]";
  else
    k << " [measured " << measured_ms_ << " ms]";
  return k.str();
}

}  // namespace sluice::nn::cuda
