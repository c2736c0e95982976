#pragma once
// The FFmpeg part of the media library, in every build (GPU-host included): video files and network streams
// through the shared demux layer, decoded on NVDEC where the codec and the GPU allow, else by libavcodec.
#include "runtime/frame_reader.hpp"

namespace sluice {

// Adds the readers for video files and network streams: NVDEC over the demuxed packets as the GPU reader,
// libavcodec as the CPU one. Registered with SLUICE_REGISTER_READERS; tests call it on a registry of
// their own.
void register_video_readers(ReaderRegistry& readers);

}  // namespace sluice
