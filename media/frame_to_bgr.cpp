#include "media/frame_to_bgr.hpp"

#include <opencv2/imgproc.hpp>

namespace sluice {

void frame_to_bgr(const FrameTarget& frame, cv::Mat& dst) {
  thread_local cv::Mat scratch;  // one per source thread; reallocated only when a size or format changes
  const int w = frame.width, h = frame.height;
  void* data = frame.data;
  const cv::Size size = dst.size();
  const bool same = w == size.width && h == size.height;
  const int interpolation = w >= size.width && h >= size.height ? cv::INTER_AREA : cv::INTER_LINEAR;
  switch (frame.pixel) {
    case PixelFormat::bgr8: {
      const cv::Mat src(h, w, CV_8UC3, data);
      if (same) src.copyTo(dst);
      else cv::resize(src, dst, size, 0, 0, interpolation);
      break;
    }
    case PixelFormat::rgb8:
    case PixelFormat::gray8: {
      // Scale first (fewer pixels to convert); the channel swap or copy commutes with scaling.
      const bool gray = frame.pixel == PixelFormat::gray8;
      const int code = gray ? cv::COLOR_GRAY2BGR : cv::COLOR_RGB2BGR;
      const cv::Mat src(h, w, gray ? CV_8UC1 : CV_8UC3, data);
      if (same) {
        cv::cvtColor(src, dst, code);
      } else {
        cv::resize(src, scratch, size, 0, 0, interpolation);
        cv::cvtColor(scratch, dst, code);
      }
      break;
    }
    case PixelFormat::nv12:
    case PixelFormat::i420: {
      // Both planes stacked: (h * 3/2) rows of w bytes. BT.601 limited range, as OpenCV's YUV420 conversions.
      const cv::Mat src(h * 3 / 2, w, CV_8UC1, data);
      const int code = frame.pixel == PixelFormat::nv12 ? cv::COLOR_YUV2BGR_NV12 : cv::COLOR_YUV2BGR_I420;
      if (same) {
        cv::cvtColor(src, dst, code);
      } else {
        cv::cvtColor(src, scratch, code);
        cv::resize(scratch, dst, size, 0, 0, interpolation);
      }
      break;
    }
  }
}

}  // namespace sluice
