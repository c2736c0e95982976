# ONNX loading, graph passes, .npy files.
list(APPEND SLUICE_NN_SOURCES
  nn/onnx_loader.cpp
  nn/npy.cpp
  nn/describe.cpp
  nn/passes/prepare.cpp
  nn/passes/bind_batch.cpp
  nn/passes/lower.cpp
  nn/passes/decompose.cpp
  nn/passes/canonicalize.cpp
  nn/passes/shape_inference.cpp
  nn/passes/fold_constants.cpp
  nn/passes/fold_batchnorm.cpp
  nn/passes/fuse.cpp
  nn/passes/fuse_gelu.cpp
  nn/passes/linear.cpp
  nn/passes/fuse_attention.cpp
  nn/passes/fuse_attention_parts.cpp
  nn/passes/patchify.cpp
  nn/passes/collapse_moves.cpp
  nn/passes/sink_reshapes.cpp
  nn/passes/attention_layout.cpp
  nn/passes/prune.cpp
  nn/passes/graph_queries.cpp)
list(APPEND SLUICE_NN_TEST_SOURCES
  tests/nn/test_onnx_loader.cpp
  tests/nn/test_passes.cpp
  tests/nn/test_move_passes.cpp
  tests/nn/test_npy.cpp
  tests/nn/test_exact_indices.cpp
  tests/nn/test_ranking_keys.cpp)
