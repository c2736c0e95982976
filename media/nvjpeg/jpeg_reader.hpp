#pragma once
// The reader for JPEG images (.jpg .jpeg), registered in every build: it decodes on the GPU with nvJPEG when
// the library and a GPU are there (ReaderOptions::decoder auto|gpu), one image -> one frame, written straight
// into device frame slots where the pipeline's batches live on the GPU. Otherwise (no nvJPEG, decoder: cpu,
// fit: letterbox|crop, a file nvJPEG cannot decode: not a JPEG, truncated, CMYK, 12-bit, lossless) it leaves the
// image to the CPU image reader (the media library's OpenCV) with the reason, or, without one or with
// decoder: gpu, fails the input with it.
#include <vector>

#include "runtime/frame_reader.hpp"

namespace sluice {

// The largest JPEG file read (the whole file is read before decoding).
inline constexpr std::size_t kMaxJpegFileBytes = std::size_t{64} << 20;

std::vector<std::string> jpeg_extensions();  // ".jpg", ".jpeg"
void register_jpeg_reader(ReaderRegistry& registry = ReaderRegistry::global());

}  // namespace sluice
