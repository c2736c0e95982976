#include "nn/npy.hpp"

#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include "kernels/half.hpp"

namespace sluice::nn {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicSize = 6;

std::uint32_t little_endian(const unsigned char* bytes, std::size_t count) {
  std::uint32_t v = 0;
  for (std::size_t i = count; i-- > 0;) v = (v << 8) | bytes[i];
  return v;
}

// The value of `key` in the header's Python dict literal, e.g. 'descr': '<f4' -> "'<f4'".
std::string header_field(const std::string& header, const std::string& key, const std::string& path) {
  const std::regex field("['\"]" + key + "['\"]\\s*:\\s*(\\([^)]*\\)|'[^']*'|\"[^\"]*\"|True|False)");
  std::smatch match;
  if (!std::regex_search(header, match, field))
    throw ModelError("file " + path + ": .npy header has no '" + key + "' (header: " + header + ")");
  return match[1];
}

Shape parse_shape(const std::string& tuple, const std::string& path) {
  Shape shape;
  std::string inner = tuple.substr(1, tuple.size() - 2);
  std::stringstream items(inner);
  std::string item;
  while (std::getline(items, item, ',')) {
    const auto first = item.find_first_not_of(" \t");
    if (first == std::string::npos) continue;  // the trailing comma of a 1-tuple
    try {
      std::size_t used = 0;
      const long long d = std::stoll(item.substr(first), &used);
      if (d < 0) throw std::invalid_argument("negative");
      shape.push_back(d);
    } catch (const std::exception&) {
      throw ModelError("file " + path + ": .npy shape " + tuple + " is not a tuple of non-negative integers");
    }
  }
  return shape;
}

template <typename T, typename Convert>
void convert_all(const std::string& bytes, std::vector<float>& out, Convert convert) {
  for (std::size_t i = 0; i < out.size(); ++i) {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    out[i] = convert(v);
  }
}

}  // namespace

NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelError("file " + path + ": cannot open (missing file?)");
  std::ostringstream all;
  all << in.rdbuf();
  const std::string bytes = all.str();
  const auto* raw = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < 10 || bytes.compare(0, kMagicSize, kMagic, kMagicSize) != 0)
    throw ModelError("file " + path + ": not a .npy file (no \\x93NUMPY magic)");
  const int major = raw[6];
  if (major < 1 || major > 3)
    throw ModelError("file " + path + ": .npy format version " + std::to_string(major) + " is not supported (1.0-3.0)");
  const std::size_t length_bytes = major == 1 ? 2 : 4;
  const std::size_t header_start = 8 + length_bytes;
  if (bytes.size() < header_start) throw ModelError("file " + path + ": .npy header is truncated");
  const std::size_t header_size = little_endian(raw + 8, length_bytes);
  if (bytes.size() < header_start + header_size) throw ModelError("file " + path + ": .npy header is truncated");
  const std::string header = bytes.substr(header_start, header_size);

  if (header_field(header, "fortran_order", path) != "False")
    throw ModelError("file " + path + ": .npy data is in Fortran order; only C order is supported "
                     "(save numpy.ascontiguousarray(a))");
  std::string descr = header_field(header, "descr", path);
  descr = descr.substr(1, descr.size() - 2);
  NpyArray array;
  array.shape = parse_shape(header_field(header, "shape", path), path);
  const std::size_t count = static_cast<std::size_t>(element_count(array.shape));
  if (descr.size() < 3 || descr[0] == '>')
    throw ModelError("file " + path + ": .npy dtype '" + descr + "' is not supported (little-endian only)");
  const std::string type = descr.substr(1);  // '<', '|' or '=' (native, little-endian here) then kind and size
  std::size_t element_size = 0;
  if (type == "f4" || type == "i4") element_size = 4;
  else if (type == "f8" || type == "i8") element_size = 8;
  else if (type == "f2") element_size = 2;
  else if (type == "u1" || type == "i1" || type == "b1") element_size = 1;
  else
    throw ModelError("file " + path + ": .npy dtype '" + descr +
                     "' is not supported (float32, float64, float16, int64, int32, int8, uint8, bool)");

  const std::size_t data_start = header_start + header_size;
  if (bytes.size() - data_start < count * element_size)
    throw ModelError("file " + path + ": .npy data is truncated (" + std::to_string(bytes.size() - data_start) +
                     " bytes for shape " + to_string(array.shape) + " of " + descr + ", needs " +
                     std::to_string(count * element_size) + ")");
  const std::string data = bytes.substr(data_start, count * element_size);
  array.data.resize(count);
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
