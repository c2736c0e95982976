// The preprocess kernel against its CPU twin on random inputs (fixed seeds).
//
// Error bounds, after normalisation with std ~0.22 (values span about -2.1..2.7):
//   f32: max |gpu - cpu| <= 1e-4. Both sides compute identical sample positions and weights (exact integer
//        coordinates), so only float rounding/contraction differs: a few ulp of 255, ~1e-6 after normalising.
//   f16: |gpu - cpu| <= 2e-3 or <= 1e-2 * |cpu|. Both round the (nearly equal) f32 value to nearest-even half,
//        so they differ by at most one half ulp (2^-11 relative, 2^-24 absolute near zero).
//   bf16: |gpu - cpu| <= 1e-2 or <= 1e-2 * |cpu|. Same argument with bf16's 8-bit mantissa: at most one bf16 ulp
//        apart (2^-8 = 0.39% relative; 2^-133 absolute near zero), so the bound has 2.5x headroom.
// Crop and letterbox geometry is exact integer maths on both sides, so pad elements must match exactly (the
// same pad value through the same normalisation) and image elements obey the bounds above.
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
#include "tests/gpu/device_memory.hpp"
#include "tests/gpu/image_tensor_compare.hpp"

using sluice::DType;
using sluice::Layout;
using sluice::PixelFormat;
using namespace sluice::kernels;

namespace {

using sluice::test::DeviceBuffer;
using sluice::test::TestStream;

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
  if (p.crop_x || p.crop_y || p.crop_width || p.crop_height)
    s << " crop [" << p.crop_x << ", " << p.crop_y << ", " << p.crop_width << ", " << p.crop_height << "]";
  if (p.letterbox) s << " letterbox pad " << p.pad_value;
  if (p.in_format == PixelFormat::nv12 || p.in_format == PixelFormat::i420)
    s << (p.yuv_matrix == YuvMatrix::bt601 ? " bt601" : " bt709") << (p.yuv_full_range ? " full" : " limited");
  return s.str();
}

// Runs the kernel on `src_dev` (already holding `src`) and the CPU twin on `src`; checks every element.
// dst_offset: the tensor starts that many elements into its allocation (misaligned for the 16-byte stores).
void compare(const PreprocessParams& p, const std::vector<std::uint8_t>& src, const DeviceBuffer& src_dev,
             cudaStream_t stream, std::size_t dst_offset = 0) {
  INFO(describe(p) << (dst_offset ? " dst offset " + std::to_string(dst_offset) : std::string()));
  const std::size_t n = out_elems(p);
  const std::size_t esize = sluice::dtype_bytes(p.dtype);
  const std::size_t total = n + dst_offset + 16;  // 16 guard elements after the tensor
  DeviceBuffer dst_dev(total * esize);
  // 0xff bytes are NaN in f32, f16 and bf16, so an element the kernel fails to write cannot pass, and the
  // guard elements around the tensor must still be 0xff afterwards.
  CUDA_CHECK(cudaMemsetAsync(dst_dev.get(), 0xff, total * esize, stream));
  preprocess_gpu(p, static_cast<const std::uint8_t*>(src_dev.get()),
                 static_cast<std::uint8_t*>(dst_dev.get()) + dst_offset * esize, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));

  std::vector<std::uint8_t> raw(total * esize);
  CUDA_CHECK(cudaMemcpy(raw.data(), dst_dev.get(), total * esize, cudaMemcpyDeviceToHost));
  std::size_t clobbered = 0;
  for (std::size_t b = 0; b < dst_offset * esize; ++b) clobbered += raw[b] != 0xff;
  for (std::size_t b = (dst_offset + n) * esize; b < raw.size(); ++b) clobbered += raw[b] != 0xff;
  INFO("bytes written outside the tensor: " << clobbered);
  CHECK(clobbered == 0);

  const std::uint8_t* g = raw.data() + dst_offset * esize;
  std::vector<std::uint8_t> cpu(n * esize);
  preprocess_cpu(p, src.data(), cpu.data());
  sluice::test::check_image_tensor(p.dtype, g, cpu.data(), n);
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
      sluice::test::copy_to_device(src_dev.get(), src.data(), bytes);

      for (ChannelOrder order : orders)
        for (Layout layout : {Layout::nchw, Layout::nhwc})
          for (DType dtype : {DType::f32, DType::f16, DType::bf16})
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

namespace {

PreprocessParams params_for(PixelFormat f, int in_w, int in_h, int out_w, int out_h, int batch) {
  PreprocessParams p;
  p.batch = batch;
  p.in_format = f;
  p.in_width = in_w;
  p.in_height = in_h;
  p.out_width = out_w;
  p.out_height = out_h;
  const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
  std::memcpy(p.mean, mean, sizeof mean);
  std::memcpy(p.std, sd, sizeof sd);
  return p;
}

// Uploads `batch` random images for p and compares every order x layout x dtype combination.
void compare_all(PreprocessParams p, std::uint32_t seed, TestStream& stream) {
  const std::size_t bytes = sluice::image_bytes(p.in_format, p.in_width, p.in_height) * static_cast<std::size_t>(p.batch);
  const auto src = random_bytes(bytes, seed);
  DeviceBuffer src_dev(bytes);
  sluice::test::copy_to_device(src_dev.get(), src.data(), bytes);
  for (ChannelOrder order : {ChannelOrder::rgb, ChannelOrder::bgr, ChannelOrder::gray})
    for (Layout layout : {Layout::nchw, Layout::nhwc})
      for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
        p.out_order = order;
        p.layout = layout;
        p.dtype = dtype;
        compare(p, src, src_dev, stream.get());
      }
}

