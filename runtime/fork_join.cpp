#include "runtime/fork_join.hpp"

#include <stdexcept>
#include <string>
#include <utility>

#include "runtime/stats.hpp"
#include "runtime/thread_name.hpp"

namespace sluice {

ForkJoin::ForkJoin(int threads, std::string_view thread_name) {
  if (threads < 1) throw std::invalid_argument("ForkJoin: needs at least one thread");
  workers_.reserve(static_cast<std::size_t>(threads - 1));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, name = std::string(thread_name)] {
      name_this_thread(name);
      work();
    });
}

ForkJoin::~ForkJoin() {
  {
    std::lock_guard lock(m_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ForkJoin::run_erased(std::size_t tasks, Call call, void* fn) {
  if (tasks == 0) return;
  if (workers_.empty() || tasks == 1) {  // nothing to share: no wake-up
    std::exception_ptr error;
    for (std::size_t i = 0; i < tasks; ++i) {
      try {
        call(fn, i);
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
    return;
  }
  {
    std::lock_guard lock(m_);
    call_ = call, fn_ = fn, tasks_ = tasks;
    next_.store(0, std::memory_order_relaxed);
    finished_ = 0;
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  drain();
  std::exception_ptr error;
  {
    std::unique_lock lock(m_);
    done_.wait(lock, [&] { return finished_ == tasks_ && active_ == 0; });
    tasks_ = 0, call_ = nullptr, fn_ = nullptr;  // closed: a worker waking late waits for the next call
    error = std::exchange(error_, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

void ForkJoin::drain() {
  for (;;) {
    const std::size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= tasks_) return;
    std::exception_ptr error;
    try {
      call_(fn_, i);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(m_);
    if (error && !error_) error_ = error;
    if (++finished_ == tasks_) done_.notify_all();
  }
}

std::int64_t ForkJoin::helpers_cpu_ns() const {
  std::lock_guard lock(m_);
  return helpers_cpu_ns_;
}

void ForkJoin::work() {
  std::uint64_t seen = 0;
  std::unique_lock lock(m_);
  // From one call's end to the next's: the wake-up and the tasks count for the call; the wait before it costs
  // no CPU (a sleep).
  std::int64_t cpu_from = thread_cpu_ns();
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || (tasks_ > 0 && generation_ != seen); });
    if (stop_) return;
    seen = generation_;
    ++active_;
    lock.unlock();
    drain();
    lock.lock();
    const std::int64_t cpu_to = thread_cpu_ns();
    helpers_cpu_ns_ += cpu_to - cpu_from;  // before active_ drops: the caller's run() returns after this
    cpu_from = cpu_to;
    if (--active_ == 0) done_.notify_all();
  }
}

}  // namespace sluice
