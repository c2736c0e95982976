#pragma once
// Move-only owners of cuDNN descriptors and library handles (destructors never throw).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

#include <utility>

#include "nn/cuda/check.hpp"
#include "runtime/format.hpp"

namespace sluice::nn::cuda {

template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class CudnnObject {
 public:
  CudnnObject() { CUDNN_CHECK(Create(&h_)); }
  CudnnObject(CudnnObject&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  CudnnObject& operator=(CudnnObject&& o) noexcept {
    std::swap(h_, o.h_);
    return *this;
  }
  CudnnObject(const CudnnObject&) = delete;
  CudnnObject& operator=(const CudnnObject&) = delete;
  ~CudnnObject() {
    if (h_) Destroy(h_);
  }
  T get() const { return h_; }

 private:
  T h_ = nullptr;
};

using TensorDesc = CudnnObject<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = CudnnObject<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    CudnnObject<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;
using ActivationDesc =
    CudnnObject<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor, cudnnDestroyActivationDescriptor>;
using CudnnHandle = CudnnObject<cudnnHandle_t, cudnnCreate, cudnnDestroy>;

class CublasHandle {
 public:
  CublasHandle() { CUBLAS_CHECK(cublasCreate(&h_)); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  ~CublasHandle() {
    if (h_) cublasDestroy(h_);
  }
  cublasHandle_t get() const { return h_; }

 private:
  cublasHandle_t h_ = nullptr;
};

// Owner of a cuBLASLt object made by the caller's create call (their signatures differ), destroyed here.
template <typename T, cublasStatus_t (*Destroy)(T)>
class LtObject {
 public:
  LtObject() = default;
  explicit LtObject(T h) : h_(h) {}
  LtObject(LtObject&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  LtObject& operator=(LtObject&& o) noexcept {
    std::swap(h_, o.h_);
    return *this;
  }
  LtObject(const LtObject&) = delete;
  LtObject& operator=(const LtObject&) = delete;
  ~LtObject() {
    if (h_) Destroy(h_);
  }
  T get() const { return h_; }

 private:
  T h_ = nullptr;
};
using CublasLtHandle = LtObject<cublasLtHandle_t, cublasLtDestroy>;
using LtMatmulDesc = LtObject<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using LtLayout = LtObject<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using LtPreference = LtObject<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

inline cudnnDataType_t cudnn_type(DType t) {
  return t == DType::f32 ? CUDNN_DATA_FLOAT : t == DType::f16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
}

}  // namespace sluice::nn::cuda
