// The preprocess kernel against its CPU twin on random inputs (fixed seeds).
//
// Error bounds, after normalisation with std ~0.22 (values span about -2.1..2.7):
//   f32: max |gpu - cpu| <= 1e-4. Both sides compute identical sample positions and weights (exact integer
//        coordinates), so only float rounding/contraction differs: a few ulp of 255, ~1e-6 after normalising.
//   f16: |gpu - cpu| <= 2e-3 or <= 1e-2 * |cpu|. Both round the (nearly equal) f32 value to nearest-even half,
//        so they differ by at most one half ulp (2^-11 relative, 2^-24 absolute near zero).
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/half.hpp"
#include "kernels/preprocess.cuh"
#include "kernels/preprocess_cpu.hpp"
#include "runtime/cuda_check.hpp"

using sluice::DType;
using sluice::Layout;
using sluice::PixelFormat;
using namespace sluice::kernels;

namespace {

constexpr double kF32MaxAbs = 1e-4;
constexpr double kF16MaxAbs = 2e-3;
constexpr double kF16MaxRel = 1e-2;

class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) { CUDA_CHECK(cudaMalloc(&p_, bytes)); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
};

class TestStream {
 public:
  TestStream() { CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~TestStream() { cudaStreamDestroy(s_); }
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

std::size_t out_elems(const PreprocessParams& p) {
  return static_cast<std::size_t>(p.batch) * static_cast<std::size_t>(p.out_channels()) *
         static_cast<std::size_t>(p.out_width) * static_cast<std::size_t>(p.out_height);
}

std::string describe(const PreprocessParams& p) {
  const char* order = p.out_order == ChannelOrder::rgb ? "rgb" : p.out_order == ChannelOrder::bgr ? "bgr" : "gray";
  std::ostringstream s;
  s << sluice::to_string(p.in_format) << " " << p.in_width << "x" << p.in_height << " x" << p.batch << " -> "
    << order << " " << p.out_width << "x" << p.out_height << " " << sluice::to_string(p.layout) << " "
    << sluice::to_string(p.dtype);
  if (p.in_format == PixelFormat::nv12 || p.in_format == PixelFormat::i420)
    s << (p.yuv_matrix == YuvMatrix::bt601 ? " bt601" : " bt709") << (p.yuv_full_range ? " full" : " limited");
  return s.str();
}

// Runs the kernel on `src_dev` (already holding `src`) and the CPU twin on `src`; checks every element.
void compare(const PreprocessParams& p, const std::vector<std::uint8_t>& src, const DeviceBuffer& src_dev,
             cudaStream_t stream) {
  INFO(describe(p));
  const std::size_t n = out_elems(p);
  const std::size_t esize = sluice::dtype_bytes(p.dtype);
  DeviceBuffer dst_dev(n * esize);
  // 0xff bytes are NaN in both f32 and f16, so an element the kernel fails to write cannot pass.
  CUDA_CHECK(cudaMemsetAsync(dst_dev.get(), 0xff, n * esize, stream));
  preprocess_gpu(p, static_cast<const std::uint8_t*>(src_dev.get()), dst_dev.get(), stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));

  std::vector<float> gpu(n), cpu(n);
  if (p.dtype == DType::f32) {
    CUDA_CHECK(cudaMemcpy(gpu.data(), dst_dev.get(), n * esize, cudaMemcpyDeviceToHost));
    preprocess_cpu(p, src.data(), cpu.data());
  } else {
    std::vector<std::uint16_t> g16(n), c16(n);
    CUDA_CHECK(cudaMemcpy(g16.data(), dst_dev.get(), n * esize, cudaMemcpyDeviceToHost));
    preprocess_cpu(p, src.data(), c16.data());
    for (std::size_t i = 0; i < n; ++i) {
      gpu[i] = half_bits_to_float(g16[i]);
      cpu[i] = half_bits_to_float(c16[i]);
    }
  }

  std::size_t bad = 0, worst = 0;
  double worst_err = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double err = std::fabs(static_cast<double>(gpu[i]) - static_cast<double>(cpu[i]));
    const bool ok = p.dtype == DType::f32
                        ? err <= kF32MaxAbs
                        : (err <= kF16MaxAbs || err <= kF16MaxRel * std::fabs(static_cast<double>(cpu[i])));
    if (!ok) {  // also catches NaN (unwritten or bad) elements
      if (bad == 0) worst = i;
      ++bad;
    }
    if (err > worst_err) {
      worst_err = err;
      if (bad == 0) worst = i;
    }
  }
  INFO("max abs error " << worst_err << "; elements out of bound: " << bad << " of " << n << "; element " << worst
                        << ": gpu " << gpu[worst] << " cpu " << cpu[worst]);
  CHECK(bad == 0);
}

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng() >> 24);
  return v;
}

struct Shape {
  int in_w, in_h, out_w, out_h, batch;
};

}  // namespace

