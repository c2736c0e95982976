#pragma once
// `sluiced model FILE.onnx`: what sluice makes of a model (the graph after its passes), how fast it runs, and
// its outputs for given inputs in NumPy .npy files, so anyone can compare with another framework.
#include <string>
#include <vector>

namespace sluice {

struct ModelToolOptions {
  std::string file;
  int batch = 0;                 // 0: the batch of --input, else 1
  std::string device = "auto";   // auto | cpu | cuda
  std::string precision = "auto";  // auto | f32 | f16 | bf16 (cuda)
  bool bench = false, profile = false, cuda_graph = true;
  int iterations = 100, warmup = 10;
  std::vector<std::string> inputs, outputs;  // .npy files
  std::string algo_cache;        // cuda: file of measured convolution algorithms
  std::vector<std::string> conv_modes;  // cuda: allowed ways to run convolutions (fused, separate, gemm, depthwise); empty: all
  std::string json_path;         // bench: the result as JSON
};

// Prints to stdout; returns the process exit status. Throws nn::ModelError / std::invalid_argument.
int run_model_tool(const ModelToolOptions& options);

}  // namespace sluice
