#pragma once
// The media library: FFmpeg's libavformat/libavcodec/libswscale (video files, streams: media/video.cpp, in every
// build) and OpenCV videoio/imgcodecs (images, image sequences, cameras, drawing: media/media.cpp,
// media/annotate_sink.cpp) behind sluice's reader and stage registries, where each part registers itself.
// GPU-host builds leave the OpenCV part out.
#include <string_view>

namespace sluice {

// The stage kinds the OpenCV part adds. Every build has this header, so one built without it can tell a
// pipeline that names one of them what it lacks instead of calling the kind unknown.
inline constexpr std::string_view kMediaStageKinds[] = {"annotate"};

}  // namespace sluice