TEST_CASE("preprocess_gpu matches the CPU twin on random inputs", "[gpu][preprocess]") {
  // yuv formats need even input sizes; the others use the odd variant of the small shape.
  const Shape shapes[] = {
      {1920, 1080, 224, 224, 2},  // typical model input, strong downscale
      {640, 480, 300, 200, 2},    // non-integer downscale
      {640, 480, 301, 199, 2},    // odd output sizes
      {37, 29, 64, 48, 3},        // upscale, odd input (38x30 for yuv)
      {16, 10, 333, 211, 2},      // strong upscale, odd output
      {100, 60, 7, 5, 3},         // tiny odd output
      {64, 48, 64, 48, 2},        // same size
  };
  const PixelFormat formats[] = {PixelFormat::bgr8, PixelFormat::rgb8, PixelFormat::gray8, PixelFormat::nv12,
                                 PixelFormat::i420};
  const ChannelOrder orders[] = {ChannelOrder::rgb, ChannelOrder::bgr, ChannelOrder::gray};
  struct Yuv {
    YuvMatrix m;
    bool full;
  };
  const Yuv yuv_modes[] = {{YuvMatrix::bt601, false}, {YuvMatrix::bt709, true}};

  TestStream stream;
  std::uint32_t seed = 1234;
  for (PixelFormat f : formats) {
    const bool yuv = f == PixelFormat::nv12 || f == PixelFormat::i420;
    for (Shape s : shapes) {
      if (yuv) {
        s.in_w += s.in_w % 2;
        s.in_h += s.in_h % 2;
      }
      const std::size_t bytes = sluice::image_bytes(f, s.in_w, s.in_h) * static_cast<std::size_t>(s.batch);
      const auto src = random_bytes(bytes, seed++);
      DeviceBuffer src_dev(bytes);
      CUDA_CHECK(cudaMemcpy(src_dev.get(), src.data(), bytes, cudaMemcpyHostToDevice));

      for (ChannelOrder order : orders)
        for (Layout layout : {Layout::nchw, Layout::nhwc})
          for (DType dtype : {DType::f32, DType::f16})
            for (const Yuv& ym : yuv_modes) {
              if (!yuv && &ym != &yuv_modes[0]) continue;  // matrix/range only matter for yuv
              PreprocessParams p;
              p.batch = s.batch;
              p.in_format = f;
              p.in_width = s.in_w;
              p.in_height = s.in_h;
              p.yuv_matrix = ym.m;
              p.yuv_full_range = ym.full;
              p.out_order = order;
              p.out_width = s.out_w;
              p.out_height = s.out_h;
              p.layout = layout;
              p.dtype = dtype;
              const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
              std::memcpy(p.mean, mean, sizeof mean);
              std::memcpy(p.std, sd, sizeof sd);
              compare(p, src, src_dev, stream.get());
            }
    }
  }
}

TEST_CASE("preprocess_gpu covers batches beyond one grid z-extent", "[gpu][preprocess]") {
  // 70000 > 65535 (the grid z limit): the kernel must stride over the rest of the batch.
  PreprocessParams p;
  p.batch = 70000;
  p.in_format = PixelFormat::gray8;
  p.in_width = 2;
  p.in_height = 2;
  p.out_order = ChannelOrder::gray;
  p.out_width = 1;
  p.out_height = 1;
  const std::size_t bytes = sluice::image_bytes(p.in_format, 2, 2) * static_cast<std::size_t>(p.batch);
  const auto src = random_bytes(bytes, 99);
  DeviceBuffer src_dev(bytes);
  CUDA_CHECK(cudaMemcpy(src_dev.get(), src.data(), bytes, cudaMemcpyHostToDevice));
  TestStream stream;
  compare(p, src, src_dev, stream.get());
}

TEST_CASE("preprocess_gpu rejects bad params and a null stream before launching", "[gpu][preprocess]") {
  DeviceBuffer src(8 * 8 * 3), dst(4 * 4 * 3 * sizeof(float));
  TestStream stream;
  PreprocessParams p;
  p.in_width = p.in_height = 8;
  p.out_width = p.out_height = 4;
  const auto* s = static_cast<const std::uint8_t*>(src.get());
  REQUIRE_NOTHROW(preprocess_gpu(p, s, dst.get(), stream.get()));
  CUDA_CHECK(cudaStreamSynchronize(stream.get()));

  CHECK_THROWS_AS(preprocess_gpu(p, s, dst.get(), nullptr), std::invalid_argument);
  CHECK_THROWS_AS(preprocess_gpu(p, nullptr, dst.get(), stream.get()), std::invalid_argument);
  PreprocessParams bad = p;
  bad.dtype = DType::u8;
  CHECK_THROWS_WITH(preprocess_gpu(bad, s, dst.get(), stream.get()), Catch::Matchers::Contains("dtype"));
  bad = p;
  bad.in_format = PixelFormat::nv12;
  bad.in_width = 7;
  CHECK_THROWS_WITH(preprocess_gpu(bad, s, dst.get(), stream.get()), Catch::Matchers::Contains("even"));
}
