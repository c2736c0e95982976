// The ROI crop kernel against its CPU twin on random images and random boxes (fixed seeds), hostile boxes
// included: every slot up to the count matches within the preprocess bounds (tests/gpu/image_tensor_compare.hpp),
// slots past a count held in device memory are left untouched, and nothing outside the tensor is written.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/roi_crop.cuh"
#include "kernels/roi_crop_cpu.hpp"
#include "runtime/cuda_check.hpp"
#include "tests/gpu/device_memory.hpp"
#include "tests/gpu/image_tensor_compare.hpp"

using sluice::DType;
using sluice::Layout;
using sluice::PixelFormat;
using namespace sluice::kernels;
using sluice::test::DeviceBuffer;
using sluice::test::TestStream;

namespace {

// Boxes as a detector gives them (source pixels, some hostile) turned into rects, plus rects no box gives.
std::vector<RoiRect> random_rois(int count, int images, int w, int h, bool yuv, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.2f, 1.2f);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<RoiRect> rois;
  for (int i = 0; i < count; ++i) {
    const int image = static_cast<int>(rng() % static_cast<std::uint32_t>(images));
    float x1 = u(rng) * w, y1 = u(rng) * h, x2 = x1 + u(rng) * w * 0.5f, y2 = y1 + u(rng) * h * 0.5f;
    switch (i % 11) {
      case 3: x1 = nan; break;
      case 5: x2 = x1 - 3.f; break;  // inverted
      case 7: y2 = inf; break;
      case 9: x1 = x2 = std::floor(x1); break;  // zero width: one pixel (two for yuv)
      default: break;
    }
    RoiRect r = roi_rect_from_box(image, x1, y1, x2, y2, w, h, yuv);
    if (i % 13 == 4) r.image = images;         // no such image
    if (i % 17 == 6) r.x = w - 1, r.width = 4;  // past the right edge
    if (yuv && i % 19 == 8) r.x |= 1;          // odd origin for a subsampled format
    rois.push_back(r);
  }
  return rois;
}

}  // namespace

TEST_CASE("roi_crop_gpu matches the CPU twin on random images and boxes", "[gpu][roi_crop]") {
  struct Case {
    PixelFormat format;
    int w, h, out_w, out_h;
    bool letterbox;
    Layout layout;
    DType dtype;
    ChannelOrder order;
  };
  const Case cases[] = {
      {PixelFormat::bgr8, 640, 360, 64, 64, false, Layout::nchw, DType::f32, ChannelOrder::rgb},
      {PixelFormat::bgr8, 640, 360, 224, 224, true, Layout::nchw, DType::f16, ChannelOrder::rgb},
      {PixelFormat::rgb8, 101, 77, 33, 17, true, Layout::nhwc, DType::bf16, ChannelOrder::bgr},
      {PixelFormat::gray8, 320, 240, 48, 96, false, Layout::nchw, DType::f16, ChannelOrder::gray},
      {PixelFormat::nv12, 320, 180, 112, 112, true, Layout::nhwc, DType::f32, ChannelOrder::rgb},
      {PixelFormat::i420, 256, 144, 1100, 3, false, Layout::nchw, DType::f16, ChannelOrder::rgb},  // multi-tile rows
  };
  TestStream stream;
  std::uint32_t seed = 77;
  for (const Case& c : cases) {
    const bool yuv = c.format == PixelFormat::nv12 || c.format == PixelFormat::i420;
    const int images = 3, capacity = 40, count = 31;  // slots past the count must stay untouched
    PreprocessParams p;
    p.batch = capacity;
    p.in_format = c.format;
    p.in_width = c.w;
    p.in_height = c.h;
    p.out_width = c.out_w;
    p.out_height = c.out_h;
    p.letterbox = c.letterbox;
    p.pad_value = 114.f;
    p.layout = c.layout;
    p.dtype = c.dtype;
    p.out_order = c.order;
    const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
    std::memcpy(p.mean, mean, sizeof mean);
    std::memcpy(p.std, sd, sizeof sd);
    INFO(sluice::to_string(c.format) << " " << c.w << "x" << c.h << " -> " << c.out_w << "x" << c.out_h
                                     << (c.letterbox ? " letterbox " : " ") << sluice::to_string(c.dtype));

    const std::size_t in_bytes = sluice::image_bytes(c.format, c.w, c.h) * images;
    std::vector<std::uint8_t> src(in_bytes);
    std::mt19937 rng(seed++);
    for (auto& b : src) b = static_cast<std::uint8_t>(rng() >> 24);
    std::vector<RoiRect> rois = random_rois(capacity, images, c.w, c.h, yuv, seed++);

    DeviceBuffer src_dev(in_bytes), rois_dev(rois.size() * sizeof(RoiRect)), count_dev(sizeof(int));
    sluice::test::copy_to_device(src_dev.get(), src.data(), in_bytes);
    sluice::test::copy_to_device(rois_dev.get(), rois.data(), rois.size() * sizeof(RoiRect));
    sluice::test::copy_to_device(count_dev.get(), &count, sizeof(int));

    const std::size_t esize = sluice::dtype_bytes(c.dtype);
    const std::size_t per_roi = static_cast<std::size_t>(c.out_w) * c.out_h * p.out_channels();
    const std::size_t total = per_roi * capacity + 16;  // 16 guard elements
    DeviceBuffer dst_dev(total * esize);
    CUDA_CHECK(cudaMemsetAsync(dst_dev.get(), 0xff, total * esize, stream.get()));
    roi_crop_gpu(p, static_cast<const std::uint8_t*>(src_dev.get()), images,
                 static_cast<const RoiRect*>(rois_dev.get()), static_cast<const int*>(count_dev.get()), dst_dev.get(),
                 stream.get());
    CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    std::vector<std::uint8_t> gpu(total * esize);
    CUDA_CHECK(cudaMemcpy(gpu.data(), dst_dev.get(), gpu.size(), cudaMemcpyDeviceToHost));

    std::vector<std::uint8_t> cpu(per_roi * count * esize);
    roi_crop_cpu(p, src.data(), images, rois.data(), count, cpu.data());
    sluice::test::check_image_tensor(c.dtype, gpu.data(), cpu.data(), per_roi * count);
    std::size_t touched = 0;
    for (std::size_t b = per_roi * count * esize; b < gpu.size(); ++b) touched += gpu[b] != 0xff;
    INFO("bytes written past the count's slots: " << touched);
    CHECK(touched == 0);
  }
}

