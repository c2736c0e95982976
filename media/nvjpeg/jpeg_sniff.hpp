#pragma once
// A look at a JPEG file's marker structure before it goes to the GPU, without decoding it: the frame header
// (size, components, coding) and whether the file is whole. It walks the segments (each length checked against
// the end of the data) to the scans and through their entropy-coded data to the end-of-image marker, so a
// truncated file is told apart before nvJPEG, which may decode one without complaint, sees it. Hostile input:
// never reads outside `data`, never throws.
#include <cstddef>
#include <cstdint>
#include <string>

namespace sluice {

struct JpegHeader {
  int width = 0, height = 0;
  int components = 0;
  bool progressive = false;
  // The EXIF orientation (1..8, TIFF tag 0x0112 of an APP1 "Exif" segment's first IFD): how the stored image
  // is turned to stand upright; 1 when there is none or it is unreadable (as OpenCV treats it).
  int orientation = 1;
  // Empty when the file looks like a whole JPEG of a kind nvJPEG decodes (8-bit Huffman baseline, extended or
  // progressive, 1 or 3 components); else why not, e.g. "not a JPEG (no start-of-image marker)",
  // "truncated: the file ends inside its image data (no end-of-image marker)".
  std::string problem;
};

JpegHeader sniff_jpeg(const std::uint8_t* data, std::size_t size) noexcept;

}  // namespace sluice
