#pragma once
// BoundedQueue: the queue between two stages. It carries small trivially copyable handles (Batch*).
//
// Storage is boost::lockfree::queue (fixed-size node pool), so push and pop never take a lock. On top of it
// sits one atomic word, `slots_`, counting taken slots and holding the closed bit. A pusher reserves a slot
// (CAS) before it touches the storage; a popper gives its slot back after it took an item. So:
//   - the capacity is exact, and the node pool (capacity + 1 nodes) never runs dry;
//   - leaky_oldest can evict: the evicting pusher takes over the evicted item's slot, so no other pusher
//     can take the room it made, and one push drops at most one item;
//   - close() is one fetch_or: after it no slot can be reserved, and "closed and drained" is exactly
//     `count == 0 && closed` (no item stored, no push half done, no pop half done).
//
// Sleeping uses C++20 atomic wait/notify after a short spin. A full pusher sleeps on `slots_`; an idle
// popper sleeps on `pushes_`, a counter bumped after every stored item. Each word has a "sleeping" flag
// bit that a sleeper sets (by CAS from the value it saw, so it cannot miss a change) before wait(); the
// next change that finds the flag clears it and calls notify_all. Wakers therefore make one futex call per
// sleep, not one per item: without the flag, every push made a syscall while the popper was still waking.
// pop_for needs a timeout, which atomics lack: it sleeps on a condition variable instead (TimedGate).
//
// Policies, as in the pipeline YAML (`leaky: oldest|newest`; absent means block):
//   block         a full queue makes the producer wait: lossless, the default for files.
//   leaky_oldest  a full queue drops its oldest item to take the new one: live sources, newest wins.
//   leaky_newest  a full queue refuses the new item: live sources, keeps what is already queued.
// Advice: 2-4 batches of capacity keep every stage busy; more only adds latency and pinned memory.
//
// Any number of threads may push and pop. Destroy the queue only after every thread has returned from
// its calls (join the stage threads first): close() may still be waking sleepers when a consumer
// already sees the end of the stream.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>

#include <boost/lockfree/queue.hpp>

namespace sluice {

enum class QueuePolicy : std::uint8_t { block, leaky_oldest, leaky_newest };

// The YAML spellings: "block", "oldest", "newest" (parse_queue_policy(to_string(p)) == p).
constexpr std::string_view to_string(QueuePolicy p) noexcept {
  switch (p) {
    case QueuePolicy::block: return "block";
    case QueuePolicy::leaky_oldest: return "oldest";
    case QueuePolicy::leaky_newest: return "newest";
  }
  return "?";
}

constexpr std::optional<QueuePolicy> parse_queue_policy(std::string_view s) noexcept {
  if (s == "block") return QueuePolicy::block;
  if (s == "oldest") return QueuePolicy::leaky_oldest;
  if (s == "newest") return QueuePolicy::leaky_newest;
  return std::nullopt;
}

template <typename T>
class BoundedQueue {
  // boost::lockfree::queue copies items bytewise and never runs destructors.
  static_assert(std::is_trivially_copyable_v<T> && std::is_default_constructible_v<T>,
                "BoundedQueue carries handles (pointers, indices), not owning objects");

 public:
  // accepted == false only when the queue is closed; the item comes back in `dropped`, not counted as a drop.
  // accepted == true with `dropped` set: the policy dropped that item (counted in drops()): the evicted
  // oldest one (leaky_oldest), or the pushed item itself (leaky_newest). The caller recycles it.
  struct PushResult {
    bool accepted;
    std::optional<T> dropped;
  };

  // Boost's fixed-size pool indexes nodes with 16 bits (at most 65535) and keeps one as a dummy.
  static constexpr std::size_t max_capacity = 65534;

  BoundedQueue(std::size_t capacity, QueuePolicy policy)
      : capacity_(checked_capacity(capacity)), policy_(policy), q_(capacity) {}
  BoundedQueue(const BoundedQueue&) = delete;
  BoundedQueue& operator=(const BoundedQueue&) = delete;

