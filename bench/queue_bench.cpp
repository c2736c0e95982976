// SPSC throughput of sluice::BoundedQueue (lock-free storage, atomic wait/notify) against a plain
// std::mutex + std::condition_variable bounded queue, both in `block` mode, carrying pointer-sized items.
// One producer thread pushes N items then closes; the main thread pops until end of stream.
// Prints items/s: median of RUNS runs, and min / max.
//
//   g++ -std=c++20 -O2 -I. bench/queue_bench.cpp -pthread -o queue_bench && ./queue_bench [items] [runs]
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/bounded_queue.hpp"

namespace {

// The baseline: what one would write without thinking about lock-freedom.
template <typename T>
class MutexQueue {
 public:
  explicit MutexQueue(std::size_t capacity) : capacity_(capacity) {}

  bool push(T item) {
    std::unique_lock lock(m_);
    not_full_.wait(lock, [&] { return closed_ || items_.size() < capacity_; });
    if (closed_) return false;
    items_.push_back(item);
    lock.unlock();
    not_empty_.notify_one();
    return true;
  }
  std::optional<T> pop() {
    std::unique_lock lock(m_);
    not_empty_.wait(lock, [&] { return closed_ || !items_.empty(); });
    if (items_.empty()) return std::nullopt;
    T v = items_.front();
    items_.pop_front();
    lock.unlock();
    not_full_.notify_one();
    return v;
  }
  void close() {
    {
      std::lock_guard lock(m_);
      closed_ = true;
    }
    not_full_.notify_all();
    not_empty_.notify_all();
  }

 private:
  std::size_t capacity_;
  std::mutex m_;
  std::condition_variable not_full_, not_empty_;
  std::deque<T> items_;
  bool closed_ = false;
};

struct LockFree {
  static constexpr const char* name = "BoundedQueue";
  sluice::BoundedQueue<std::uintptr_t> q;
  explicit LockFree(std::size_t cap) : q(cap, sluice::QueuePolicy::block) {}
  bool push(std::uintptr_t v) { return q.push(v).accepted; }
  std::optional<std::uintptr_t> pop() { return q.pop(); }
  void close() { q.close(); }
};

struct Locked {
  static constexpr const char* name = "mutex+condvar";
  MutexQueue<std::uintptr_t> q;
  explicit Locked(std::size_t cap) : q(cap) {}
  bool push(std::uintptr_t v) { return q.push(v); }
  std::optional<std::uintptr_t> pop() { return q.pop(); }
  void close() { q.close(); }
};

// Items per second for one run; exits if an item went missing (a benchmark of a broken queue means nothing).
template <typename Queue>
double run_once(std::size_t capacity, std::uint64_t items) {
  Queue q(capacity);
  const auto start = std::chrono::steady_clock::now();
  std::thread producer([&] {
    for (std::uint64_t i = 1; i <= items; ++i) q.push(i);
    q.close();
  });
  std::uint64_t count = 0, sum = 0;
  while (auto v = q.pop()) {
    ++count;
    sum += *v;
  }
  const auto stop = std::chrono::steady_clock::now();
  producer.join();
  if (count != items || sum != items * (items + 1) / 2) {
    std::fprintf(stderr, "%s lost items: got %llu of %llu\n", Queue::name, static_cast<unsigned long long>(count),
                 static_cast<unsigned long long>(items));
    std::exit(1);
  }
  return static_cast<double>(items) / std::chrono::duration<double>(stop - start).count();
}

template <typename Queue>
void row(std::size_t capacity, std::uint64_t items, int runs) {
  std::vector<double> r;
  for (int i = 0; i < runs; ++i) r.push_back(run_once<Queue>(capacity, items));
  std::sort(r.begin(), r.end());
  std::printf("| %-14s | %8zu | %12.2f | %12.2f | %12.2f |\n", Queue::name, capacity, r[r.size() / 2] / 1e6,
              r.front() / 1e6, r.back() / 1e6);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const std::uint64_t items = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 2'000'000;
  const int runs = argc > 2 ? std::atoi(argv[2]) : 5;
  if (items == 0 || runs < 1) {
    std::fprintf(stderr, "usage: %s [items>0] [runs>0]\n", argv[0]);
    return 2;
  }
  std::printf("SPSC, block policy, %llu pointer-sized items per run, %d runs, %u hardware threads\n",
              static_cast<unsigned long long>(items), runs, std::thread::hardware_concurrency());
  std::printf("Mit/s = 10^6 items per second\n");
  std::printf("| %-14s | %8s | %12s | %12s | %12s |\n", "queue", "capacity", "median Mit/s", "min Mit/s", "max Mit/s");
  std::printf("|----------------|----------|--------------|--------------|--------------|\n");
  for (std::size_t capacity : {4, 1024}) {
    row<LockFree>(capacity, items, runs);
    row<Locked>(capacity, items, runs);
  }
}
