#pragma once
// The CUDA backend: runs a graph in the prepared form (nn/graph.hpp) with cuDNN (convolutions, NHWC, fused
// epilogues), cuBLAS (Gemm/MatMul) and its own kernels, in f32, f16 or bf16.
//
// Construction does all the slow work: weights converted once (KRSC for convolutions), every activation placed
// in one arena by liveness, convolution algorithms measured (or read from the algorithm cache file), one shared
// workspace. enqueue() allocates nothing and never synchronises. With CUDA graphs, a run copies the caller's inputs
// into the engine's buffers, replays the graph of its count (the layers alone) and copies the outputs out, so one
// graph per count serves every buffer of a pool; warm_up() makes those graphs ahead (else the first run at a count
// goes layer by layer and the second captures). Without graphs, bindings that need no conversion are used in place.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nn/graph.hpp"
#include "runtime/format.hpp"
#include "runtime/gpu.hpp"

namespace sluice::nn {

enum class Precision : std::uint8_t { f32, f16, bf16 };

struct CudaEngineOptions {
  Precision precision = Precision::f16;
  std::string algo_cache;        // file of measured convolution algorithms ("" = measure, keep in memory only)
  bool cuda_graph = true;        // capture and replay the network as a CUDA graph
  std::size_t workspace_limit = std::size_t(512) << 20;
  // Which ways a convolution may run (the fastest allowed one is measured and kept): cuDNN's fused
  // conv+bias+residual+ReLU call, cuDNN's conv then sluice's epilogue kernel, (1x1) one cuBLAS product, or
  // (depthwise: group == channels == outputs) sluice's direct kernel with the epilogue inside.
  // Narrowing them is for diagnosis (`sluiced model --conv-modes`) and tests.
  bool conv_fused = true, conv_separate = true, conv_gemm = true, conv_depthwise = true;
  // How an Attention node runs (nn/cuda/attention_layer.cpp, choose_attention_path): `flash`, sluice's
  // FlashAttention-2 kernel (f16/bf16, sm_80+, depth == value depth in {32, 64, 128}); `gemm`, cuBLAS products
  // around a softmax kernel (the scores [B, T, S] in scratch); `fused`, sluice's older fused kernel (WMMA or CUDA
  // cores: every type and depth). `automatic`: flash where it runs, else gemm while the batch's scores fit in
  // `attention_scores_limit` bytes of scratch, else fused. A forced mode is for diagnosis and tests; a forced
  // flash where it cannot run is chosen as automatic would.
  enum class AttentionMode { automatic, gemm, fused, flash } attention = AttentionMode::automatic;
  std::size_t attention_scores_limit = std::size_t(256) << 20;
};

// Device memory of one graph input or output, in the given dtype (f32/f16/bf16) and layout (nchw/nhwc: for 4-D
// values; ignored otherwise). Binding the engine's own precision and NHWC for 4-D values needs no conversion.
struct TensorBinding {
  void* data;
  DType dtype;
  Layout layout;
};

class CudaEngine {
 public:
  CudaEngine(const Graph& prepared, const CudaEngineOptions& options);  // allocates everything; picks algorithms
  ~CudaEngine();
  CudaEngine(const CudaEngine&) = delete;
  CudaEngine& operator=(const CudaEngine&) = delete;

  const Graph& graph() const;
  // Enqueue one run on `stream` for `count` <= the prepared batch items. Inputs/outputs are device memory
  // in the given dtype (f32/f16/bf16) and layout (nchw/nhwc; for 4-D values). No allocation and no sync.
  // Runs share the engine's memory: runs on different streams must be ordered by the caller.
  void enqueue(const std::vector<TensorBinding>& inputs, const std::vector<TensorBinding>& outputs, int count,
               gpu::StreamHandle stream);
  // The counts a run may have: 1..batch, or the batch alone where a layer cannot run fewer items.
  std::vector<int> run_counts() const;
  // Everything a first run at each of `counts` would do (per-count plans, the libraries' lazy kernel loading, the
  // graph capture and first launch), on the engine's own stream and buffers, so that no batch pays for it.
  // Synchronises; call before runs start (runs on other streams are not ordered with it). Counts a layer cannot
  // run are skipped; a count outside 1..batch throws ModelError.
  void warm_up(const std::vector<int>& counts);
  std::string describe() const;  // per layer: kernel/algorithm, workspace, precision
  // Per-layer GPU time (median over `iterations`), for profiles in notes and `sluiced model --profile`.
  // Synchronises; runs at the full batch on internal buffers.
  std::vector<std::pair<std::string, double>> profile_layers(int iterations);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

std::string_view to_string(Precision p) noexcept;

}  // namespace sluice::nn