  PushResult push(T item) {
    std::uint32_t s = slots_.load();
    for (;;) {
      if (s & kClosed) return {false, item};
      if ((s & kCount) < capacity_) {
        if (slots_.compare_exchange_weak(s, s + 1)) {
          note_depth((s & kCount) + 1);
          commit(item);
          return {true, std::nullopt};
        }
        continue;  // the failed CAS reloaded s
      }
      switch (policy_) {  // full
        case QueuePolicy::block:
          sleep_while_equal(slots_, s, kPusherSleeps);  // until a pop frees a slot, or close()
          break;
        case QueuePolicy::leaky_newest:
          drops_.fetch_add(1, std::memory_order_relaxed);
          return {true, item};
        case QueuePolicy::leaky_oldest: {
          // Evict and keep the evicted item's slot for ours: slots_ does not change, so no other pusher can
          // fill the room in between. (Racing a consumer, this may evict an item the consumer was about to
          // make room for; it is still counted and returned, so every item keeps exactly one fate.)
          T old{};
          if (q_.pop(old)) {
            drops_.fetch_add(1, std::memory_order_relaxed);
            commit(item);
            return {true, old};
          }
          // Every slot is held by a push not yet stored or a pop not yet released; both finish without
          // waiting for anyone, so yield and look again.
          std::this_thread::yield();
          break;
        }
      }
      s = slots_.load();
    }
  }

  // Waits for an item; std::nullopt means end of stream (closed and drained).
  std::optional<T> pop() {
    for (;;) {
      if (auto v = try_pop()) return v;
      // Read the counter BEFORE looking again: a push we then miss changes it after our read, so the
      // sleep below returns at once instead of sleeping through it.
      const std::uint32_t seen = pushes_.load();
      if (auto v = try_pop()) return v;
      if (closed_and_empty()) return std::nullopt;
      sleep_while_equal(pushes_, seen, kPopperSleeps);
    }
  }

  std::optional<T> try_pop() {
    T v{};
    if (!q_.pop(v)) return std::nullopt;
    release_slot();
    return v;
  }

  // Like pop(), giving up after `timeout`: std::nullopt on timeout or end of stream (closed_and_empty() tells).
  std::optional<T> pop_for(std::chrono::nanoseconds timeout) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::min(timeout, std::chrono::nanoseconds(std::chrono::hours(24)));
    for (;;) {
      if (auto v = try_pop()) return v;
      const std::uint32_t seen = pushes_.load();  // same protocol as pop()
      if (auto v = try_pop()) return v;
      if (closed_and_empty()) return std::nullopt;
      if (!timed_.wait_until(pushes_, seen, deadline)) return std::nullopt;
    }
  }

  // Refuses further pushes and wakes every waiter; pops still drain what is queued.
  void close() {
    wake_if_flagged(slots_, slots_.fetch_or(kClosed), kPusherSleeps);  // blocked pushers see the bit
    signal_poppers();  // idle poppers look again; with nothing in flight they see the end
  }

  bool closed() const { return (slots_.load() & kClosed) != 0; }
  // True once close() was called and every item was popped: pop() returns std::nullopt from then on.
  bool closed_and_empty() const { return (slots_.load() & (kClosed | kCount)) == kClosed; }
  // Items held now, counting pushes and pops in flight.
  std::size_t depth() const { return slots_.load(std::memory_order_relaxed) & kCount; }
  std::size_t capacity() const { return capacity_; }
  QueuePolicy policy() const { return policy_; }
  std::uint64_t drops() const { return drops_.load(std::memory_order_relaxed); }
  std::uint64_t high_water() const { return high_water_.load(std::memory_order_relaxed); }

 private:
  // slots_: bit 31 closed, bit 30 a pusher sleeps, bits 0..29 taken slots.
  static constexpr std::uint32_t kClosed = 1u << 31;
  static constexpr std::uint32_t kPusherSleeps = 1u << 30;
  static constexpr std::uint32_t kCount = kPusherSleeps - 1;
  // pushes_: bit 0 a popper sleeps, bits 1..31 a counter stepping by 2 (its carries never reach the flag).
  static constexpr std::uint32_t kPopperSleeps = 1;
  static constexpr std::uint32_t kPushStep = 2;
  // Polls before sleeping (a few microseconds): enough to catch a peer that is running.
  static constexpr int kSpins = 128;

