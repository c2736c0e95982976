#include "nn/npy.hpp"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <utility>

#include "kernels/half.hpp"
#include "runtime/bounded_file.hpp"
#include "runtime/checked_math.hpp"

namespace sluice::nn {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicSize = 6;

std::uint32_t little_endian(const unsigned char* bytes, std::size_t count) {
  std::uint32_t v = 0;
  for (std::size_t i = count; i-- > 0;) v = (v << 8) | bytes[i];
  return v;
}

// A header byte as a message may show it: printable ASCII as itself, anything else as \xNN (never raw bytes).
std::string show_byte(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return std::string(1, c);
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", u);
  return buf;
}

std::string show_text(std::string_view text, std::size_t at_most = 40) {
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < at_most; ++i) out += show_byte(text[i]);
  if (text.size() > at_most) out += "...";
  return out;
}

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
};

// The header is a Python dict literal, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// padded with spaces and a newline. A hand-written tokenizer: one pass, no recursion, no backtracking, so its
// cost is linear in the header (itself at most kMaxNpyHeaderBytes) whatever the bytes are.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& source) : text_(text), source_(source) {}

  NpyHeader parse() {
    NpyHeader header;
    bool has_descr = false, has_order = false, has_shape = false;
    expect('{', "'{' opening the header dict");
    while (!eat('}')) {
      const std::size_t key_at = pos_;
      const std::string key = string_literal();
      expect(':', "':' after a key");
      auto once = [&](bool& seen) {
        if (seen) fail_at(key_at, "key '" + key + "' appears twice");
        seen = true;
      };
      if (key == "descr") {
        once(has_descr);
        header.descr = string_literal();
      } else if (key == "fortran_order") {
        once(has_order);
        header.fortran_order = boolean();
      } else if (key == "shape") {
        once(has_shape);
        header.shape = tuple();
      } else {
        fail_at(key_at, "unknown key '" + show_text(key) + "' (a .npy header has descr, fortran_order and shape)");
      }
      if (eat(',')) continue;
      expect('}', "',' or '}' after a value");
      break;
    }
    skip_space();
    if (pos_ != text_.size()) fail("unexpected " + found() + " after the header dict");
    if (!has_descr || !has_order || !has_shape)
      fail(std::string("the header dict has no '") + (!has_descr ? "descr" : !has_order ? "fortran_order" : "shape") +
           "'");
    return header;
  }

 private:
  [[noreturn]] void fail_at(std::size_t at, const std::string& what) const {
    throw ModelError("file " + source_ + ": .npy header, byte " + std::to_string(at) + ": " + what);
  }
  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }

  std::string found() const { return pos_ >= text_.size() ? "end of header" : "'" + show_byte(text_[pos_]) + "'"; }

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  bool eat(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  void expect(char c, const char* what) {
    if (!eat(c)) fail(std::string("expected ") + what + ", found " + found());
  }

  // 'text' or "text", without escapes (numpy writes none in these headers).
  std::string string_literal() {
    skip_space();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"'))
      fail("expected a quoted string, found " + found());
    const char quote = text_[pos_++];
    const std::size_t begin = pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\') fail("escapes in strings are not supported");
      ++pos_;
    }
    if (pos_ >= text_.size()) fail_at(begin - 1, "string is not closed");
    return std::string(text_.substr(begin, pos_++ - begin));
  }

  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair<std::string_view, bool>{"True", true}, {"False", false}}) {
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    }
    fail("expected True or False, found " + found());
  }

  // (d0, d1, ...): non-negative integers, at most kMaxNpyDims of them, each fitting in int64.
  Shape tuple() {
    expect('(', "'(' opening the shape tuple");
    Shape shape;
    while (!eat(')')) {
      if (shape.size() == kMaxNpyDims)
        fail("the shape has more than " + std::to_string(kMaxNpyDims) + " dimensions");
      shape.push_back(integer());
      if (eat(',')) continue;
      expect(')', "',' or ')' in the shape tuple");
      break;
    }
    return shape;
  }

  std::int64_t integer() {
    skip_space();
    const std::size_t begin = pos_;
    std::int64_t value = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const auto times_ten = checked_mul<std::int64_t>(value, 10);
      const auto next = times_ten ? checked_add<std::int64_t>(*times_ten, text_[pos_] - '0') : std::nullopt;
      if (!next) fail_at(begin, "a dimension does not fit in 64 bits");
      value = *next;
      ++pos_;
    }
    if (pos_ == begin) fail("expected a non-negative integer dimension, found " + found());
    return value;
  }

  std::string_view text_;
  const std::string& source_;
  std::size_t pos_ = 0;
};

template <typename T, typename Convert>
void convert_all(std::string_view bytes, std::vector<float>& out, Convert convert) {
  for (std::size_t i = 0; i < out.size(); ++i) {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    out[i] = convert(v);
  }
}

}  // namespace

NpyArray read_npy(const std::string& path) {
  std::string bytes;
  try {
    bytes = read_bounded_file(path, ".npy file", kMaxNpyFileBytes);
  } catch (const FileReadError& e) {
    throw ModelError(e.what());
  }
  return parse_npy(bytes, path);
}

