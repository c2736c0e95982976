#include "runtime/pool.hpp"

#include <utility>

#include "runtime/errors.hpp"
#include "runtime/gpu.hpp"
#include "runtime/stage.hpp"
#include "runtime/stats.hpp"

namespace sluice {

void BatchLease::reset() noexcept {
  Batch* b = detach();
  if (!b) return;
  if (b->holders.fetch_sub(1, std::memory_order_acq_rel) != 1) return;  // another branch still reads it
  b->holders.store(1, std::memory_order_relaxed);
  BatchLease pictures = adopt(std::exchange(b->pictures, nullptr));  // back to its pool after this one
  b->pool->give_back(b);
}

BatchPool::BatchPool(std::string name, const PayloadDesc& desc, int slots, bool with_events,
                     const std::vector<int>& reader_devices)
    : name_(std::move(name)), desc_(desc), free_(static_cast<std::size_t>(slots), QueuePolicy::block) {
  batches_.reserve(static_cast<std::size_t>(slots));
  const int device = with_events && !reader_devices.empty() ? gpu::current_device() : 0;
  for (int i = 0; i < slots; ++i) {
    auto b = std::make_unique<Batch>();
    b->desc = desc;
    b->memory = Memory(desc.memory, desc.batch_bytes());
    b->frames.reserve(static_cast<std::size_t>(desc.batch));
    if (with_events) {
      b->ready = Event::create();
      b->released = Event::create();
      for (int reader : reader_devices) {
        if (reader != device) gpu::set_device(reader);  // an event is recorded only on its own device's streams
        b->branch_released.push_back(Event::create());
        if (reader != device) gpu::set_device(device);
      }
    }
    b->branch_release_pending.assign(b->branch_released.size(), 0);
    b->pool = this;
    b->slot = static_cast<std::uint32_t>(i);
    free_.push(b.get());
    batches_.push_back(std::move(b));
  }
}

BatchLease BatchPool::acquire(gpu::StreamHandle writer) {
  auto b = free_.pop();
  if (!b) return {};
  Batch* batch = *b;
  if (batch->release_pending) {
    if (writer)
      gpu::stream_wait_event(writer, batch->released.get());
    else
      gpu::event_synchronize(batch->released.get());
    batch->release_pending = false;
  }
  for (std::size_t k = 0; k < batch->branch_released.size(); ++k) {  // every branch or replica that read it
    if (!batch->branch_release_pending[k]) continue;
    batch->branch_release_pending[k] = 0;
    try {
      if (writer)
        gpu::stream_wait_event(writer, batch->branch_released[k].get());
      else
        gpu::event_synchronize(batch->branch_released[k].get());
    } catch (const GpuFault&) {
      // The reader's GPU faulted (a replica that went down): nothing runs there any more, so nothing reads the slot.
    }
  }
  batch->shared = false;
  batch->count = 0;
  batch->frames.clear();
  batch->ready_pending = false;
  return BatchLease::adopt(batch);
}

BatchLease StageContext::acquire() {
  const std::int64_t t0 = now_ns();
  BatchLease b = out_pool->acquire(stream);
  acquire_wait_ns += now_ns() - t0;
  return b;
}

BatchLease StageContext::acquire_for_host() {
  const std::int64_t t0 = now_ns();
  BatchLease b = out_pool->acquire(nullptr);
  acquire_wait_ns += now_ns() - t0;
  return b;
}

void BatchPool::give_back(Batch* b) noexcept {
  // The free list holds every slot, so it never rejects one (except after close, at shutdown).
  free_.push(b);
}

}  // namespace sluice