  static std::uint32_t checked_capacity(std::size_t c) {
    if (c < 1 || c > max_capacity)
      throw std::invalid_argument("queue capacity must be 1.." + std::to_string(max_capacity) + ", got " +
                                  std::to_string(c));
    return static_cast<std::uint32_t>(c);
  }

  // Stores an item for which the caller holds a slot.
  void commit(T item) {
    // The pool has capacity + 1 nodes: boost's dummy plus one per slot, and a popper frees its node
    // before it gives its slot back. So with a slot held a node is free, and this does not loop.
    while (!q_.bounded_push(item)) std::this_thread::yield();
    signal_poppers();
  }

  void release_slot() {
    const std::uint32_t before = slots_.fetch_sub(1);
    wake_if_flagged(slots_, before, kPusherSleeps);  // room for a blocked pusher
    // The last slot after close(): poppers waiting on work in flight must now see the end.
    if ((before & (kClosed | kCount)) == (kClosed | 1)) signal_poppers();
  }

  void signal_poppers() {
    wake_if_flagged(pushes_, pushes_.fetch_add(kPushStep), kPopperSleeps);
    timed_.notify();
  }

  // Sleeps until `word` differs from `seen`. The flag goes in by CAS from `seen`, so a change after the
  // caller read `seen` either fails the CAS (return, caller looks again) or comes after it and sees the
  // flag. Spurious returns are fine: every caller re-checks its condition.
  static void sleep_while_equal(std::atomic<std::uint32_t>& word, std::uint32_t seen, std::uint32_t flag) {
    for (int i = 0; i < kSpins; ++i) {
      if (word.load(std::memory_order_relaxed) != seen) return;
      cpu_relax();
    }
    if (!(seen & flag) && !word.compare_exchange_strong(seen, seen | flag)) return;
    word.wait(seen | flag);
  }

  // Called with the word's value from just before the caller changed it.
  static void wake_if_flagged(std::atomic<std::uint32_t>& word, std::uint32_t before, std::uint32_t flag) {
    if (!(before & flag)) return;  // nobody had announced a sleep, so nobody can be asleep on it
    word.fetch_and(~flag);
    word.notify_all();
  }

  static void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  void note_depth(std::uint32_t d) {
    std::uint32_t hw = high_water_.load(std::memory_order_relaxed);
    while (d > hw && !high_water_.compare_exchange_weak(hw, d, std::memory_order_relaxed)) {
    }
  }

  // Timed sleeping for pop_for. Notifiers pay one load unless a timed waiter is registered. Either the
  // waiter's predicate sees the new counter, or the notifier sees the waiter (both seq_cst) and takes the
  // mutex, which the waiter holds from its predicate check until it sleeps, so the notify reaches it.
  struct TimedGate {
    std::atomic<std::uint32_t> waiters{0};
    std::mutex m;
    std::condition_variable cv;

    bool wait_until(const std::atomic<std::uint32_t>& word, std::uint32_t seen,
                    std::chrono::steady_clock::time_point deadline) {
      waiters.fetch_add(1);
      bool changed;
      {
        std::unique_lock lock(m);
        changed = cv.wait_until(lock, deadline, [&] { return word.load() != seen; });
      }
      waiters.fetch_sub(1);
      return changed;
    }
    void notify() {
      if (waiters.load() == 0) return;
      { std::lock_guard lock(m); }
      cv.notify_all();
    }
  };

  const std::uint32_t capacity_;
  const QueuePolicy policy_;
  boost::lockfree::queue<T, boost::lockfree::fixed_sized<true>> q_;
  // Changed by both sides for every item: its own cache line.
  alignas(64) std::atomic<std::uint32_t> slots_{0};
  // Producer side: pushes_ moves after each stored item (and on close / end of stream).
  alignas(64) std::atomic<std::uint32_t> pushes_{0};
  std::atomic<std::uint32_t> high_water_{0};
  std::atomic<std::uint64_t> drops_{0};
  alignas(64) TimedGate timed_;
};

}  // namespace sluice