NpyArray parse_npy(std::string_view bytes, const std::string& source) {
  const std::string& path = source;
  const auto* raw = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < 10 || bytes.compare(0, kMagicSize, std::string_view(kMagic, kMagicSize)) != 0)
    throw ModelError("file " + path + ": not a .npy file (no \\x93NUMPY magic)");
  const int major = raw[6];
  if (major < 1 || major > 3)
    throw ModelError("file " + path + ": .npy format version " + std::to_string(major) + " is not supported (1.0-3.0)");
  const std::size_t length_bytes = major == 1 ? 2 : 4;
  const std::size_t header_start = 8 + length_bytes;
  if (bytes.size() < header_start) throw ModelError("file " + path + ": .npy header is truncated");
  const std::size_t header_size = little_endian(raw + 8, length_bytes);
  if (header_size > kMaxNpyHeaderBytes)
    throw ModelError("file " + path + ": .npy header is " + std::to_string(header_size) + " bytes, over the limit of " +
                     std::to_string(kMaxNpyHeaderBytes));
  if (bytes.size() - header_start < header_size)
    throw ModelError("file " + path + ": .npy header is truncated (" + std::to_string(bytes.size() - header_start) +
                     " of " + std::to_string(header_size) + " bytes)");
  const NpyHeader header = HeaderParser(bytes.substr(header_start, header_size), path).parse();

  if (header.fortran_order)
    throw ModelError("file " + path + ": .npy data is in Fortran order; only C order is supported "
                     "(save numpy.ascontiguousarray(a))");
  const std::string& descr = header.descr;
  if (descr.size() < 3 || descr[0] == '>')
    throw ModelError("file " + path + ": .npy dtype '" + show_text(descr) + "' is not supported (little-endian only)");
  const std::string type = descr.substr(1);  // '<', '|' or '=' (native, little-endian here) then kind and size
  std::size_t element_size = 0;
  if (type == "f4" || type == "i4") element_size = 4;
  else if (type == "f8" || type == "i8") element_size = 8;
  else if (type == "f2") element_size = 2;
  else if (type == "u1" || type == "i1" || type == "b1") element_size = 1;
  else
    throw ModelError("file " + path + ": .npy dtype '" + show_text(descr) +
                     "' is not supported (float32, float64, float16, int64, int32, int8, uint8, bool)");

  NpyArray array;
  array.shape = header.shape;
  // The data must be in the file before anything is allocated for it; the product is checked for overflow.
  const std::size_t available = bytes.size() - header_start - header_size;
  const auto count = checked_product<std::uint64_t>(array.shape);
  const auto needed = count ? checked_mul<std::uint64_t>(*count, element_size) : std::nullopt;
  if (!needed || *count > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    throw ModelError("file " + path + ": .npy shape " + to_string(array.shape) + " has more elements than fit in 64 bits");
  if (available < *needed)
    throw ModelError("file " + path + ": .npy data is truncated (" + std::to_string(available) + " bytes for shape " +
                     to_string(array.shape) + " of " + descr + ", needs " + std::to_string(*needed) + ")");
  const std::string_view data = bytes.substr(header_start + header_size, static_cast<std::size_t>(*needed));
  array.data.resize(static_cast<std::size_t>(*count));
  auto to_float = [](auto v) { return static_cast<float>(v); };
  if (type == "f4") convert_all<float>(data, array.data, to_float);
  else if (type == "f8") convert_all<double>(data, array.data, to_float);
  else if (type == "f2") convert_all<std::uint16_t>(data, array.data, [](auto v) { return kernels::half_bits_to_float(v); });
  else if (type == "i8") convert_all<std::int64_t>(data, array.data, to_float);
  else if (type == "i4") convert_all<std::int32_t>(data, array.data, to_float);
  else if (type == "i1") convert_all<std::int8_t>(data, array.data, to_float);
  else convert_all<std::uint8_t>(data, array.data, to_float);  // u1, b1
  return array;
}

void write_npy(const std::string& path, const Shape& shape, const float* data) {
  std::string dims;
  for (auto d : shape) dims += std::to_string(d) + ", ";
  if (!shape.empty()) dims.resize(dims.size() - (shape.size() == 1 ? 1 : 2));  // "(3,)", "(2, 3)"
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Pad with spaces and a newline so that the data starts 64-byte aligned, as numpy writes it.
  const std::size_t unpadded = kMagicSize + 4 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  if (header.size() > 65535) throw ModelError("file " + path + ": shape too long for a .npy 1.0 header");

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw ModelError("file " + path + ": cannot open for writing");
  out.write(kMagic, kMagicSize);
  const unsigned char version_and_length[4] = {1, 0, static_cast<unsigned char>(header.size() & 0xff),
                                               static_cast<unsigned char>(header.size() >> 8)};
  out.write(reinterpret_cast<const char*>(version_and_length), 4);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(element_count(shape) * sizeof(float)));
  if (!out) throw ModelError("file " + path + ": write failed");
}

}  // namespace sluice::nn
