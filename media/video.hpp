#pragma once
// The FFmpeg part of the media library, in every build (GPU-host included): video files and network streams
// through the shared demux layer, decoded on NVDEC where the codec and the GPU allow, else by libavcodec.
#include <memory>
#include <string>

#include "runtime/frame_reader.hpp"

namespace sluice {

// Registers the readers for video files (NVDEC first for decoder: auto|gpu, libavcodec otherwise, the reason
// for the CPU logged once) and network streams (libavcodec). Idempotent.
void register_video_readers();

// The file kind's reader register_video_readers() adds: NVDEC over the container where it can, else libavcodec
// (decoder: gpu throws InputError with NVDEC's reason instead).
std::unique_ptr<FrameReader> open_video_file(const std::string& uri, const ReaderOptions& options);

}  // namespace sluice
