#include "nn/cuda/memory_plan.hpp"

#include <algorithm>
#include <numeric>

namespace sluice::nn::cuda {

ArenaPlan plan_arena(const std::vector<LiveBlock>& blocks) {
  constexpr std::size_t kAlign = 256;
  auto aligned = [](std::size_t b) { return (b + kAlign - 1) / kAlign * kAlign; };
  ArenaPlan plan;
  plan.offsets.assign(blocks.size(), 0);
  std::vector<std::size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return blocks[a].bytes > blocks[b].bytes; });
  std::vector<std::size_t> placed;
  for (std::size_t i : order) {
    const LiveBlock& blk = blocks[i];
    // Busy ranges of already placed blocks whose lifetimes meet this one, by offset.
    std::vector<std::pair<std::size_t, std::size_t>> busy;
    for (std::size_t j : placed)
      if (blocks[j].first <= blk.last && blk.first <= blocks[j].last)
        busy.emplace_back(plan.offsets[j], plan.offsets[j] + aligned(blocks[j].bytes));
    std::sort(busy.begin(), busy.end());
    std::size_t at = 0;
    for (const auto& [begin, end] : busy) {
      if (begin >= at + aligned(blk.bytes)) break;
      at = std::max(at, end);
    }
    plan.offsets[i] = at;
    plan.bytes = std::max(plan.bytes, at + aligned(blk.bytes));
    placed.push_back(i);
  }
  return plan;
}

}  // namespace sluice::nn::cuda
