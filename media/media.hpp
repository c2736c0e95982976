#pragma once
// The media library: FFmpeg's libavformat/libavcodec/libswscale (video files, streams) and OpenCV
// videoio/imgcodecs (images, image sequences, cameras, drawing) behind sluice's reader and stage registries.
// Executables that link it call register_media() once at start; GPU-host builds leave the library out.
namespace sluice {

// Registers the readers for files, images, image sequences, cameras and network streams, and the
// annotate sink stage. Idempotent.
void register_media();

}  // namespace sluice