TEST_CASE("roi_crop_gpu without a count fills every slot", "[gpu][roi_crop]") {
  PreprocessParams p;
  p.batch = 5;
  p.in_format = PixelFormat::bgr8;
  p.in_width = 96;
  p.in_height = 64;
  p.out_width = 24;
  p.out_height = 24;
  p.dtype = DType::f32;
  std::vector<std::uint8_t> src(sluice::image_bytes(p.in_format, 96, 64) * 2);
  std::mt19937 rng(5);
  for (auto& b : src) b = static_cast<std::uint8_t>(rng() >> 24);
  const std::vector<RoiRect> rois = {{0, 0, 0, 96, 64}, {1, 10, 5, 20, 30}, {1, 95, 63, 1, 1}, {0, 2, 2, 0, 4},
                                     {-1, 0, 0, 8, 8}};
  TestStream stream;
  DeviceBuffer src_dev(src.size()), rois_dev(rois.size() * sizeof(RoiRect));
  sluice::test::copy_to_device(src_dev.get(), src.data(), src.size());
  sluice::test::copy_to_device(rois_dev.get(), rois.data(), rois.size() * sizeof(RoiRect));
  const std::size_t n = 5u * 3 * 24 * 24;
  DeviceBuffer dst_dev(n * 4);
  CUDA_CHECK(cudaMemsetAsync(dst_dev.get(), 0xff, n * 4, stream.get()));
  roi_crop_gpu(p, static_cast<const std::uint8_t*>(src_dev.get()), 2, static_cast<const RoiRect*>(rois_dev.get()),
               nullptr, dst_dev.get(), stream.get());
  CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  std::vector<std::uint8_t> gpu(n * 4), cpu(n * 4);
  CUDA_CHECK(cudaMemcpy(gpu.data(), dst_dev.get(), gpu.size(), cudaMemcpyDeviceToHost));
  roi_crop_cpu(p, src.data(), 2, rois.data(), 5, cpu.data());
  sluice::test::check_image_tensor(p.dtype, gpu.data(), cpu.data(), n);
}
