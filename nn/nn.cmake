# The inference engine (nn/): ONNX loading, graph passes, the CPU backend and the CUDA backend.
# Included from the top-level CMakeLists.txt, so the source lists below are visible to tests/.
# Each part lists its own files in its own fragment: nn/front.cmake, nn/cpu/sources.cmake, nn/cuda/sources.cmake.
find_package(Protobuf REQUIRED)  # before ONNX: its targets name protobuf::libprotobuf
find_package(ONNX REQUIRED)  # Debian's libonnx-dev: the onnx_proto message classes, over protobuf
find_package(dnnl REQUIRED)  # Debian's libdnnl-dev (oneDNN 2.x): the CPU backend's convolutions and matrix products

set(SLUICE_NN_SOURCES nn/graph.cpp nn/memory_plan.cpp nn/ops.cpp nn/exact_indices.cpp)
set(SLUICE_NN_CUDA_SOURCES)
set(SLUICE_NN_TEST_SOURCES)      # CPU tests (tests/nn/...), built into sluice_nn_tests
set(SLUICE_NN_GPU_TEST_SOURCES)  # GPU tests (tests/gpu/...), built into sluice_gpu_tests
include(nn/front.cmake)
include(nn/cpu/sources.cmake)
if(SLUICE_WITH_CUDA)
  include(nn/cuda/sources.cmake)
endif()

# Part of sluice_core: the infer stage (stages/) is registered with the other built-in stages.
# `sluice_nn` is the name tests and tools link against.
target_sources(sluice_core PRIVATE ${SLUICE_NN_SOURCES})
target_link_libraries(sluice_core PUBLIC onnx_proto DNNL::dnnl)
if(SLUICE_WITH_CUDA)
  find_library(CUDNN_LIBRARY cudnn REQUIRED HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib)
  target_sources(sluice_core PRIVATE ${SLUICE_NN_CUDA_SOURCES})
  target_link_libraries(sluice_core PUBLIC ${CUDNN_LIBRARY} CUDA::cublas CUDA::cublasLt)
endif()
# The CPU layers that are not oneDNN primitives (attention) share oneDNN's OpenMP runtime (libgomp): only with
# gcc, so the clang sanitizer builds do not mix LLVM's libomp into the same process.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  find_package(OpenMP COMPONENTS CXX)
  if(OpenMP_CXX_FOUND)
    target_link_libraries(sluice_core PRIVATE OpenMP::OpenMP_CXX)
  endif()
endif()
add_library(sluice_nn ALIAS sluice_core)
