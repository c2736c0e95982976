// libFuzzer harness: the Annex-B sniffer and NAL splitter (media/nvdec/annexb) on arbitrary bytes, read in
// chunks of a size the input picks. Checked: the NAL units, concatenated, are exactly the bytes from the first
// start code on; each starts with a start code; only the splitter's own length error may escape.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "media/nvdec/annexb.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t chunk = 16 + data[0] % 64;  // small chunks: start codes straddle chunk boundaries
  data += 1;
  size -= 1;
  (void)sluice::sniff_codec(data, size);
  std::size_t offset = 0;
  sluice::AnnexBSplitter splitter(
      [&](std::uint8_t* buffer, std::size_t capacity) {
        const std::size_t n = std::min(capacity, size - offset);
        if (n) std::memcpy(buffer, data + offset, n);
        offset += n;
        return n;
      },
      chunk, 4096);
  std::vector<std::uint8_t> nal, joined;
  try {
    while (splitter.next(nal)) {
      if (nal.size() < 3) __builtin_trap();
      const std::size_t skip = nal[0] == 0 && nal[1] == 0 && nal[2] == 0 ? 1 : 0;
      if (nal.size() < skip + 3 || nal[skip] != 0 || nal[skip + 1] != 0 || nal[skip + 2] != 1) __builtin_trap();
      joined.insert(joined.end(), nal.begin(), nal.end());
    }
  } catch (const std::runtime_error&) {
    return 0;  // a NAL unit over the limit
  }
  // Everything from the first start code on, in order, nothing lost or doubled.
  std::size_t first = size;
  for (std::size_t i = 0; i + 3 <= size; ++i)
    if (data[i] == 0 && data[i + 1] == 0 && data[i + 2] == 1) {
      first = i;
      break;
    }
  if (first == size) {
    if (!joined.empty()) __builtin_trap();
    return 0;
  }
  if (joined.size() != size - first || std::memcmp(joined.data(), data + first, joined.size()) != 0) __builtin_trap();
  return 0;
}
