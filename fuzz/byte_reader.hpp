#pragma once
// The harnesses' view of their input: bytes one at a time, or four as a raw float (NaN and Inf included); past
// the end, zeros.
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace sluice::fuzz {

struct ByteReader {
  const std::uint8_t* data;
  std::size_t size, at = 0;
  std::uint8_t byte() { return at < size ? data[at++] : 0; }
  float number() {
    const std::uint8_t b[4] = {byte(), byte(), byte(), byte()};
    float f;
    std::memcpy(&f, b, 4);
    return f;
  }
};

}  // namespace sluice::fuzz
