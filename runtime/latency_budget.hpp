#pragma once
// Batching against a latency budget: a running estimate of how long a batch takes from leaving the batcher
// until the sink is done with it, the deadline by which a batch being filled must leave so that its oldest
// frame can still make its budget, and where a late frame's time went.
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>

#include "runtime/batch.hpp"

namespace sluice {

constexpr std::int64_t kNoDeadline = std::numeric_limits<std::int64_t>::max();

// Smoothed mean plus four smoothed mean deviations (Jacobson/Karels, TCP's retransmission timer): follows a
// slower downstream within a few batches and keeps a margin for its jitter, so one spike does not shrink
// every later batch for long. Safe from any thread.
class DownstreamEstimate {
 public:
  void record(std::int64_t ns) noexcept;
  std::int64_t ns() const noexcept { return estimate_.load(std::memory_order_relaxed); }  // 0 before the first batch

 private:
  std::mutex mu_;
  double mean_ = 0, deviation_ = 0;
  bool any_ = false;
  std::atomic<std::int64_t> estimate_{0};
};

// The latest moment `frame` may leave the batcher: capture + budget - downstream; kNoDeadline without a budget.
std::int64_t dispatch_deadline(const FrameMeta& frame, std::int64_t downstream_ns) noexcept;

// True when `frame`, done at the sink at `sink_done_ns`, took longer than its budget.
inline bool is_late(const FrameMeta& frame, std::int64_t sink_done_ns) noexcept {
  return frame.budget_ns > 0 && sink_done_ns - frame.capture_ns > frame.budget_ns;
}

// The stage (index) where most of a frame's time went: stage i's share is from the moment stage i-1 finished the
// batch (the frame's capture for the source) to the moment stage i finished it, so waiting in the queue before a
// busy stage counts for that stage. `done_ns` holds stages 0..stages-1, the last one being the sink.
std::size_t dominant_stage(const FrameMeta& frame, const std::array<std::int64_t, kMaxStages>& done_ns,
                           std::size_t stages) noexcept;

}  // namespace sluice
