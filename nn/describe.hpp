#pragma once
// A readable summary of a prepared graph, printed by `sluiced model FILE.onnx`: one row per node (name,
// op with its fusions, output shape, parameter count, MFLOPs of Conv/Gemm/MatMul), totals (weights,
// activation memory: total and peak with values freed after their last reader) and prepare()'s rewrites.
#include <string>

#include "nn/graph.hpp"

namespace sluice::nn {

std::string describe_graph(const Graph& prepared);

}  // namespace sluice::nn
