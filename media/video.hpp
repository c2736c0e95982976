#pragma once
// The FFmpeg part of the media library, in every build (GPU-host included): video files and network streams
// through the shared demux layer, decoded on NVDEC where the codec and the GPU allow, else by libavcodec.
namespace sluice {

// Registers the readers for video files (NVDEC first for decoder: auto|gpu, libavcodec otherwise, the reason
// for the CPU logged once) and network streams (libavcodec). Idempotent.
void register_video_readers();

}  // namespace sluice
