// libFuzzer harness: the JPEG marker walk that screens files before nvJPEG (media/nvjpeg/jpeg_sniff) on arbitrary
// bytes. Checked: it never reads outside the data (ASan), never throws, and a file it passes has a frame header
// of a size and component count nvJPEG is given.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "media/nvjpeg/jpeg_sniff.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const sluice::JpegHeader h = sluice::sniff_jpeg(data, size);
  if (h.problem.empty() && (h.width < 1 || h.height < 1 || (h.components != 1 && h.components != 3))) std::abort();
  return 0;
}
