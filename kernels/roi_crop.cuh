#pragma once
// GPU launcher for the ROI crop kernel (see roi_crop.hpp). No CUDA headers here, so any translation unit can
// include it.
#include <cstdint>

#include "kernels/roi_crop.hpp"

struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace sluice::kernels {

// Enqueues one launch on `stream` (non-null). images_device: `images` source images back to back;
// rois_device: p.batch rects; count_device: how many of them are real, read by the kernel on the GPU (so a
// count computed on the GPU needs no host round trip); null means all p.batch. Outputs past the count are not
// written. Throws std::invalid_argument for bad params (validate_roi_crop) and GpuError if the launch fails.
void roi_crop_gpu(const PreprocessParams& p, const std::uint8_t* images_device, int images,
                  const RoiRect* rois_device, const int* count_device, void* dst_device, cudaStream_t stream);

}  // namespace sluice::kernels
