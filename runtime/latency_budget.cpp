#include "runtime/latency_budget.hpp"

#include <algorithm>
#include <cmath>

namespace sluice {

void DownstreamEstimate::record(std::int64_t ns) noexcept {
  const double sample = static_cast<double>(std::max<std::int64_t>(ns, 0));
  std::lock_guard lock(mu_);
  if (!any_) {
    mean_ = sample;
    deviation_ = sample / 2;
    any_ = true;
  } else {
    deviation_ += (std::fabs(sample - mean_) - deviation_) / 4;
    mean_ += (sample - mean_) / 8;
  }
  estimate_.store(static_cast<std::int64_t>(std::min(mean_ + 4 * deviation_, 9.0e18)), std::memory_order_relaxed);
}

std::int64_t dispatch_deadline(const FrameMeta& frame, std::int64_t downstream_ns) noexcept {
  if (frame.budget_ns <= 0) return kNoDeadline;
  // Budgets are bounded by validation (at most an hour), so this sum cannot overflow for a steady-clock time.
  return frame.capture_ns + frame.budget_ns - std::max<std::int64_t>(downstream_ns, 0);
}

std::size_t dominant_stage(const FrameMeta& frame, const std::array<std::int64_t, kMaxStages>& done_ns,
                           std::size_t stages) noexcept {
  stages = std::min<std::size_t>(stages, kMaxStages);
  std::size_t best = 0;
  std::int64_t best_ns = -1, before = frame.capture_ns;
  for (std::size_t i = 0; i < stages; ++i) {
    const std::int64_t share = done_ns[i] - before;
    if (share > best_ns) best = i, best_ns = share;
    before = done_ns[i];
  }
  return best;
}

}  // namespace sluice
