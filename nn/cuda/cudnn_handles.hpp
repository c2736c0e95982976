#pragma once
// Move-only owners of cuDNN descriptors and cuBLAS/cuBLASLt handles: the runtime's UniqueHandle, as for streams
// and events (destructors never throw).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

#include <utility>

#include "nn/cuda/check.hpp"
#include "runtime/gpu_handles.hpp"
#include "runtime/format.hpp"

namespace sluice::nn::cuda {

// The libraries' destroy calls return a status; an owner's destructor has nothing to do with it.
template <typename T, typename Status, Status (*Destroy)(T)>
void destroy_quietly(T h) noexcept {
  Destroy(h);
}

// A cuDNN object or handle, created on construction (the runtime's UniqueHandle owns it).
template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class CudnnObject : public UniqueHandle<T, destroy_quietly<T, cudnnStatus_t, Destroy>> {
 public:
  CudnnObject() : UniqueHandle<T, destroy_quietly<T, cudnnStatus_t, Destroy>>(created()) {}

 private:
  static T created() {
    T h{};
    CUDNN_CHECK(Create(&h));
    return h;
  }
};

using TensorDesc = CudnnObject<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = CudnnObject<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    CudnnObject<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;
using ActivationDesc =
    CudnnObject<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor, cudnnDestroyActivationDescriptor>;
using CudnnHandle = CudnnObject<cudnnHandle_t, cudnnCreate, cudnnDestroy>;

class CublasHandle : public UniqueHandle<cublasHandle_t, destroy_quietly<cublasHandle_t, cublasStatus_t, cublasDestroy>> {
 public:
  CublasHandle() : UniqueHandle(created()) {}

 private:
  static cublasHandle_t created() {
    cublasHandle_t h = nullptr;
    CUBLAS_CHECK(cublasCreate(&h));
    return h;
  }
};

// Owner of a cuBLASLt object made by the caller's create call (their signatures differ), destroyed here.
template <typename T, cublasStatus_t (*Destroy)(T)>
using LtObject = UniqueHandle<T, destroy_quietly<T, cublasStatus_t, Destroy>>;
using CublasLtHandle = LtObject<cublasLtHandle_t, cublasLtDestroy>;
using LtMatmulDesc = LtObject<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using LtLayout = LtObject<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using LtPreference = LtObject<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

inline cudnnDataType_t cudnn_type(DType t) {
  return t == DType::f32 ? CUDNN_DATA_FLOAT : t == DType::f16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
}

}  // namespace sluice::nn::cuda
