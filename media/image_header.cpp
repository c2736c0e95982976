#include "media/image_header.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>
#include <utility>

namespace sluice {
namespace {

// Bytes `at`..`at + n` of `b`, when they are all there.
bool has(std::string_view b, std::size_t at, std::size_t n) { return at <= b.size() && n <= b.size() - at; }

std::uint64_t byte(std::string_view b, std::size_t i) { return static_cast<unsigned char>(b[i]); }

// An unsigned integer of `n` bytes at `at` (the caller checked has()), little or big endian.
std::uint64_t uint_at(std::string_view b, std::size_t at, std::size_t n, bool little) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v = (v << 8) | byte(b, little ? at + n - 1 - i : at + i);
  return v;
}

std::optional<ImageHeader> sized(const char* format, std::int64_t width, std::int64_t height) {
  return ImageHeader{format, width, height};
}

std::optional<ImageHeader> png(std::string_view b) {
  if (!has(b, 0, 24) || b.compare(12, 4, "IHDR") != 0) return std::nullopt;
  return sized("PNG", static_cast<std::int64_t>(uint_at(b, 16, 4, false)), static_cast<std::int64_t>(uint_at(b, 20, 4, false)));
}

// The first frame header (SOF0..SOF15 but DHT, JPG and DAC, which share the range), walking the segments from
// the start; none past the first scan.
std::optional<ImageHeader> jpeg(std::string_view b) {
  std::size_t pos = 2;
  while (has(b, pos, 2)) {
    if (byte(b, pos) != 0xFF) return std::nullopt;
    const std::uint64_t marker = byte(b, pos + 1);
    if (marker == 0xFF) {  // a fill byte before the marker
      ++pos;
      continue;
    }
    pos += 2;
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) continue;  // markers without a segment
    if (marker == 0xD9 || marker == 0xDA || !has(b, pos, 2)) return std::nullopt;
    const std::uint64_t length = uint_at(b, pos, 2, false);
    if (length < 2) return std::nullopt;
    if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC) {
      if (!has(b, pos, 7)) return std::nullopt;  // length, precision, height, width
      return sized("JPEG", static_cast<std::int64_t>(uint_at(b, pos + 5, 2, false)),
                   static_cast<std::int64_t>(uint_at(b, pos + 3, 2, false)));
    }
    pos += length;
  }
  return std::nullopt;
}

std::optional<ImageHeader> bmp(std::string_view b) {
  if (!has(b, 14, 4)) return std::nullopt;
  if (uint_at(b, 14, 4, true) == 12) {  // OS/2 BITMAPCOREHEADER: 16-bit sizes
    if (!has(b, 18, 4)) return std::nullopt;
    return sized("BMP", static_cast<std::int64_t>(uint_at(b, 18, 2, true)), static_cast<std::int64_t>(uint_at(b, 20, 2, true)));
  }
  if (!has(b, 18, 8)) return std::nullopt;
  const auto width = static_cast<std::int32_t>(uint_at(b, 18, 4, true));
  const auto height = static_cast<std::int32_t>(uint_at(b, 22, 4, true));  // negative: stored top-down
  return sized("BMP", std::abs(static_cast<std::int64_t>(width)), std::abs(static_cast<std::int64_t>(height)));
}

// ImageWidth (256) and ImageLength (257) of the first directory, classic TIFF or BigTIFF.
std::optional<ImageHeader> tiff(std::string_view b) {
  const bool little = b[0] == 'I';
  if (!has(b, 0, 8)) return std::nullopt;
  const std::uint64_t version = uint_at(b, 2, 2, little);
  const bool big = version == 43;
  if (version != 42 && !big) return std::nullopt;
  const std::size_t offset_bytes = big ? 8 : 4, count_bytes = big ? 8 : 2, entry_bytes = big ? 20 : 12;
  const std::size_t first = big ? 8 : 4;
  if (!has(b, first, offset_bytes)) return std::nullopt;
  const std::uint64_t ifd = uint_at(b, first, offset_bytes, little);
  if (ifd > b.size() || !has(b, static_cast<std::size_t>(ifd), count_bytes)) return std::nullopt;
  const std::uint64_t count = uint_at(b, static_cast<std::size_t>(ifd), count_bytes, little);
  std::int64_t width = -1, height = -1;
  for (std::uint64_t i = 0; i < count && (width < 0 || height < 0); ++i) {
    const std::size_t at = static_cast<std::size_t>(ifd) + count_bytes + static_cast<std::size_t>(i) * entry_bytes;
    if (i > b.size() / entry_bytes || !has(b, at, entry_bytes)) return std::nullopt;
    const std::uint64_t tag = uint_at(b, at, 2, little), type = uint_at(b, at + 2, 2, little);
    if (tag != 256 && tag != 257) continue;
    const std::size_t value = at + 4 + (big ? 8 : 4);
    std::int64_t v;
    if (type == 3) v = static_cast<std::int64_t>(uint_at(b, value, 2, little));       // SHORT
    else if (type == 4) v = static_cast<std::int64_t>(uint_at(b, value, 4, little));  // LONG
    else if (type == 16 && big) v = static_cast<std::int64_t>(uint_at(b, value, 8, little) >> 1);  // LONG8, halved: no sign
    else return std::nullopt;
    (tag == 256 ? width : height) = v;
  }
  if (width < 0 || height < 0) return std::nullopt;
  return sized("TIFF", width, height);
}

