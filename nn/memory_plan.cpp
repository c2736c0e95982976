#include "nn/memory_plan.hpp"

#include <algorithm>
#include <numeric>

#include "nn/graph.hpp"
#include "runtime/checked_math.hpp"

namespace sluice::nn {

namespace {
bool overlap_in_time(const BufferRequest& a, const BufferRequest& b) {
  return a.first_step <= b.last_step && b.first_step <= a.last_step;
}
}  // namespace

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests, std::size_t alignment) {
  // Sizes come from model shapes: a sum that overflows is refused, never wrapped into a small arena.
  const auto overflow = [] { throw ModelError("the memory plan's sizes overflow 64 bits"); };
  const auto aligned = [&](std::size_t n) {
    const auto padded = checked_add(n, alignment - 1);
    if (!padded) overflow();
    return *padded / alignment * alignment;
  };
  const auto end_of = [&](std::size_t begin, std::size_t size) {
    const auto end = checked_add(begin, size);
    if (!end) overflow();
    return *end;
  };
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  std::vector<std::size_t> order(requests.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return requests[a].size > requests[b].size; });

  struct Placed {
    std::size_t begin, end, request;
  };
  std::vector<Placed> placed;  // kept sorted by begin
  for (std::size_t r : order) {
    const std::size_t size = aligned(std::max<std::size_t>(requests[r].size, 1));
    // The lowest gap between buffers alive at the same time that fits.
    std::size_t candidate = 0;
    for (const Placed& p : placed) {
      if (!overlap_in_time(requests[p.request], requests[r])) continue;
      if (p.begin >= end_of(candidate, size)) break;
      candidate = std::max(candidate, p.end);
    }
    plan.offsets[r] = candidate;
    plan.arena = std::max(plan.arena, end_of(candidate, size));
    const Placed entry{candidate, end_of(candidate, size), r};
    placed.insert(std::upper_bound(placed.begin(), placed.end(), entry,
                                   [](const Placed& a, const Placed& b) { return a.begin < b.begin; }),
                  entry);
  }
  return plan;
}

}  // namespace sluice::nn
