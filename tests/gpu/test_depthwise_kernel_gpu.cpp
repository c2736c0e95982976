// The depthwise convolution kernel (nn/cuda/depthwise_conv.cu) through its launcher, both variants (each tap
// loading its inputs, and rows kept in registers), against a double-precision loop over the same rounded inputs.
// The engine tests (test_nn_ops_gpu.cpp) reach only the variant that measures faster; this one runs both.
// Error bound: max |gpu - ref| / max |ref| <= 1e-5 at f32, 1e-3 at f16 and 8e-3 at bf16 (the output's rounding;
// inputs and weights are the same on both sides).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/half.hpp"
#include "nn/cuda/kernels.cuh"
#include "tests/gpu/device_memory.hpp"
#include "tests/gpu/typed_values.hpp"

using namespace sluice;
using namespace sluice::nn::cuda;
using sluice::nn::test::device_bytes;
using sluice::nn::test::host_floats;
using sluice::nn::test::rounded;

namespace {

struct Shape4 {
  int n, h, w, c, kernel_h, kernel_w, stride_h, pad_top, pad_left, pad_bottom, pad_right;
  bool bias, residual;
};

}  // namespace

TEST_CASE("depthwise kernel variants match a double-precision loop", "[nn][nn_cuda][conv][depthwise]") {
  const std::vector<Shape4> shapes = {
      {2, 13, 15, 96, 7, 7, 1, 3, 3, 3, 3, true, true},    // ConvNeXt's block, 16-byte channel groups
      {1, 9, 11, 40, 5, 5, 2, 2, 1, 2, 3, true, false},    // stride 2 along H only (rows still fit)
      {2, 7, 10, 6, 3, 3, 1, 1, 0, 0, 2, false, true},     // 2-channel groups, asymmetric pads
      {1, 8, 9, 7, 7, 3, 1, 0, 3, 2, 1, true, false},      // 1-channel groups, 7x3 (rows for width 3)
      {1, 5, 3, 24, 3, 5, 1, 1, 2, 1, 2, true, true},      // width 5 wider than the image
  };
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  sluice::test::TestStream stream;
  for (std::size_t si = 0; si < shapes.size(); ++si) {
    const Shape4& t = shapes[si];
    const int out_h = (t.h + t.pad_top + t.pad_bottom - t.kernel_h) / t.stride_h + 1;
    const int out_w = t.w + t.pad_left + t.pad_right - t.kernel_w + 1;
    std::vector<float> x(static_cast<std::size_t>(t.n) * t.h * t.w * t.c), w(static_cast<std::size_t>(t.kernel_h) * t.kernel_w * t.c),
        b(static_cast<std::size_t>(t.c)), r(static_cast<std::size_t>(t.n) * out_h * out_w * t.c);
    for (auto* v : {&x, &w, &b, &r})
      for (auto& e : *v) e = dist(rng);
    for (DType type : {DType::f32, DType::f16, DType::bf16}) {
      std::vector<float> xr(x), rr(r);  // what the device holds
      for (auto& e : xr) e = rounded(type, e);
      for (auto& e : rr) e = rounded(type, e);
      std::vector<double> want(r.size());
      double scale = 1e-3;
      for (int n = 0; n < t.n; ++n)
        for (int oh = 0; oh < out_h; ++oh)
          for (int ow = 0; ow < out_w; ++ow)
            for (int c = 0; c < t.c; ++c) {
              double acc = t.bias ? b[static_cast<std::size_t>(c)] : 0.0;
              for (int kh = 0; kh < t.kernel_h; ++kh)
                for (int kw = 0; kw < t.kernel_w; ++kw) {
                  const int ih = oh * t.stride_h - t.pad_top + kh, iw = ow - t.pad_left + kw;
                  if (ih < 0 || ih >= t.h || iw < 0 || iw >= t.w) continue;
                  acc += static_cast<double>(xr[((static_cast<std::size_t>(n) * t.h + ih) * t.w + iw) * t.c + c]) *
                         w[(static_cast<std::size_t>(kh) * t.kernel_w + kw) * t.c + c];
                }
              const std::size_t at = ((static_cast<std::size_t>(n) * out_h + oh) * out_w + ow) * t.c + c;
              if (t.residual) acc += rr[at];
              want[at] = std::max(acc, 0.0);  // Relu
              scale = std::max(scale, std::fabs(want[at]));
            }
      const auto x_bytes = device_bytes(type, x), r_bytes = device_bytes(type, r);
      sluice::test::DeviceBuffer dx(x_bytes.size()), dw(w.size() * 4), db(b.size() * 4), dr(r_bytes.size()),
          dy(r_bytes.size());
      sluice::test::copy_to_device(dx.get(), x_bytes.data(), x_bytes.size());
      sluice::test::copy_to_device(dw.get(), w.data(), w.size() * 4);
      sluice::test::copy_to_device(db.get(), b.data(), b.size() * 4);
      sluice::test::copy_to_device(dr.get(), r_bytes.data(), r_bytes.size());
      for (bool keep_rows : {false, true}) {
        DepthwiseConv2dParams p;
        p.n = t.n;
        p.h = t.h;
        p.w = t.w;
        p.c = t.c;
        p.out_h = out_h;
        p.out_w = out_w;
        p.kernel_h = t.kernel_h;
        p.kernel_w = t.kernel_w;
        p.stride_h = t.stride_h;
        p.pad_top = t.pad_top;
        p.pad_left = t.pad_left;
        p.keep_rows = keep_rows;
        CUDA_CHECK(cudaMemsetAsync(dy.get(), 0xff, r_bytes.size(), stream.get()));  // NaN where nothing is written
        depthwise_conv2d(type, p, dy.get(), dx.get(), static_cast<const float*>(dw.get()),
                         t.bias ? static_cast<const float*>(db.get()) : nullptr, t.residual ? dr.get() : nullptr,
                         ActivationParams{ActivationKind::relu, 0.f, 0.f}, stream.get());
        CUDA_CHECK(cudaStreamSynchronize(stream.get()));
        std::vector<unsigned char> got_bytes(r_bytes.size());
        CUDA_CHECK(cudaMemcpy(got_bytes.data(), dy.get(), got_bytes.size(), cudaMemcpyDeviceToHost));
        const std::vector<float> got = host_floats(type, got_bytes);
        double diff = 0;
        for (std::size_t i = 0; i < got.size(); ++i)
          diff = std::isnan(got[i]) ? INFINITY : std::max(diff, std::fabs(got[i] - want[i]));
        const double bound = type == DType::f32 ? 1e-5 : type == DType::f16 ? 1e-3 : 8e-3;
        INFO("shape " << si << " (" << t.c << " channels, " << t.kernel_h << "x" << t.kernel_w << ") at "
                      << to_string(type) << (keep_rows ? ", rows in registers" : ", loads per tap")
                      << (keep_rows && !depthwise_keeps_rows(t.kernel_w, 1, 1) ? " (not eligible: per tap)" : ""));
        CHECK(diff / scale <= bound);
      }
    }
  }
}
