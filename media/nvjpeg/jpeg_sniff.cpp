#include "media/nvjpeg/jpeg_sniff.hpp"

namespace sluice {

namespace {

constexpr std::uint8_t kSOI = 0xD8, kEOI = 0xD9, kSOS = 0xDA, kTEM = 0x01;

bool is_restart(std::uint8_t m) { return m >= 0xD0 && m <= 0xD7; }
// Start-of-frame markers: C0..CF except DHT (C4), JPG (C8) and DAC (CC).
bool is_sof(std::uint8_t m) { return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC; }

std::string hex(std::uint8_t m) {
  const char* digits = "0123456789ABCDEF";
  return std::string("0xFF") + digits[m >> 4] + digits[m & 15];
}

// The orientation tag of an APP1 segment's EXIF data (after "Exif\0\0": a TIFF header, then IFD0); 1 when
// absent or malformed. Every offset is checked against the segment's end.
int exif_orientation(const std::uint8_t* seg, std::size_t size) {
  if (size < 6 + 8 || seg[0] != 'E' || seg[1] != 'x' || seg[2] != 'i' || seg[3] != 'f' || seg[4] != 0 || seg[5] != 0)
    return 1;
  const std::uint8_t* tiff = seg + 6;
  const std::size_t n = size - 6;
  const bool little = tiff[0] == 'I' && tiff[1] == 'I';
  if (!little && !(tiff[0] == 'M' && tiff[1] == 'M')) return 1;
  auto u16 = [&](std::size_t at) -> unsigned {
    return little ? tiff[at] | (tiff[at + 1] << 8) : (tiff[at] << 8) | tiff[at + 1];
  };
  auto u32 = [&](std::size_t at) -> std::uint32_t {
    return little ? (std::uint32_t{u16(at + 2)} << 16) | u16(at) : (std::uint32_t{u16(at)} << 16) | u16(at + 2);
  };
  if (u16(2) != 42) return 1;
  const std::uint32_t ifd = u32(4);
  if (ifd > n || n - ifd < 2) return 1;
  const unsigned entries = u16(ifd);
  for (unsigned i = 0; i < entries; ++i) {
    const std::size_t at = ifd + 2 + std::size_t{12} * i;
    if (at + 12 > n) return 1;
    if (u16(at) != 0x0112) continue;
    if (u16(at + 2) != 3 || u32(at + 4) != 1) return 1;  // one SHORT
    const unsigned v = u16(at + 8);
    return v >= 1 && v <= 8 ? static_cast<int>(v) : 1;
  }
  return 1;
}

}  // namespace

JpegHeader sniff_jpeg(const std::uint8_t* data, std::size_t size) noexcept {
  JpegHeader h;
  try {
    if (size < 4 || data[0] != 0xFF || data[1] != kSOI) {
      h.problem = "not a JPEG (no start-of-image marker)";
      return h;
    }
    bool frame = false, scanned = false, exif_seen = false;
    std::size_t pos = 2;
    while (true) {
      // A marker: 0xFF, any fill 0xFF bytes, then its code.
      if (pos >= size || data[pos] != 0xFF) {
        h.problem = pos >= size ? "truncated: the file ends before its end-of-image marker"
                                : "corrupt: no marker where a segment should start (at byte " + std::to_string(pos) + ")";
        return h;
      }
      while (pos < size && data[pos] == 0xFF) ++pos;
      if (pos >= size) {
        h.problem = "truncated: the file ends inside a marker";
        return h;
      }
      const std::uint8_t m = data[pos++];
      if (m == kEOI) {
        if (!scanned) h.problem = "corrupt: end-of-image marker before any image data";
        return h;  // trailing bytes after the image are allowed (some cameras append data)
      }
      if (m == kSOI || m == 0x00) {
        h.problem = "corrupt: unexpected marker " + hex(m) + " at byte " + std::to_string(pos - 2);
        return h;
      }
      if (is_restart(m) || m == kTEM) continue;  // markers without a segment
      if (size - pos < 2) {
        h.problem = "truncated: the file ends inside a segment header";
        return h;
      }
      const std::size_t length = (std::size_t{data[pos]} << 8) | data[pos + 1];
      if (length < 2 || length > size - pos) {
        h.problem = length < 2 ? "corrupt: segment " + hex(m) + " has a length below 2"
                               : "truncated: segment " + hex(m) + " runs past the end of the file";
        return h;
      }
      const std::uint8_t* seg = data + pos + 2;
      const std::size_t seg_bytes = length - 2;
      if (m == 0xE1 && !exif_seen) {  // APP1: the first EXIF segment counts
        const int o = exif_orientation(seg, seg_bytes);
        exif_seen = seg_bytes >= 6 && seg[0] == 'E' && seg[1] == 'x' && seg[2] == 'i' && seg[3] == 'f';
        h.orientation = o;
      }
      if (is_sof(m)) {
        if (frame) {
          h.problem = "unsupported: more than one frame header (hierarchical JPEG)";
          return h;
        }
        frame = true;
        if (seg_bytes < 6) {
          h.problem = "corrupt: frame header too short";
          return h;
        }
        const int precision = seg[0];
        h.height = (seg[1] << 8) | seg[2];
        h.width = (seg[3] << 8) | seg[4];
        h.components = seg[5];
        h.progressive = m == 0xC2;
        if (m != 0xC0 && m != 0xC1 && m != 0xC2) {
          h.problem = "unsupported JPEG coding (frame marker " + hex(m) +
                      ": lossless, hierarchical or arithmetic-coded)";
          return h;
        }
        if (precision != 8) {
          h.problem = "unsupported: " + std::to_string(precision) + "-bit samples (8-bit only)";
          return h;
        }
        if (h.width == 0 || h.height == 0) {
          h.problem = "unsupported: the frame header gives no size (height from a DNL marker)";
          return h;
        }
        if (h.components == 4) {
          h.problem = "unsupported: 4 components (a CMYK or YCCK JPEG)";
          return h;
        }
        if (h.components != 1 && h.components != 3) {
          h.problem = "unsupported: " + std::to_string(h.components) + " components (1 or 3 only)";
          return h;
        }
        if (seg_bytes < 6 + std::size_t{3} * static_cast<std::size_t>(h.components)) {
          h.problem = "corrupt: frame header shorter than its components";
          return h;
        }
      }
      pos += length;
      if (m != kSOS) continue;
      if (!frame) {
        h.problem = "corrupt: image data before the frame header";
        return h;
      }
      scanned = true;
      // Entropy-coded data: 0xFF is followed by a stuffed 0x00, a restart marker or fill 0xFF bytes; any other
      // marker ends the scan.
      while (true) {
        while (pos < size && data[pos] != 0xFF) ++pos;
        if (pos + 1 >= size) {
          h.problem = "truncated: the file ends inside its image data (no end-of-image marker)";
          return h;
        }
        std::size_t next = pos + 1;
        while (next < size && data[next] == 0xFF) ++next;
        if (next >= size) {
          h.problem = "truncated: the file ends inside its image data (no end-of-image marker)";
          return h;
        }
        if (data[next] == 0x00 || is_restart(data[next])) {
          pos = next + 1;
          continue;
        }
        pos = next - 1;  // at the last 0xFF before the marker's code
        break;
      }
    }
  } catch (...) {  // std::string allocation only
    h.problem = "cannot inspect the file (out of memory)";
    return h;
  }
}

}  // namespace sluice
