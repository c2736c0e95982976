// preprocess_bench: times the fused preprocess kernel (one launch per batch) on the shapes the product needs.
//
// Build (from the repository root; not part of CMake):
//   nvcc -std=c++17 -O3 -arch=sm_90 -I. bench/preprocess_bench.cu kernels/preprocess.cu kernels/preprocess_cpu.cpp runtime/format.cpp runtime/gpu_none.cpp -o build-gpu/preprocess_bench
// Run: build-gpu/preprocess_bench [launches=50]
//
// For each case: 5 warm-up launches, then `launches` launches each bracketed by its own cudaEvent pair on one
// non-blocking stream; prints median, min and max kernel time, and the equivalent throughput as source frame
// bytes/s (what the kernel consumes, to compare with the H2D copy of the same batch, timed here too from pinned
// memory) and tensor bytes/s written. Item 0 of each case is also checked against the CPU twin (max abs error,
// informational; the bounds live in tests/gpu/test_preprocess_gpu.cpp). Input is random bytes.
// runtime/gpu_none.cpp only satisfies format.cpp's link-time references (runtime/gpu_handles.hpp); this program
// uses the CUDA runtime directly.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/half.hpp"
#include "kernels/preprocess.cuh"
#include "kernels/preprocess_cpu.hpp"

using namespace sluice;
using namespace sluice::kernels;

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
#define CK(call) check((call), #call)

__global__ void fill_random(std::uint8_t* p, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::uint32_t x = static_cast<std::uint32_t>(i) * 2654435761u ^ seed ^ static_cast<std::uint32_t>(i >> 32);
    x ^= x >> 15;
    x *= 0x2c1b3c6dU;
    x ^= x >> 12;
    p[i] = static_cast<std::uint8_t>(x >> 24);
  }
}

struct Stats {
  float median, min, max;
};

Stats stats(std::vector<float> ms) {
  std::sort(ms.begin(), ms.end());
  const std::size_t n = ms.size();
  const float median = n % 2 ? ms[n / 2] : 0.5f * (ms[n / 2 - 1] + ms[n / 2]);
  return {median, ms.front(), ms.back()};
}

struct Case {
  const char* name;
  PreprocessParams p;
};

PreprocessParams make(PixelFormat f, int in_w, int in_h, int out_w, int out_h, Layout layout, DType dtype, int batch,
                      bool letterbox) {
  PreprocessParams p;
  p.batch = batch;
  p.in_format = f;
  p.in_width = in_w;
  p.in_height = in_h;
  p.out_width = out_w;
  p.out_height = out_h;
  p.layout = layout;
  p.dtype = dtype;
  p.letterbox = letterbox;
  const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
  for (int c = 0; c < 3; ++c) {
    p.mean[c] = mean[c];
    p.std[c] = sd[c];
  }
  return p;
}

float to_float(const std::uint8_t* base, std::size_t i, DType d) {
  if (d == DType::f32) {
    float f;
    std::memcpy(&f, base + i * 4, 4);
    return f;
  }
  std::uint16_t h;
  std::memcpy(&h, base + i * 2, 2);
  return d == DType::f16 ? half_bits_to_float(h) : bf16_bits_to_float(h);
}

}  // namespace

