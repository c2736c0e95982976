# The CPU backend.
list(APPEND SLUICE_NN_SOURCES
  nn/cpu/engine.cpp
  nn/cpu/layer.cpp
  nn/cpu/layout.cpp
  nn/cpu/onednn.cpp
  nn/cpu/strided.cpp
  nn/cpu/activation.cpp
  nn/cpu/conv.cpp
  nn/cpu/conv_transpose.cpp
  nn/cpu/pool.cpp
  nn/cpu/elementwise.cpp
  nn/cpu/matmul.cpp
  nn/cpu/shape_ops.cpp
  nn/cpu/resize.cpp
  nn/cpu/softmax.cpp
  nn/cpu/softmax_exp.cpp
  nn/cpu/ranking.cpp
  nn/cpu/sampling.cpp
  nn/cpu/reduce.cpp
  nn/cpu/layer_norm.cpp
  nn/cpu/batchnorm.cpp
  nn/cpu/attention.cpp
)
list(APPEND SLUICE_NN_TEST_SOURCES
  tests/nn/test_cpu_ops.cpp
  tests/nn/test_cpu_detr_ops.cpp
  tests/nn/test_cpu_models.cpp
  tests/nn/test_op_table.cpp
)
