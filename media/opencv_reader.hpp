#pragma once
// Frame readers over OpenCV videoio/imgcodecs: single images (imgcodecs), image sequences (CAP_IMAGES) and V4L2
// cameras (video files and network streams: media/libav_reader.hpp). register_media() registers one factory
// per input kind; each factory opens its input or throws InputError with the reason, prefixed by the quoted
// URI ("'shots/a.png': no such file").
//
// read() never throws: a frame that cannot be decoded or converted (also a target the converter refuses: no
// memory, a size <= 0, odd sizes for nv12/i420) is ReadStatus::error with the reason in `why`.
//
// Every reader writes into the caller's FrameTarget: placed as ReaderOptions::fit says (stretched by default;
// letterboxed on black, or centre-cropped), scaled (INTER_AREA when shrinking both axes, INTER_LINEAR
// otherwise) and converted to its pixel format (bgr8, rgb8, gray8 = full range 0.299/0.587/0.114 luma,
// nv12/i420 = BT.601 limited range with chroma from each 2x2 block's top-left pixel, the same as testsrc).
// Buffers are kept across frames: nothing is allocated per frame in steady state.
#include <cstdint>
#include <memory>
#include <string>

#include <opencv2/core.hpp>

#include "runtime/frame_reader.hpp"

namespace sluice {

std::unique_ptr<FrameReader> open_image_reader(const std::string& uri, const ReaderOptions& options);
std::unique_ptr<FrameReader> open_image_sequence_reader(const std::string& uri, const ReaderOptions& options);
std::unique_ptr<FrameReader> open_camera_reader(const std::string& uri, const ReaderOptions& options);

// The V4L2 device number of a camera URI (/dev/video2, v4l2:2, v4l2:/dev/video2, or a /dev/v4l/by-id|by-path
// link resolved to its /dev/videoN); -1 when it names none.
int camera_index(const std::string& uri);

// Places (fit), scales and converts decoded frames into FrameTargets, keeping its scratch buffers between calls.
class FrameConverter {
 public:
  // `frame`: BGR order, 8- or 16-bit (or float 0..1), 1, 3 or 4 channels. Throws std::invalid_argument for a
  // target without data, with a size <= 0, or odd sizes for nv12/i420.
  void convert(const cv::Mat& frame, const FrameTarget& target, Fit fit = Fit::stretch);

 private:
  const cv::Mat& to_bgr8(const cv::Mat& frame);
  const cv::Mat& fitted(const cv::Mat& bgr, cv::Size size, Fit fit, int align);
  cv::Mat depth8_, bgr_, resized_, i420_, shown_, canvas_;
};

}  // namespace sluice
