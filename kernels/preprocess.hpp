#pragma once
// Preprocess: one pass from a batch of source images to a model input tensor.
// Bilinear resize (half-pixel centres, like cv::resize INTER_LINEAR and torch interpolate
// align_corners=False), colour conversion, (x/255 - mean)/std normalisation, NCHW or NHWC, f32 or f16.
// The GPU launcher lives in preprocess.cuh, the CPU twin in preprocess_cpu.hpp; both take these params.
#include <cstdint>

#include "runtime/format.hpp"

namespace sluice::kernels {

enum class ChannelOrder : std::uint8_t { rgb, bgr, gray };
enum class YuvMatrix : std::uint8_t { bt601, bt709 };

struct PreprocessParams {
  int batch = 1;
  // Source: `batch` images of in_format, tightly packed (no row padding), one after another.
  PixelFormat in_format = PixelFormat::bgr8;
  int in_width = 0, in_height = 0;
  // YUV sources (nv12, i420): matrix and range (full: Y 0..255; limited: Y 16..235, UV 16..240).
  YuvMatrix yuv_matrix = YuvMatrix::bt601;
  bool yuv_full_range = false;
  // Destination: `batch` tensors of out_channels x out_height x out_width, one after another.
  ChannelOrder out_order = ChannelOrder::rgb;  // gray -> 1 channel, else 3
  int out_width = 0, out_height = 0;
  Layout layout = Layout::nchw;
  DType dtype = DType::f32;  // f32 or f16
  float mean[3] = {0.f, 0.f, 0.f};  // in units of x/255, per output channel
  float std[3] = {1.f, 1.f, 1.f};

  int out_channels() const noexcept { return out_order == ChannelOrder::gray ? 1 : 3; }
};

}  // namespace sluice::kernels
