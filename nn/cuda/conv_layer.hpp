#pragma once
// Conv on cuDNN, NHWC tensors, KRSC weights in the engine's precision (tensor cores for f16/bf16, FMA only for
// f32 so that results match the CPU). Up to three ways to run, chosen by measurement per layer:
//   fused:    cudnnConvolutionBiasActivationForward: y = act(conv(x) + bias + residual), act ReLU or identity
//             (identity only with IMPLICIT_PRECOMP_GEMM, a cuDNN rule);
//   separate: cudnnConvolutionForward, then the epilogue kernel for bias + residual + any activation;
//   gemm:     1x1, stride 1, no pad, one group: NHWC pixels x KC weights on cuBLAS, then the epilogue kernel
//             (cuDNN's legacy kernels are slow for the small products of batch 1);
//   depthwise: group == C == K: sluice's direct kernel (nn/cuda/depthwise_conv.cu) with the whole epilogue and
//             the pads inside (cuDNN runs large depthwise filters far below memory bandwidth).
// Asymmetric pads: the input is padded into scratch by the extra amount and cuDNN gets the symmetric part.
#include <array>
#include <map>
#include <string>

#include "nn/cuda/algo_cache.hpp"
#include "nn/cuda/cudnn_handles.hpp"
#include "nn/cuda/layer.hpp"

namespace sluice::nn::cuda {

// Construction-time services for choosing algorithms (after the arena exists, so trials use real buffers).
struct ConvSelection {
  cudnnHandle_t cudnn;
  cublasHandle_t cublas;  // workspace set
  cudaStream_t stream;
  void* workspace;  // workspace_limit bytes for trying algorithms
  std::size_t workspace_limit;
  void* scratch;
  AlgoCache& cache;
  std::string device_name;
  const std::vector<void*>* ptr;  // value pointers for trial runs
  bool allow_fused = true, allow_separate = true, allow_gemm = true, allow_depthwise = true;
};

class ConvLayer : public Layer {
 public:
  ConvLayer(const Node& node, BuildContext& ctx);
  // Takes the cached choice for this layer's key or measures every candidate (algorithm x mode) at the full
  // batch and records the fastest.
  void select_algorithm(ConvSelection& sel);
  bool from_cache() const { return from_cache_; }

  void prepare(int count, cudnnHandle_t cudnn) override;
  void run(const RunContext& ctx) override;
  std::string kernel() const override;
  std::size_t workspace_bytes() const override { return workspace_; }
  std::size_t scratch_bytes() const override;

 private:
  struct PerCount {
    TensorDesc x, y;
    cudnnConvolutionFwdAlgo_t algo{};
    ConvMode mode = ConvMode::separate;
    bool depthwise_rows = false;  // depthwise: the variant that keeps rows in registers
    std::size_t workspace = 0;
  };
  std::string cache_key(const std::string& device_name) const;
  void describe_tensors(PerCount& pc, int count) const;
  // Enqueues the layer with the given choice; returns cuDNN's status instead of throwing (for trials).
  cudnnStatus_t launch(const PerCount& pc, const RunContext& ctx) const;
  std::size_t workspace_for(const PerCount& pc, cudnnConvolutionFwdAlgo_t algo) const;

  DType type_;
  cudnnHandle_t cudnn_;
  int x_ = -1, y_ = -1, residual_ = -1;
  int n_ = 0, c_ = 0, h_ = 0, w_ = 0, k_ = 0, r_ = 0, s_ = 0, out_h_ = 0, out_w_ = 0, groups_ = 1;
  int stride_h_ = 1, stride_w_ = 1, dil_h_ = 1, dil_w_ = 1;
  int pad_h_ = 0, pad_w_ = 0;                            // symmetric part, given to cuDNN
  int extra_top_ = 0, extra_left_ = 0, extra_bottom_ = 0, extra_right_ = 0;  // padded explicitly into scratch
  ActivationParams act_;
  void* weight_ = nullptr;
  void* bias_ = nullptr;       // engine type; zeros when the node has none (the fused call needs one)
  bool has_bias_ = false;
  FilterDesc filter_;
  ConvDesc conv_;
  TensorDesc bias_desc_;
  ActivationDesc act_desc_;
  bool pointwise_ = false;  // may run as a product
  bool depthwise_ = false;  // group == C == K: may run on the own depthwise kernel
  bool depthwise_rows_ = false;  // the measured variant keeps rows in registers (cached as algorithm 1)
  void* depthwise_weight_ = nullptr;  // f32 [R, S, C] (depthwise_ only)
  void* depthwise_bias_ = nullptr;    // f32 [C], null without B
  std::array<int, 2> pad_begin_{};    // top, left as given (the depthwise kernel takes them directly)
  ConvMode mode_ = ConvMode::separate;
  cudnnConvolutionFwdAlgo_t algo_{};
  std::size_t workspace_ = 0;
  bool from_cache_ = false;
  double measured_ms_ = 0;
  std::map<int, PerCount> per_count_;
};

}  // namespace sluice::nn::cuda