int main(int argc, char** argv) {
  const int launches = argc > 1 ? std::max(1, std::atoi(argv[1])) : 50;
  int dev = 0;
  CK(cudaSetDevice(dev));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device: %s (sm_%d%d, %d SMs), %d launches per case\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, launches);

  const Case cases[] = {
      {"1080p bgr8 -> 224x224 f16 nhwc, batch 32",
       make(PixelFormat::bgr8, 1920, 1080, 224, 224, Layout::nhwc, DType::f16, 32, false)},
      {"1080p nv12 -> 224x224 f16 nhwc, batch 32",
       make(PixelFormat::nv12, 1920, 1080, 224, 224, Layout::nhwc, DType::f16, 32, false)},
      {"1080p bgr8 -> 640x640 letterbox f16 nchw, batch 8",
       make(PixelFormat::bgr8, 1920, 1080, 640, 640, Layout::nchw, DType::f16, 8, true)},
  };

  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&stop));

  for (const Case& c : cases) {
    const PreprocessParams& p = c.p;
    const std::size_t frame_bytes = image_bytes(p.in_format, p.in_width, p.in_height);
    const std::size_t in_bytes = frame_bytes * static_cast<std::size_t>(p.batch);
    const std::size_t item_elems = static_cast<std::size_t>(p.out_channels()) * p.out_width * p.out_height;
    const std::size_t out_bytes = item_elems * dtype_bytes(p.dtype) * static_cast<std::size_t>(p.batch);

    std::uint8_t* src = nullptr;
    void* dst = nullptr;
    std::uint8_t* host = nullptr;
    CK(cudaMalloc(&src, in_bytes));
    CK(cudaMalloc(&dst, out_bytes));
    CK(cudaMallocHost(&host, in_bytes));
    fill_random<<<1024, 256, 0, stream>>>(src, in_bytes, 12345u);
    CK(cudaGetLastError());

    // Reference: the H2D copy of the same batch from pinned memory.
    std::memset(host, 0x5a, in_bytes);
    std::vector<float> h2d;
    for (int i = 0; i < 5; ++i) {
      CK(cudaEventRecord(start, stream));
      CK(cudaMemcpyAsync(src, host, in_bytes, cudaMemcpyHostToDevice, stream));
      CK(cudaEventRecord(stop, stream));
      CK(cudaEventSynchronize(stop));
      float ms = 0.f;
      CK(cudaEventElapsedTime(&ms, start, stop));
      h2d.push_back(ms);
    }
    fill_random<<<1024, 256, 0, stream>>>(src, in_bytes, 12345u);  // random content again
    CK(cudaGetLastError());

    for (int i = 0; i < 5; ++i) preprocess_gpu(p, src, dst, stream);
    CK(cudaStreamSynchronize(stream));
    std::vector<float> ms;
    ms.reserve(static_cast<std::size_t>(launches));
    for (int i = 0; i < launches; ++i) {
      CK(cudaEventRecord(start, stream));
      preprocess_gpu(p, src, dst, stream);
      CK(cudaEventRecord(stop, stream));
      CK(cudaEventSynchronize(stop));
      float t = 0.f;
      CK(cudaEventElapsedTime(&t, start, stop));
      ms.push_back(t);
    }

    // Item 0 against the CPU twin.
    PreprocessParams one = p;
    one.batch = 1;
    std::vector<std::uint8_t> frame(frame_bytes);
    CK(cudaMemcpy(frame.data(), src, frame_bytes, cudaMemcpyDeviceToHost));
    const std::size_t item_bytes = item_elems * dtype_bytes(p.dtype);
    std::vector<std::uint8_t> gpu(item_bytes), cpu(item_bytes);
    CK(cudaMemcpy(gpu.data(), dst, item_bytes, cudaMemcpyDeviceToHost));
    preprocess_cpu(one, frame.data(), cpu.data());
    double max_err = 0.0;
    for (std::size_t i = 0; i < item_elems; ++i) {
      const double e = std::fabs(static_cast<double>(to_float(gpu.data(), i, p.dtype)) -
                                 static_cast<double>(to_float(cpu.data(), i, p.dtype)));
      max_err = std::isnan(e) ? INFINITY : std::max(max_err, e);
    }

    const Stats s = stats(ms), h = stats(h2d);
    const double sec = s.median * 1e-3;
    std::printf("%s\n", c.name);
    std::printf("  kernel  median %.4f ms  min %.4f  max %.4f  (%.1f batches/s, %.0f frames/s)\n", s.median, s.min,
                s.max, 1.0 / sec, p.batch / sec);
    std::printf("  source  %.1f MB/batch -> %.1f GB/s equivalent; tensor %.2f MB/batch -> %.1f GB/s written\n",
                in_bytes / 1e6, in_bytes / sec / 1e9, out_bytes / 1e6, out_bytes / sec / 1e9);
    std::printf("  H2D of the batch (pinned)  median %.3f ms (%.1f GB/s): kernel is %.1f%% of it\n", h.median,
                in_bytes / (h.median * 1e-3) / 1e9, 100.0 * s.median / h.median);
    std::printf("  item 0 vs CPU twin: max abs error %.3g\n", max_err);

    CK(cudaFreeHost(host));
    CK(cudaFree(dst));
    CK(cudaFree(src));
  }
  CK(cudaEventDestroy(start));
  CK(cudaEventDestroy(stop));
  CK(cudaStreamDestroy(stream));
  return 0;
}
