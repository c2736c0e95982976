#pragma once
// NumPy .npy files (format versions 1.0, 2.0 and 3.0; little-endian; C order), for reference inputs and outputs.
#include <string>
#include <vector>

#include "nn/graph.hpp"

namespace sluice::nn {

struct NpyArray {
  Shape shape;
  std::vector<float> data;
};

// Reads f32, f64, f16, i64, i32, i8, u8 or bool data as f32. Throws ModelError naming the file.
NpyArray read_npy(const std::string& path);
// Writes f32 data (format 1.0, '<f4', C order). Throws ModelError naming the file.
void write_npy(const std::string& path, const Shape& shape, const float* data);

}  // namespace sluice::nn
