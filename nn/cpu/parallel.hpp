#pragma once
// Spreading a layer's independent pieces of work over the cores, on the OpenMP runtime oneDNN's primitives use
// (libgomp, the thread count set_openmp_threads() gave), or serially where the build has no OpenMP (the clang
// sanitizer builds). Each piece is computed the same way whichever thread takes it, so results do not depend on
// the thread count.
#include <algorithm>
#include <cstdint>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace sluice::nn::cpu {

// body(begin, end) over contiguous ranges covering [0, count), each of at least `grain` pieces (but one range
// when count is smaller): small work stays on the calling thread, where waking the others would cost more.
template <typename Body>
void parallel_ranges(std::int64_t count, std::int64_t grain, Body&& body) {
  if (count <= 0) return;
  const std::int64_t most_ranges = std::max<std::int64_t>(1, count / std::max<std::int64_t>(1, grain));
#if defined(_OPENMP)
  if (most_ranges > 1 && omp_get_max_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel
    {
      const std::int64_t ranges = std::min<std::int64_t>(omp_get_num_threads(), most_ranges);
      const std::int64_t t = omp_get_thread_num();
      if (t < ranges) body(count * t / ranges, count * (t + 1) / ranges);
    }
    return;
  }
#endif
  body(std::int64_t{0}, count);
}

}  // namespace sluice::nn::cpu
