// libFuzzer harness: the header reader that sizes an image before imgcodecs decodes it (media/image_header) on
// arbitrary bytes. Checked: it never reads outside the data (ASan), never throws, and a size it gives is not
// negative (the reader compares it with its pixel limit).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "media/image_header.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto header = sluice::read_image_header(std::string_view(reinterpret_cast<const char*>(data), size));
  if (header && (header->width < 0 || header->height < 0)) std::abort();
  return 0;
}
