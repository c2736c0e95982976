#pragma once
// ONNX file -> Graph, as written (see nn/graph.hpp): opset 11-21 of the default domain, the operators in
// supported_onnx_ops(). Constant nodes become constants; everything else stays as the file spells it.
#include <string>

#include "nn/graph.hpp"

namespace sluice::nn {

// Throws ModelError naming the file (and the node where one is at fault).
Graph load_onnx(const std::string& path);
// The same, from the bytes of a model; `source` names it in messages and is the base for external data.
Graph load_onnx_bytes(const std::string& bytes, const std::string& source);

inline constexpr std::int64_t kMinOpset = 11;
inline constexpr std::int64_t kMaxOpset = 21;

}  // namespace sluice::nn
