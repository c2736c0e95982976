#pragma once
// BGR8 -> a pipeline frame: the conversion of a decoded image (nvJPEG's interleaved BGR output) of any size into
// one frame of the pipeline's layout (bgr8, rgb8, gray8, nv12, i420) at the pipeline's size, stretched. The
// GPU launcher lives in bgr_convert.cuh, the CPU twin in bgr_convert_cpu.hpp; both take these params and give
// identical bytes:
//  - orientation: the EXIF orientation is applied first (turns and mirrors, exact);
//  - resize: bilinear with half-pixel centres per channel, in 8-bit fixed point (weights in 1/256, the
//    arithmetic of nv12_convert_math.hpp), so CPU and GPU agree exactly; at the same size it is a copy;
//  - colour, as the CPU image reader (OpenCV's cvtColor, media/opencv_reader.cpp) computes it, in the same
//    integers: gray8 = (9798 R + 19235 G + 3735 B + 16384) >> 15 (full range BT.601 luma); nv12/i420 are BT.601
//    limited range in OpenCV's 20-bit fixed point (Y = (269484 R + 528482 G + 102760 B + (16 << 20) +
//    (1 << 19)) >> 20, ...), each chroma pair taken from the top-left pixel of its 2x2 block.
// So at the image's own size the frame equals the CPU reader's byte for byte (checked against OpenCV 4.6 on
// random images: gray8 and i420 identical); resized, the CPU reader uses OpenCV's INTER_LINEAR when enlarging
// (11-bit weights: within 2 of this on random noise) or INTER_AREA when shrinking (an area average, which
// differs from bilinear sampling by up to the image's local contrast).
// This header is also compiled as C++17 (by nvcc).
#include <cstddef>
#include <cstdint>

#include "runtime/format.hpp"

namespace sluice::kernels {

struct BgrConvertParams {
  // Source: in_width x in_height BGR pixels (3 bytes each), rows `in_pitch` bytes apart.
  int in_width = 0, in_height = 0;
  std::size_t in_pitch = 0;
  // The EXIF orientation (1..8) that turns the stored image upright (as OpenCV's imread does); 5..8 swap the
  // axes. The output is the upright image, stretched.
  int orientation = 1;
  // Destination: one tightly packed frame (image_bytes(out_format, out_width, out_height)).
  PixelFormat out_format = PixelFormat::bgr8;
  int out_width = 0, out_height = 0;
};

// Throws std::invalid_argument for sizes < 1, a pitch shorter than a row, an orientation outside 1..8 and odd
// output sizes for nv12/i420.
void validate(const BgrConvertParams& p);

}  // namespace sluice::kernels
