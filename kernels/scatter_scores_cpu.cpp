#include "kernels/scatter_scores.hpp"

#include <cstring>

namespace sluice::kernels {

void scatter_scores_cpu(const ClassScore* scores, int k, const std::uint64_t* offsets, int count, std::byte* dst) {
  const std::size_t bytes = sizeof(ClassScore) * static_cast<std::size_t>(k);
  for (int c = 0; c < count; ++c) std::memcpy(dst + offsets[c], scores + static_cast<std::size_t>(c) * k, bytes);
}

}  // namespace sluice::kernels
