#pragma once
// The CPU backend: runs a graph in the prepared form (nn/graph.hpp) in f32 with oneDNN for the convolutions
// and matrix products, on all cores (OpenMP). It is the oracle the CUDA backend is tested against, and what
// runs pipelines on machines without a GPU.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/graph.hpp"

namespace sluice::nn {

namespace cpu {
class Layer;
}

struct CpuOptions {
  // Keep chains of convolutions channels last (nn/cpu/layout.hpp); false: every value NCHW, which the tests
  // use as the plain reference for the planned layouts.
  bool channels_last = true;
  // Threads each layer runs on (OpenMP, set on the thread that calls run()); 0: OpenMP's default, which is
  // OMP_NUM_THREADS or every core.
  int threads = 0;
};

class CpuEngine {
 public:
  // Checks every node against the prepared form (ModelError naming the node otherwise), makes the layers and
  // plans all intermediate memory; run() allocates nothing.
  explicit CpuEngine(Graph prepared, CpuOptions options = {});
  ~CpuEngine();
  CpuEngine(CpuEngine&&) noexcept;
  CpuEngine& operator=(CpuEngine&&) noexcept;

  const Graph& graph() const;
  // One pointer per graph input/output, f32, contiguous, ONNX layout and the prepared shapes. Outputs must not
  // overlap inputs. One run at a time per engine.
  void run(const std::vector<const float*>& inputs, const std::vector<float*>& outputs);
  // Wall time of each layer in order, "name (Op)", the median of `iterations` runs of that layer alone after one
  // whole run on these inputs: for profiles in notes and `sluiced model --profile --device cpu`.
  std::vector<std::pair<std::string, double>> profile_layers(const std::vector<const float*>& inputs,
                                                             const std::vector<float*>& outputs, int iterations);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace sluice::nn
