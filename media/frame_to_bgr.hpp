#pragma once
// A source frame (bgr8, rgb8, gray8, nv12, i420 on the host) converted to BGR at dst's size: nv12/i420 as BT.601
// limited range (OpenCV's YUV2BGR_NV12/I420), scaled with INTER_AREA when shrinking, else INTER_LINEAR. dst must
// already have its size and type CV_8UC3 (it may wrap memory the caller owns: OpenCV writes into it in place).
// Shared by the frame taps (scaled_frame_tap.hpp, thumbnail_tap.hpp).
#include <opencv2/core.hpp>

#include "runtime/frame_reader.hpp"

namespace sluice {

void frame_to_bgr(const FrameTarget& frame, cv::Mat& dst);

}  // namespace sluice
