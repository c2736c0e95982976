// The OpenCV part of the media library registers its readers here: images, image sequences and V4L2 cameras
// (video files and streams: media/video.cpp; the annotate sink registers itself in media/annotate_sink.cpp).
#include <cstdlib>

#include "media/opencv_reader.hpp"
#include "runtime/frame_reader.hpp"

namespace sluice {
namespace {

void register_opencv_readers(ReaderRegistry& readers) {
  // A V4L2 camera that stops sending blocks each read for this many seconds (OpenCV's default is 10; it reads
  // the variable once, at the first capture). An explicit setting in the environment wins.
  ::setenv("OPENCV_VIDEOIO_V4L_SELECT_TIMEOUT", "5", 0);
  readers.add(InputKind::image, open_image_reader);
  readers.add(InputKind::image_sequence, open_image_sequence_reader);
  readers.add(InputKind::camera, open_camera_reader);
}
SLUICE_REGISTER_READERS(register_opencv_readers);

}  // namespace
}  // namespace sluice