constexpr PixelFormat kFormats[] = {PixelFormat::bgr8, PixelFormat::rgb8, PixelFormat::gray8, PixelFormat::nv12,
                                    PixelFormat::i420};

}  // namespace

TEST_CASE("preprocess_gpu matches the CPU twin with crop", "[gpu][preprocess][crop]") {
  struct Case {
    int in_w, in_h, x, y, w, h, out_w, out_h;
  };
  // Even crops (valid for every format): interior, touching the right/bottom edges (0 = to the edge),
  // a tiny crop upscaled, a 1080p centre crop downscaled.
  const Case cases[] = {
      {64, 48, 10, 6, 32, 20, 17, 11},     {64, 48, 20, 8, 0, 0, 31, 29},       {64, 48, 30, 20, 2, 2, 9, 7},
      {1920, 1080, 420, 0, 1080, 1080, 224, 224}, {640, 480, 100, 50, 400, 300, 301, 199},
  };
  TestStream stream;
  std::uint32_t seed = 500;
  for (PixelFormat f : kFormats)
    for (const Case& c : cases) {
      PreprocessParams p = params_for(f, c.in_w, c.in_h, c.out_w, c.out_h, 2);
      p.crop_x = c.x;
      p.crop_y = c.y;
      p.crop_width = c.w;
      p.crop_height = c.h;
      compare_all(p, seed++, stream);
    }
  // Odd crop origins and sizes (packed formats only).
  for (PixelFormat f : {PixelFormat::bgr8, PixelFormat::gray8}) {
    PreprocessParams p = params_for(f, 37, 29, 13, 22, 3);
    p.crop_x = 3;
    p.crop_y = 5;
    p.crop_width = 31;
    p.crop_height = 1;
    compare_all(p, seed++, stream);
  }
}

TEST_CASE("preprocess_gpu matches the CPU twin with letterbox", "[gpu][preprocess][letterbox]") {
  struct Case {
    int in_w, in_h, out_w, out_h;
    bool crop;
  };
  const Case cases[] = {
      {1920, 1080, 640, 640, false},  // 16:9 into a square: bars above and below
      {1080, 1920, 320, 320, false},  // portrait: bars left and right
      {640, 480, 301, 199, false},    // 4:3 into a wider odd box: side bars, odd offset
      {640, 480, 199, 301, false},    // into a taller odd box
      {100, 60, 7, 5, false},         // tiny odd output
      {64, 48, 64, 48, false},        // same aspect: no border
      {38, 30, 333, 211, false},      // upscale into a letterbox
      {1920, 1080, 224, 224, true},   // letterboxed crop: [200, 100, 800, 400] (2:1)
  };
  TestStream stream;
  std::uint32_t seed = 900;
  for (PixelFormat f : kFormats)
    for (const Case& c : cases) {
      PreprocessParams p = params_for(f, c.in_w, c.in_h, c.out_w, c.out_h, 2);
      p.letterbox = true;
      p.pad_value = f == PixelFormat::gray8 ? 0.f : 114.f;
      if (c.crop) {
        p.crop_x = 200;
        p.crop_y = 100;
        p.crop_width = 800;
        p.crop_height = 400;
      }
      compare_all(p, seed++, stream);
    }
}

TEST_CASE("preprocess_gpu vector stores: odd widths, wide rows and misaligned tensors", "[gpu][preprocess]") {
  // Output widths 1..9 and 221..227 cover every width mod 4 and mod 8 (rows start at every alignment, runs
  // have heads and tails); 1100 and 2053 are wider than one tile (single-row tiles of equal width).
  TestStream stream;
  std::uint32_t seed = 1300;
  const int widths[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 221, 222, 223, 225, 226, 227, 1100, 2053};
  for (PixelFormat f : {PixelFormat::bgr8, PixelFormat::nv12, PixelFormat::gray8})
    for (int w : widths) {
      const int h = w > 1000 ? 3 : 13;
      compare_all(params_for(f, 96, 64, w, h, 3), seed++, stream);
    }

  // The tensor itself starting off a 16-byte boundary (e.g. a sub-view of a larger buffer): every run starts
  // misaligned and the unaligned ends go one element at a time; nothing outside the tensor is touched.
  const auto src = random_bytes(sluice::image_bytes(PixelFormat::bgr8, 640, 360) * 2, 77);
  DeviceBuffer src_dev(src.size());
  sluice::test::copy_to_device(src_dev.get(), src.data(), src.size());
  for (std::size_t offset : {1, 3, 5})
    for (Layout layout : {Layout::nchw, Layout::nhwc})
      for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
        PreprocessParams p = params_for(PixelFormat::bgr8, 640, 360, 224, 224, 2);
        p.layout = layout;
        p.dtype = dtype;
        p.letterbox = true;
        compare(p, src, src_dev, stream.get(), offset);
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
  sluice::test::copy_to_device(src_dev.get(), src.data(), bytes);
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
  bad = p;
  bad.crop_x = 6;
  bad.crop_width = 4;
  CHECK_THROWS_WITH(preprocess_gpu(bad, s, dst.get(), stream.get()), Catch::Matchers::Contains("crop"));
  // An f32 tensor must be 4-byte aligned.
  CHECK_THROWS_WITH(preprocess_gpu(p, s, static_cast<std::uint8_t*>(dst.get()) + 2, stream.get()),
                    Catch::Matchers::Contains("aligned"));
}
