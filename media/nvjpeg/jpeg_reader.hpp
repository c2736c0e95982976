#pragma once
// The GPU reader for JPEG images (.jpg .jpeg), registered in every build: it decodes on the GPU with nvJPEG when
// the library and a GPU are there, one image -> one frame, written straight into device frame slots where the
// pipeline's batches live on the GPU. Otherwise (no nvJPEG, fit: letterbox|crop, a file nvJPEG cannot decode:
// not a JPEG, truncated, CMYK, 12-bit, lossless) it declines with the reason and the CPU image reader (the media
// library's OpenCV) takes the image (ReaderRegistry::open applies the decoder choice).
#include <vector>

#include "runtime/frame_reader.hpp"

namespace sluice {

// The largest JPEG file read (the whole file is read before decoding).
inline constexpr std::size_t kMaxJpegFileBytes = std::size_t{64} << 20;

std::vector<std::string> jpeg_extensions();  // ".jpg", ".jpeg"
void register_jpeg_reader(ReaderRegistry& registry);  // registered with SLUICE_REGISTER_READERS; tests add it to their own registry

}  // namespace sluice
