# The CUDA backend (cuDNN, cuBLAS, own kernels, CUDA graphs).
list(APPEND SLUICE_NN_CUDA_SOURCES)
list(APPEND SLUICE_NN_GPU_TEST_SOURCES)
