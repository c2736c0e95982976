# The CUDA backend (cuDNN, cuBLAS, own kernels, CUDA graphs).
list(APPEND SLUICE_NN_CUDA_SOURCES
  nn/cuda/algo_cache.cpp
  nn/cuda/values.cpp
  nn/cuda/conv_layer.cpp
  nn/cuda/conv_transpose_layer.cpp
  nn/cuda/gemm.cpp
  nn/cuda/gemm_layer.cpp
  nn/cuda/kernel_layers.cpp
  nn/cuda/engine.cpp
  nn/cuda/elementwise.cu
  nn/cuda/copy.cu
  nn/cuda/pool.cu
  nn/cuda/depthwise_conv.cu
  nn/cuda/resize.cu
  nn/cuda/softmax.cu
  nn/cuda/ranking.cu
  nn/cuda/sampling.cu
  nn/cuda/reduce.cu
  nn/cuda/attention.cu
  nn/cuda/attention_flash.cu
  nn/cuda/attention_layer.cpp
)
list(APPEND SLUICE_NN_TEST_SOURCES tests/nn/test_algo_cache.cpp)  # the cache file needs no GPU
list(APPEND SLUICE_NN_GPU_TEST_SOURCES
  tests/gpu/test_nn_ops_gpu.cpp
  tests/gpu/test_attention_gpu.cpp
  tests/gpu/test_depthwise_kernel_gpu.cpp
  tests/gpu/test_copy_kernels_gpu.cpp
  tests/gpu/test_nn_engine_gpu.cpp
)
