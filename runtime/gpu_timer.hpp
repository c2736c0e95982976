#pragma once
// Per-batch GPU time of one stage from event pairs on its stream, collected without blocking the host:
// finished pairs are read when the next batch starts; a full ring skips timing rather than wait.
// Optionally keeps each batch's interval for a trace, placed on the host clock through a reference event.
#include <cstdint>
#include <vector>

#include "runtime/gpu_handles.hpp"

namespace sluice {

// One batch in one stage, on the steady clock (ns).
struct TraceSlice {
  std::int64_t begin_ns = 0, end_ns = 0;
  std::uint64_t first_sequence = 0;
  int frames = 0;
};

class GpuTimer {
 public:
  GpuTimer() = default;
  explicit GpuTimer(int slots);
  void begin(gpu::StreamHandle s, std::uint64_t first_sequence, int frames);  // before the stage's work
  // After it. A stage that enqueues its work in pieces with waits between them (a source copies each frame as it
  // arrives) times each piece (`closes_batch` false) and calls close_batch() once the batch is made: a pair around
  // the whole would count the waits, when the stream has nothing to do, as GPU time.
  void end(gpu::StreamHandle s, bool closes_batch = true);
  void close_batch();
  // Adds finished pairs to the totals; with `all`, waits for every pending pair (at shutdown only).
  void collect(bool all);
  // Place finished intervals on the host clock: `reference` is an event that completed at host time
  // `reference_ns`. Until this is called, only totals are kept.
  void set_reference(gpu::EventHandle reference, std::int64_t reference_ns);
  // Hands the intervals finished since the last call to `sink` (for traces) and forgets them.
  template <typename Sink>
  void drain_finished(Sink&& sink) {
    for (const auto& s : finished_) sink(s);
    finished_.clear();
  }
  std::uint64_t total_ns() const noexcept { return total_ns_; }
  std::uint64_t timed_batches() const noexcept { return timed_; }  // batches whose every timed piece finished

 private:
  struct Pair {
    Event start, stop;
    std::uint64_t first_sequence = 0;
    int frames = 0;
    bool closes_batch = true;
  };
  std::vector<Pair> ring_;
  std::size_t head_ = 0, count_ = 0;  // pending pairs are ring_[head_ .. head_+count_)
  bool skipping_ = false;
  std::uint64_t untimed_batches_ = 0;  // closed with no piece pending: counted at the next collect
  std::size_t open_pieces_ = 0;        // pieces recorded since the last close_batch
  std::uint64_t total_ns_ = 0, timed_ = 0;
  std::vector<TraceSlice> finished_;  // capacity = ring size: bounded, drained after every batch
  gpu::EventHandle reference_ = nullptr;
  std::int64_t reference_ns_ = 0;
};

}  // namespace sluice
