#include "media/media.hpp"

#include <cstdlib>
#include <mutex>

#include "media/annotate_sink.hpp"
#include "media/opencv_reader.hpp"
#include "media/video.hpp"
#include "runtime/frame_reader.hpp"

namespace sluice {

void register_media() {
  static std::once_flag once;
  std::call_once(once, [] {
    // A V4L2 camera that stops sending blocks each read for this many seconds (OpenCV's default is 10; it
    // reads the variable once, at the first capture). An explicit setting in the environment wins.
    ::setenv("OPENCV_VIDEOIO_V4L_SELECT_TIMEOUT", "5", 0);

    // Video files and streams: the FFmpeg part (media/video.hpp: NVDEC or libavcodec); images, image sequences
    // and V4L2 cameras: OpenCV.
    register_video_readers();
    auto& readers = ReaderRegistry::global();
    readers.add(InputKind::image, open_image_reader);
    readers.add(InputKind::image_sequence, open_image_sequence_reader);
    readers.add(InputKind::camera, open_camera_reader);

    register_annotate_stage();  // the annotate sink (media/annotate_sink.cpp)
  });
}

}  // namespace sluice
