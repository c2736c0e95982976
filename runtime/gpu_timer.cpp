#include "runtime/gpu_timer.hpp"

namespace sluice {

GpuTimer::GpuTimer(int slots) {
  ring_.reserve(static_cast<std::size_t>(slots));
  for (int i = 0; i < slots; ++i) ring_.push_back({Event::create(true), Event::create(true)});
}

void GpuTimer::begin(gpu::StreamHandle s) {
  collect(false);
  skipping_ = ring_.empty() || count_ == ring_.size();
  if (!skipping_) gpu::event_record(ring_[(head_ + count_) % ring_.size()].start.get(), s);
}

void GpuTimer::end(gpu::StreamHandle s) {
  if (skipping_) return;
  gpu::event_record(ring_[(head_ + count_) % ring_.size()].stop.get(), s);
  ++count_;
}

void GpuTimer::collect(bool all) {
  while (count_ > 0) {
    Pair& p = ring_[head_];
    if (all) gpu::event_synchronize(p.stop.get());
    else if (!gpu::event_query(p.stop.get())) return;
    total_ns_ += static_cast<std::uint64_t>(gpu::event_elapsed_ms(p.start.get(), p.stop.get()) * 1e6);
    ++timed_;
    head_ = (head_ + 1) % ring_.size();
    --count_;
  }
}

}  // namespace sluice
