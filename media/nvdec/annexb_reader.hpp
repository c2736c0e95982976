#pragma once
// The reader for Annex-B elementary streams (.h264 .264 .h265 .hevc .265), registered in every build: it
// decodes on NVDEC when the GPU and the codec allow (ReaderOptions::decoder auto|gpu; media/nvdec/nvdec_reader.hpp),
// else it leaves the file to the file kind's reader (libavcodec, media/video.hpp) or, without one, fails the
// input with "NVDEC unavailable: <why>".
#include "runtime/frame_reader.hpp"

namespace sluice {

void register_annexb_reader(ReaderRegistry& registry = ReaderRegistry::global());

}  // namespace sluice
