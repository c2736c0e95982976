#pragma once
// prepare(): a loaded Graph (nn/onnx_loader.hpp) -> the prepared form documented in nn/graph.hpp.
//
// Steps, in order (each rewrite adds one line to Graph::rewrites):
//   1. bind the batch: dim 0 of every input becomes `batch`; any other symbolic dimension is an error;
//   2. one topological sweep that, node by node, removes Identity/Dropout/float Casts, turns Shape into a
//      constant, canonicalizes the node (graph.hpp's spellings), folds it when all its inputs are constants,
//      and otherwise infers its concrete output shapes (and removes it if it is a Pad of nothing or a Slice of
//      every element);
//   3. folds BatchNormalization into the Conv before it;
//   4. fuses the GELU and attention patterns (fuse_gelu.cpp, fuse_attention.cpp, fuse_attention_parts.cpp);
//   5. folds BatchNormalization into the Conv before it; a Conv whose kernel tiles its input becomes a product of
//      its patches (patchify.cpp); chains of Reshape/Transpose collapse to one move (collapse_moves.cpp);
//      products by a constant matrix become Linear;
//   6. fuses into Conv and Linear the bias Add, scale Mul, residual Add (also one behind a Reshape:
//      sink_reshapes.cpp) and activation that follow them;
//   6b. turns the Transposes around Attention nodes into operand layouts (attention_layout.cpp), then fuses the
//      epilogues that this exposes;
//   7. removes dead nodes and unused constants.
// Graph input and output names never change. Errors are ModelError naming the file, the node and the fault.
#include <cstdint>

#include "nn/graph.hpp"

namespace sluice::nn {

Graph prepare(const Graph& model, std::int64_t batch);

}  // namespace sluice::nn
