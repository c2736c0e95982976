#pragma once
// Places activations in one arena by liveness: two blocks share bytes only if their lifetimes (inclusive layer
// ranges) do not meet. A node's outputs meet its inputs at that node, so no kernel reads what it writes.
#include <cstddef>
#include <vector>

namespace sluice::nn::cuda {

struct LiveBlock {
  std::size_t bytes = 0;
  int first = 0, last = 0;  // layer indices, inclusive
};

struct ArenaPlan {
  std::vector<std::size_t> offsets;  // one per block, 256-byte aligned
  std::size_t bytes = 0;             // the arena's size
};

// Largest blocks first, each at the lowest offset that no overlapping live block uses.
ArenaPlan plan_arena(const std::vector<LiveBlock>& blocks);

}  // namespace sluice::nn::cuda