std::optional<ImageHeader> webp(std::string_view b) {
  if (!has(b, 12, 8) || b.compare(8, 4, "WEBP") != 0) return std::nullopt;
  const std::string_view chunk = b.substr(12, 4);
  if (chunk == "VP8 ") {  // a frame tag (3 bytes), the start code 9d 01 2a, then 14-bit sizes
    if (!has(b, 20, 10) || byte(b, 23) != 0x9D || byte(b, 24) != 0x01 || byte(b, 25) != 0x2A) return std::nullopt;
    return sized("WebP", static_cast<std::int64_t>(uint_at(b, 26, 2, true) & 0x3FFF),
                 static_cast<std::int64_t>(uint_at(b, 28, 2, true) & 0x3FFF));
  }
  if (chunk == "VP8L") {  // the signature 0x2f, then width - 1 and height - 1 in 14 bits each
    if (!has(b, 20, 5) || byte(b, 20) != 0x2F) return std::nullopt;
    const std::uint64_t bits = uint_at(b, 21, 4, true);
    return sized("WebP", static_cast<std::int64_t>((bits & 0x3FFF) + 1), static_cast<std::int64_t>(((bits >> 14) & 0x3FFF) + 1));
  }
  if (chunk == "VP8X") {  // flags (4 bytes), then the canvas's width - 1 and height - 1 in 24 bits each
    if (!has(b, 20, 10)) return std::nullopt;
    return sized("WebP", static_cast<std::int64_t>(uint_at(b, 24, 3, true) + 1), static_cast<std::int64_t>(uint_at(b, 27, 3, true) + 1));
  }
  return std::nullopt;
}

// The next number of a P1..P6 header (whitespace and # comments between tokens), or -1.
std::int64_t pnm_number(std::string_view b, std::size_t& pos) {
  while (pos < b.size()) {
    if (b[pos] == '#') {
      while (pos < b.size() && b[pos] != '\n' && b[pos] != '\r') ++pos;
    } else if (std::isspace(static_cast<unsigned char>(b[pos]))) {
      ++pos;
    } else {
      break;
    }
  }
  std::int64_t v = -1;
  while (pos < b.size() && std::isdigit(static_cast<unsigned char>(b[pos]))) {
    if (v > (std::int64_t{1} << 40)) return -1;  // no image is that wide
    v = (v < 0 ? 0 : v * 10) + (b[pos++] - '0');
  }
  return v;
}

std::optional<ImageHeader> pnm(std::string_view b) {
  if (b[1] == '7') {  // PAM: "WIDTH n" and "HEIGHT n" lines before "ENDHDR"
    std::int64_t width = -1, height = -1;
    std::size_t pos = 2;
    while (pos < b.size()) {
      const std::size_t end = std::min(b.find('\n', pos), b.size());
      const std::string_view line = b.substr(pos, end - pos);
      if (line.rfind("ENDHDR", 0) == 0) break;
      for (auto [key, out] : {std::pair{std::string_view("WIDTH"), &width}, std::pair{std::string_view("HEIGHT"), &height}}) {
        if (line.rfind(key, 0) != 0) continue;
        std::size_t at = key.size();
        *out = pnm_number(line, at);
      }
      pos = end + 1;
    }
    if (width < 0 || height < 0) return std::nullopt;
    return sized("PNM", width, height);
  }
  std::size_t pos = 2;
  const std::int64_t width = pnm_number(b, pos), height = pnm_number(b, pos);
  if (width < 0 || height < 0) return std::nullopt;
  return sized("PNM", width, height);
}

}  // namespace

std::optional<ImageHeader> read_image_header(std::string_view b) noexcept {
  if (b.size() >= 8 && b.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0) return png(b);
  if (b.size() >= 3 && byte(b, 0) == 0xFF && byte(b, 1) == 0xD8 && byte(b, 2) == 0xFF) return jpeg(b);
  if (b.size() >= 2 && b.compare(0, 2, "BM") == 0) return bmp(b);
  if (b.size() >= 4 && (b.compare(0, 2, "II") == 0 || b.compare(0, 2, "MM") == 0)) return tiff(b);
  if (b.size() >= 4 && b.compare(0, 4, "RIFF") == 0) return webp(b);
  if (b.size() >= 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '7') return pnm(b);
  return std::nullopt;
}

}  // namespace sluice
