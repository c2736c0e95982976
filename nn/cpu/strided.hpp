#pragma once
// Walking a strided view of a tensor: the shared core of Transpose, Slice, broadcasting copies (Gemm's C)
// and the batch loops of MatMul.
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "nn/graph.hpp"

namespace sluice::nn::cpu {

// Views deeper than this are refused when the layer is made (no ONNX model we know comes near it), so that
// run() can keep its index counters on the stack.
inline constexpr std::size_t kMaxRank = 16;

// dims[k] elements at distance strides[k] (in floats) in the source; the destination is contiguous in dims.
struct StridedView {
  std::vector<std::int64_t> dims;
  std::vector<std::int64_t> strides;
  std::int64_t offset = 0;  // of the first element, in floats
};

// Drops dimensions of size 1 and merges neighbours that are contiguous in the source, so the innermost loop is
// as long as possible; the result has at least one dimension. Throws std::invalid_argument for views deeper than kMaxRank.
StridedView collapse(StridedView view);

// Row-major strides of a contiguous tensor of this shape.
std::vector<std::int64_t> contiguous_strides(const Shape& shape);

// numpy broadcasting; false when the shapes do not broadcast.
bool broadcast_shape(const Shape& a, const Shape& b, Shape& out);
// The strides that read `shape` (contiguous) as if it had `target` shape: 0 along broadcast dimensions.
// `shape` is aligned to the right of `target` and must broadcast to it.
std::vector<std::int64_t> broadcast_strides(const Shape& shape, const Shape& target);

// dst[i...] = src[offset + sum(i_k * strides_k)] for every index of view.dims (rank >= 1, as collapse() gives),
// dst contiguous.
void copy_strided(const float* src, const StridedView& view, float* dst);

// The rows of a collapsed view: all its indices but the innermost dimension's.
inline std::int64_t row_count(const StridedView& view) {
  std::int64_t rows = 1;
  for (std::size_t k = 0; k + 1 < view.dims.size(); ++k) rows *= view.dims[k];
  return rows;
}

// Visits rows [first, end) of a collapsed view (rank >= 1) in row-major order, passing the source offset of
// each, so that callers can run their own innermost loop over view.dims.back() elements; threads take ranges.
template <typename F>
void for_rows(const StridedView& view, std::int64_t first, std::int64_t end, F&& row) {
  const std::size_t outer = view.dims.size() - 1;
  std::array<std::int64_t, kMaxRank> index{};
  std::int64_t offset = view.offset;
  std::int64_t rest = first;
  for (std::size_t k = outer; k-- > 0;) {
    index[k] = rest % view.dims[k];
    rest /= view.dims[k];
    offset += index[k] * view.strides[k];
  }
  for (std::int64_t r = first; r < end; ++r) {
    row(offset);
    for (std::size_t k = outer; k-- > 0;) {
      offset += view.strides[k];
      if (++index[k] < view.dims[k]) break;
      offset -= view.strides[k] * view.dims[k];
      index[k] = 0;
    }
  }
}

// Every row of a collapsed view, in order.
template <typename F>
void for_each_row(const StridedView& view, F&& row) {
  for_rows(view, 0, row_count(view), row);
}

}  // namespace sluice::nn::cpu
