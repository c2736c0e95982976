#include "nn/cpu/strided.hpp"

#include "nn/cpu/parallel.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace sluice::nn::cpu {

StridedView collapse(StridedView view) {
  StridedView out;
  out.offset = view.offset;
  for (std::size_t k = 0; k < view.dims.size(); ++k) {
    if (view.dims[k] == 1) continue;
    if (view.dims[k] == 0) return StridedView{{0}, {1}, view.offset};
    // Merge into the previous kept dimension when that one steps exactly over this one's extent.
    if (!out.dims.empty() && out.strides.back() == view.strides[k] * view.dims[k]) {
      out.dims.back() *= view.dims[k];
      out.strides.back() = view.strides[k];
    } else {
      out.dims.push_back(view.dims[k]);
      out.strides.push_back(view.strides[k]);
    }
  }
  if (out.dims.empty()) return StridedView{{1}, {1}, view.offset};
  if (out.dims.size() > kMaxRank)
    throw std::invalid_argument("tensors of more than " + std::to_string(kMaxRank) + " dimensions are not supported");
  return out;
}

std::vector<std::int64_t> contiguous_strides(const Shape& shape) {
  std::vector<std::int64_t> strides(shape.size());
  std::int64_t step = 1;
  for (std::size_t k = shape.size(); k-- > 0;) {
    strides[k] = step;
    step *= shape[k];
  }
  return strides;
}

bool broadcast_shape(const Shape& a, const Shape& b, Shape& out) {
  const std::size_t rank = std::max(a.size(), b.size());
  out.assign(rank, 1);
  for (std::size_t k = 0; k < rank; ++k) {
    const std::int64_t da = k < rank - a.size() ? 1 : a[k - (rank - a.size())];
    const std::int64_t db = k < rank - b.size() ? 1 : b[k - (rank - b.size())];
    if (da != db && da != 1 && db != 1) return false;
    out[k] = da == 1 ? db : da;
  }
  return true;
}

std::vector<std::int64_t> broadcast_strides(const Shape& shape, const Shape& target) {
  const auto own = contiguous_strides(shape);
  std::vector<std::int64_t> strides(target.size(), 0);
  const std::size_t lead = target.size() - shape.size();
  for (std::size_t k = 0; k < shape.size(); ++k)
    strides[lead + k] = shape[k] == 1 && target[lead + k] != 1 ? 0 : own[k];
  return strides;
}

void copy_strided(const float* src, const StridedView& view, float* dst) {
  const std::int64_t n = view.dims.back();
  const std::int64_t step = view.strides.back();
  // Rows of at least ~16 KiB per thread: a smaller copy is done before the other threads would wake.
  parallel_ranges(row_count(view), std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(n, 1)),
                  [&](std::int64_t first, std::int64_t end) {
                    float* out = dst + first * n;
                    for_rows(view, first, end, [&](std::int64_t offset) {
                      const float* s = src + offset;
                      if (step == 1) {
                        std::copy(s, s + n, out);
                      } else if (step == 0) {
                        std::fill(out, out + n, *s);
                      } else {
                        for (std::int64_t i = 0; i < n; ++i) out[i] = s[i * step];
                      }
                      out += n;
                    });
                  });
}

}  // namespace sluice::nn::cpu
