#include "runtime/gpu_timer.hpp"

namespace sluice {

GpuTimer::GpuTimer(int slots) {
  ring_.reserve(static_cast<std::size_t>(slots));
  for (int i = 0; i < slots; ++i) ring_.push_back({Event::create(true), Event::create(true)});
  finished_.reserve(static_cast<std::size_t>(slots));
}

void GpuTimer::begin(gpu::StreamHandle s, std::uint64_t first_sequence, int frames) {
  collect(false);
  skipping_ = ring_.empty() || count_ == ring_.size();
  if (skipping_) return;
  Pair& p = ring_[(head_ + count_) % ring_.size()];
  p.first_sequence = first_sequence;
  p.frames = frames;
  gpu::event_record(p.start.get(), s);
}

void GpuTimer::end(gpu::StreamHandle s, bool closes_batch) {
  if (skipping_) return;
  Pair& p = ring_[(head_ + count_) % ring_.size()];
  p.closes_batch = closes_batch;
  gpu::event_record(p.stop.get(), s);
  ++count_;
  if (!closes_batch) ++open_pieces_;  // recorded since the last close_batch
}

void GpuTimer::close_batch() {
  // The newest pending pair is the batch's last piece when it recorded any since the last close (the ring is in
  // order): collected, it counts the batch. A batch none of whose pieces is pending (none timed, or all collected
  // already) counts at the next collect.
  if (open_pieces_ > 0 && count_ > 0) ring_[(head_ + count_ - 1) % ring_.size()].closes_batch = true;
  else ++untimed_batches_;
  open_pieces_ = 0;
}

void GpuTimer::set_reference(gpu::EventHandle reference, std::int64_t reference_ns) {
  reference_ = reference;
  reference_ns_ = reference_ns;
}

void GpuTimer::collect(bool all) {
  timed_ += untimed_batches_;
  untimed_batches_ = 0;
  while (count_ > 0) {
    Pair& p = ring_[head_];
    if (all) gpu::event_synchronize(p.stop.get());
    else if (!gpu::event_query(p.stop.get())) return;
    const float ms = gpu::event_elapsed_ms(p.start.get(), p.stop.get());
    total_ns_ += static_cast<std::uint64_t>(ms * 1e6);
    if (p.closes_batch) ++timed_;
    if (reference_ && finished_.size() < finished_.capacity()) {
      const auto begin = reference_ns_ + static_cast<std::int64_t>(gpu::event_elapsed_ms(reference_, p.start.get()) * 1e6);
      finished_.push_back({begin, begin + static_cast<std::int64_t>(ms * 1e6), p.first_sequence, p.frames});
    }
    head_ = (head_ + 1) % ring_.size();
    --count_;
  }
}

}  // namespace sluice
