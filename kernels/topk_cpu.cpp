#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/topk.hpp"

namespace sluice::kernels {

void validate(const TopKParams& p) {
  if (p.items < 0) throw std::invalid_argument("top-k: items must be >= 0");
  if (p.classes < 1) throw std::invalid_argument("top-k: the model output has no classes");
  if (p.k < 1 || p.k > std::min(p.classes, kMaxTopK))
    throw std::invalid_argument("top-k: k must be in 1.." + std::to_string(std::min(p.classes, kMaxTopK)) +
                                ", got " + std::to_string(p.k));
}

void topk_cpu(const TopKParams& p, const float* logits, ClassScore* out) {
  validate(p);
  std::vector<std::int32_t> order(static_cast<std::size_t>(p.classes));
  for (int item = 0; item < p.items; ++item) {
    const float* row = logits + static_cast<std::size_t>(item) * p.classes;
    for (int c = 0; c < p.classes; ++c) order[static_cast<std::size_t>(c)] = c;
    std::partial_sort(order.begin(), order.begin() + p.k, order.end(), [row](std::int32_t a, std::int32_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    const float top = row[order[0]];
    // A sequential float sum of many terms drifts (2e-4 relative at 100000 classes); double keeps the twin exact
    // enough to judge the GPU's tree sum.
    double sum = 0;
    if (p.softmax)
      for (int c = 0; c < p.classes; ++c) sum += std::exp(static_cast<double>(row[c] - top));
    ClassScore* dst = out + static_cast<std::size_t>(item) * p.k;
    for (int i = 0; i < p.k; ++i) {
      const std::int32_t c = order[static_cast<std::size_t>(i)];
      dst[i] = {p.softmax ? static_cast<float>(std::exp(static_cast<double>(row[c] - top)) / sum) : row[c], c};
    }
  }
}

}  // namespace sluice::kernels
