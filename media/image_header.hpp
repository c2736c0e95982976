#pragma once
// The size an image file declares in its header, read before anything decodes it. A few megabytes of PNG can
// declare 30000x30000 pixels, which imgcodecs allocates in full (2.7 GB as BGR, 8 GB at 16-bit RGBA) before
// it can notice anything; knowing the size first lets a reader refuse such a file at the cost of a header.
// Hostile input: never reads outside `bytes`, never throws.
#include <cstdint>
#include <optional>
#include <string_view>

namespace sluice {

struct ImageHeader {
  const char* format = "";  // "PNG", "JPEG", "BMP", "TIFF", "WebP", "PNM"
  std::int64_t width = 0, height = 0;
};

// The format and declared size of a PNG, JPEG, BMP, TIFF (its first image), WebP or PNM (PBM, PGM, PPM, PAM)
// file, the formats of the image extensions sluice reads; none when the bytes start as none of them, or end
// before the size.
std::optional<ImageHeader> read_image_header(std::string_view bytes) noexcept;

}  // namespace sluice
