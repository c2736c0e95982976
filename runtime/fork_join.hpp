#pragma once
// A fixed set of threads that runs the tasks 0..n-1 of one call and returns when all are done (fork, join):
// for a stage that splits a batch into independent pieces (the track stage: one piece per video). The calling
// thread takes tasks too; the others sleep between calls. Tasks are handed out in index order, each to one
// thread; which thread runs which task varies, so a task must not depend on it. Nothing is allocated per call.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

namespace sluice {

class ForkJoin {
 public:
  // `threads` >= 1, the caller's included: 1 runs every task on the caller. The others are named
  // `thread_name` (runtime/thread_name.hpp), so that their CPU time counts where it belongs.
  ForkJoin(int threads, std::string_view thread_name);
  ~ForkJoin();
  ForkJoin(const ForkJoin&) = delete;
  ForkJoin& operator=(const ForkJoin&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  // CPU time (thread CPU clock) the threads other than the caller spent in calls so far, their wake-ups
  // included: what a stage adds to its own thread's CPU (StageContext::helper_cpu_ns). Complete for every call
  // that has returned.
  std::int64_t helpers_cpu_ns() const;

  // Calls task(i) for each i in [0, tasks), returns when every call has returned. The first exception a task
  // throws is thrown here once all tasks are done (the other tasks still run). One run() at a time.
  template <class F>
  void run(std::size_t tasks, F&& task) {
    run_erased(tasks, [](void* f, std::size_t i) { (*static_cast<std::remove_reference_t<F>*>(f))(i); }, &task);
  }

 private:
  using Call = void (*)(void*, std::size_t);
  void run_erased(std::size_t tasks, Call call, void* fn);
  void work();
  void drain();

  mutable std::mutex m_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  // The open call (tasks_ > 0), set and closed under m_ while no worker is in it.
  Call call_ = nullptr;
  void* fn_ = nullptr;
  std::size_t tasks_ = 0;
  std::atomic<std::size_t> next_{0};
  std::size_t finished_ = 0;     // under m_
  int active_ = 0;               // workers inside the open call, under m_
  std::uint64_t generation_ = 0;  // calls opened so far, under m_
  std::int64_t helpers_cpu_ns_ = 0;  // under m_
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace sluice
