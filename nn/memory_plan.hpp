#pragma once
// Where each intermediate value lives in an engine's one arena (both backends): values whose lifetimes do not
// overlap share memory. Planned once per engine, so running allocates nothing. Sizes, offsets and the alignment
// are in one unit of the caller's choice (floats on the CPU, bytes on the GPU).
#include <cstddef>
#include <vector>

namespace sluice::nn {

struct BufferRequest {
  std::size_t size = 0;
  int first_step = 0;  // the step that writes it
  int last_step = 0;   // the last step that reads it (inclusive); a step's outputs never share with its inputs
};

struct MemoryPlan {
  std::vector<std::size_t> offsets;  // one per request, each a multiple of the alignment
  std::size_t arena = 0;             // the arena's size
};

// Greedy by size (largest first, each at the lowest offset free during its lifetime): near optimal for the
// chains and short skips of CNNs, and simple enough to trust.
MemoryPlan plan_memory(const std::vector<BufferRequest>& requests, std::size_t alignment);

}  // namespace sluice::nn
