#pragma once
// Per-batch GPU time of one stage from event pairs on its stream, collected without blocking the host:
// finished pairs are read when the next batch starts; a full ring skips timing rather than wait.
#include <cstdint>
#include <vector>

#include "runtime/gpu_handles.hpp"

namespace sluice {

class GpuTimer {
 public:
  GpuTimer() = default;
  explicit GpuTimer(int slots);
  void begin(gpu::StreamHandle s);  // call before the stage enqueues its work
  void end(gpu::StreamHandle s);    // call after
  // Adds finished pairs to the totals; with `all`, waits for every pending pair (at shutdown only).
  void collect(bool all);
  std::uint64_t total_ns() const noexcept { return total_ns_; }
  std::uint64_t timed_batches() const noexcept { return timed_; }

 private:
  struct Pair {
    Event start, stop;
  };
  std::vector<Pair> ring_;
  std::size_t head_ = 0, count_ = 0;  // pending pairs are ring_[head_ .. head_+count_)
  bool skipping_ = false;
  std::uint64_t total_ns_ = 0, timed_ = 0;
};

}  // namespace sluice
