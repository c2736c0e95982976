#pragma once
// NV12/P016 -> a pipeline frame: the conversion of a decoded video surface (NVDEC's output) into one frame of
// the pipeline's layout (bgr8, rgb8, gray8, nv12, i420) at the pipeline's size. The GPU launcher lives in
// nv12_convert.cuh, the CPU twin in nv12_convert_cpu.hpp; both take these params and give identical bytes:
//  - resize: bilinear with half-pixel centres, each plane at its own resolution (chroma is a (w+1)/2 x
//    (h+1)/2 plane), in 8-bit fixed point (weights in 1/256), so CPU and GPU agree exactly;
//  - 16-bit samples (P016: 10/12-bit video in the high bits) are taken by their high byte;
//  - colour: BT.601 limited range, the integer form (R = (298(Y-16) + 409(V-128) + 128) >> 8, ...), like the
//    pipeline's nv12/i420 formats; gray8 is full-range luma ((298(Y-16) + 128) >> 8).
// This header is also compiled as C++17 (by nvcc).
#include <cstddef>
#include <cstdint>

#include "runtime/format.hpp"

namespace sluice::kernels {

struct Nv12ConvertParams {
  // Source: a luma plane of in_width x in_height samples, rows `in_pitch` bytes apart, and an interleaved
  // UV plane of ((in_width + 1) / 2) pairs x ((in_height + 1) / 2) rows, also `in_pitch` bytes apart.
  int in_width = 0, in_height = 0;
  std::size_t in_pitch = 0;
  int in_bytes_per_sample = 1;  // 1: NV12, 2: P016
  // Destination: one tightly packed frame (image_bytes(out_format, out_width, out_height)).
  PixelFormat out_format = PixelFormat::bgr8;
  int out_width = 0, out_height = 0;
};

// Throws std::invalid_argument for sizes < 1, a pitch shorter than a row, a sample size other than 1 or 2,
// and odd output sizes for nv12/i420.
void validate(const Nv12ConvertParams& p);

}  // namespace sluice::kernels
