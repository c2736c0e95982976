#pragma once
// The media library: FFmpeg's libavformat/libavcodec/libswscale (video files, streams: media/video.hpp, in every
// build) and OpenCV videoio/imgcodecs (images, image sequences, cameras, drawing) behind sluice's reader and
// stage registries. Executables that link it call register_media() once at start; GPU-host builds leave the
// OpenCV part out and call register_video_readers() instead.
#include <string_view>

namespace sluice {

// The stage kinds register_media() adds. Every build has this header, so one built without the media library
// can tell a pipeline that names one of them what it lacks instead of calling the kind unknown.
inline constexpr std::string_view kMediaStageKinds[] = {"annotate"};

// Registers the readers for files, images, image sequences, cameras and network streams (video files and
// streams: register_video_readers()), and the annotate sink stage. Idempotent.
void register_media();

}  // namespace sluice
