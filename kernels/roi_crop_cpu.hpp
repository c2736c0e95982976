#pragma once
// CPU twin of the ROI crop kernel: the oracle for the GPU kernel and the CPU execution path.
#include <cstdint>

#include "kernels/roi_crop.hpp"

namespace sluice::kernels {

// `p` describes the source images (in_format, in_width, in_height) and the output of every ROI (size,
// letterbox, pad, order, layout, dtype, mean, std) as for preprocess; p.batch is the number of output slots and
// the crop fields must be 0 (each ROI brings its own). Throws std::invalid_argument naming the field.
void validate_roi_crop(const PreprocessParams& p, int images);

// images: `images` source images back to back (as preprocess_cpu's src). rois: `count` rects (count <= p.batch).
// dst: `count` output tensors back to back; a rect that roi_rect_usable refuses gives padding only.
void roi_crop_cpu(const PreprocessParams& p, const std::uint8_t* images, int images_count, const RoiRect* rois,
                  int count, void* dst);

}  // namespace sluice::kernels
