#pragma once
// NumPy .npy files (format versions 1.0, 2.0 and 3.0; little-endian; C order), for reference inputs and outputs.
#include <string>
#include <string_view>
#include <vector>

#include "nn/graph.hpp"

namespace sluice::nn {

struct NpyArray {
  Shape shape;
  std::vector<float> data;
};

// Reads f32, f64, f16, i64, i32, i8, u8 or bool data as f32. Throws ModelError naming the file. The file must be a
// regular file of at most kMaxNpyFileBytes (runtime/bounded_file.hpp); its header at most kMaxNpyHeaderBytes.
NpyArray read_npy(const std::string& path);
// The same, from the bytes of a .npy file; `source` names it in messages.
NpyArray parse_npy(std::string_view bytes, const std::string& source);
// At most this many dimensions (numpy's own limit is 32 before numpy 2, 64 after).
inline constexpr std::size_t kMaxNpyDims = 64;
// Writes f32 data (format 1.0, '<f4', C order). Throws ModelError naming the file.
void write_npy(const std::string& path, const Shape& shape, const float* data);

}  // namespace sluice::nn
