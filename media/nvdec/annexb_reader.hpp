#pragma once
// The GPU reader for Annex-B elementary streams (.h264 .264 .h265 .hevc .265), registered in every build: it
// decodes on NVDEC when the GPU and the codec allow (media/nvdec/nvdec_reader.hpp), else it declines with
// "NVDEC unavailable: <why>" and the file kind's CPU reader (libavcodec, media/video.cpp) takes the file.
#include "runtime/frame_reader.hpp"

namespace sluice {

void register_annexb_reader(ReaderRegistry& registry);  // registered with SLUICE_REGISTER_READERS; tests add it to their own registry

}  // namespace sluice
