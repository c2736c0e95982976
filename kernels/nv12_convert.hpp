#pragma once
// NV12/P016 -> a pipeline frame: the conversion of a decoded video surface (NVDEC's output) into one frame of
// the pipeline's layout (bgr8, rgb8, gray8, nv12, i420) at the pipeline's size. The GPU launcher lives in
// nv12_convert.cuh, the CPU twin in nv12_convert_cpu.hpp; both take these params and give identical bytes:
//  - resize: bilinear with half-pixel centres, each plane at its own resolution (chroma is a (w+1)/2 x
//    (h+1)/2 plane), in 8-bit fixed point (weights in 1/256), so CPU and GPU agree exactly;
//  - 16-bit samples (P016: 10/12-bit video in the high bits) are taken by their high byte;
//  - colour: BT.601 limited range, the integer form (R = (298(Y-16) + 409(V-128) + 128) >> 8, ...), like the
//    pipeline's nv12/i420 formats; gray8 is full-range luma ((298(Y-16) + 128) >> 8);
//  - geometry: the frame turned upright (quarter turns), a part of it (crop) scaled into a part of the output
//    (letterbox), black around it: what the CPU decoder's fit and rotation do (media/frame_fit.hpp gives the
//    rects). Turning reindexes samples, so a turned frame gives the bytes of the unturned one rotated first.
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
  // Clockwise quarter turns (0..3) that put the stored frame upright; the upright frame is in_height x in_width
  // for odd turns.
  int quarter_turns = 0;
  // The part of the upright frame shown (src_w 0: all of it) and where it goes in the output (dst_w 0: all of
  // it); outside dst the output is black (0; luma 16 and chroma 128 for nv12/i420). For nv12/i420 output dst's
  // position and size are even, and src's too (whole chroma samples).
  int src_x = 0, src_y = 0, src_w = 0, src_h = 0;
  int dst_x = 0, dst_y = 0, dst_w = 0, dst_h = 0;
};

// The rects with their defaults filled in (src: the whole upright frame, dst: the whole output).
Nv12ConvertParams with_whole_rects(Nv12ConvertParams p) noexcept;

// Throws std::invalid_argument for sizes < 1, a pitch shorter than a row, a sample size other than 1 or 2,
// odd output sizes for nv12/i420, turns outside 0..3, and rects outside the upright frame or the output (or odd
// ones for nv12/i420).
void validate(const Nv12ConvertParams& p);

}  // namespace sluice::kernels
