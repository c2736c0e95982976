#pragma once
// Fixed pools of batches, allocated at start and recycled without host syncs on the GPU path:
// a writer taking a slot back makes its stream wait on the slot's `released` event (a host writer
// waits for it on the host instead, which only CPU stages do).
#include <memory>
#include <string>
#include <vector>

#include "runtime/batch.hpp"
#include "runtime/bounded_queue.hpp"

namespace sluice {

class BatchPool {
 public:
  // `with_events`: create ready/released events per slot (needed whenever a GPU touches the slots), on the current
  // device; also one released event per entry of `reader_devices`, on that device: one per branch of a tee that
  // shares a slot among its branches, or one per replica that reads the source's slots (on the replica's GPU).
  BatchPool(std::string name, const PayloadDesc& desc, int slots, bool with_events,
            const std::vector<int>& reader_devices = {});
  BatchPool(const BatchPool&) = delete;
  BatchPool& operator=(const BatchPool&) = delete;

  // Blocks until a slot is free. `writer` is the stream that will fill it (null for a host writer).
  // Returns an empty lease once the pool is closed and no slot is free.
  BatchLease acquire(gpu::StreamHandle writer);
  void give_back(Batch* b) noexcept;
  void close() { free_.close(); }

  const std::string& name() const { return name_; }
  const PayloadDesc& desc() const { return desc_; }
  int slots() const { return static_cast<int>(batches_.size()); }
  std::size_t free_slots() const { return free_.depth(); }
  std::size_t bytes() const { return desc_.batch_bytes() * batches_.size(); }

 private:
  std::string name_;
  PayloadDesc desc_;
  std::vector<std::unique_ptr<Batch>> batches_;
  BoundedQueue<Batch*> free_;
};

}  // namespace sluice
