#pragma once
// Where each intermediate value lives in the engine's one arena: values whose lifetimes do not overlap share
// memory. Planned once per engine, so running allocates nothing.
#include <cstddef>
#include <vector>

namespace sluice::nn::cpu {

struct BufferRequest {
  std::size_t floats = 0;
  int first_step = 0;  // the step that writes it
  int last_step = 0;   // the last step that reads it (inclusive); a step's outputs never share with its inputs
};

struct MemoryPlan {
  std::vector<std::size_t> offsets;  // in floats, one per request, each aligned to kAlignFloats
  std::size_t arena_floats = 0;
};

inline constexpr std::size_t kAlignFloats = 16;  // 64 bytes: a cache line, and full AVX-512 vectors

// Greedy by size (largest first, each at the lowest offset free during its lifetime): near optimal for the
// chains and short skips of CNNs, and simple enough to trust.
MemoryPlan plan_memory(const std::vector<BufferRequest>& requests);

}  // namespace sluice::nn::cpu
