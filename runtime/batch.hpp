#pragma once
// A batch of frames or tensors in one pool slot, and the move-only lease that owns a slot while in use.
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/format.hpp"
#include "runtime/gpu_handles.hpp"

namespace sluice {

constexpr int kMaxStages = 16;

struct FrameMeta {
  std::uint32_t source_id = 0;
  std::uint64_t sequence = 0;   // per source, from 0
  std::int64_t pts_ns = 0;      // presentation time in the source's timeline
  std::int64_t capture_ns = 0;  // steady clock when the frame entered sluice
  std::int64_t wall_ns = 0;     // system clock (ns since the Unix epoch) at the same moment; 0: unknown
  std::uint32_t input = 0;        // InputTracker id of the file/connection it came from (0: untracked)
  std::uint64_t input_frame = 0;  // index within that input, from 0
  std::int64_t budget_ns = 0;     // latency budget from capture to the sink's end (late beyond it); 0: none
};

class BatchPool;

struct Batch {
  PayloadDesc desc;  // desc.batch is the capacity
  int count = 0;     // items filled
  Memory memory;
  std::vector<FrameMeta> frames;                       // size() == count; capacity reserved at start
  std::array<std::int64_t, kMaxStages> stage_done_ns{};  // steady clock when each stage finished it
  // `ready`: recorded by the producer's stream after the work that fills the batch.
  // `released`: recorded by the consumer's stream after the work that reads it.
  Event ready, released;
  bool ready_pending = false, release_pending = false;
  BatchPool* pool = nullptr;
  std::uint32_t slot = 0;
  // With replicas: the batch's place in the order the source made batches (ReplicaMerge puts them back in it).
  std::uint64_t order = 0;
  // Shared by a tee's branches (by reference, never copied): `holders` leases own the batch and the last one
  // gives it back to its pool. While `shared`, no branch writes it (metadata, events): each branch's consumer
  // records its own released event, branch_released[branch], and the pool's next writer waits on all of them.
  std::atomic<int> holders{1};
  bool shared = false;
  std::vector<Event> branch_released;                 // one per branch, when the pool has events and a tee
  std::vector<std::uint8_t> branch_release_pending;   // bytes, not vector<bool>: branches set their own
  // The frames this batch's results were made from (item i: frame i), kept for a stage that reads them again
  // (classify_boxes crops each detected box from its picture): the batch preprocess took them from, held by
  // reference. Owned like a lease: it goes back to its pool when this batch goes back to its own. A stage that
  // reads it records the pictures' `released` event on its stream (so the next writer of that slot waits).
  Batch* pictures = nullptr;

  std::byte* item(int i) const noexcept { return memory.data() + desc.item_bytes() * static_cast<std::size_t>(i); }
};

// Owns one pool slot (or one share of a tee's shared batch); giving it up (destruction or reset) returns the slot
// to its pool once no other lease holds it.
class BatchLease {
 public:
  BatchLease() = default;
  static BatchLease adopt(Batch* b) noexcept { return BatchLease(b); }
  BatchLease(BatchLease&& o) noexcept : b_(o.detach()) {}
  BatchLease& operator=(BatchLease&& o) noexcept {
    if (this != &o) {
      reset();
      b_ = o.detach();
    }
    return *this;
  }
  BatchLease(const BatchLease&) = delete;
  BatchLease& operator=(const BatchLease&) = delete;
  ~BatchLease() { reset(); }

  Batch* get() const noexcept { return b_; }
  Batch* operator->() const noexcept { return b_; }
  Batch& operator*() const noexcept { return *b_; }
  explicit operator bool() const noexcept { return b_ != nullptr; }
  Batch* detach() noexcept {
    Batch* b = b_;
    b_ = nullptr;
    return b;
  }
  void reset() noexcept;

 private:
  explicit BatchLease(Batch* b) noexcept : b_(b) {}
  Batch* b_ = nullptr;
};

}  // namespace sluice
