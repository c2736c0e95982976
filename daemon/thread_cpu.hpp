#pragma once
// CPU seconds per thread group, as counters that only go up, from samples of the live threads.
//
// Groups, from a thread's name (runtime/thread_name.hpp):
//   stages   sluice-stage: the pipeline's stage threads
//   sources  sluice-source and FFmpeg's own "av:..." threads: demux, decode (libavcodec's threads inherit the
//            source thread's name), copying into the ring
//   cuda     the CUDA driver's helper threads ("cuda-EvtHandlr", ...)
//   main     the process's first thread: control socket, metrics, signals
//   other    any other thread (a library's pool started from the main thread, e.g. OpenBLAS)
//   exited   threads that ended since the previous sample: the CPU time they used after it, which only the
//            process total still knows
// The groups add up to process_cpu_seconds_total (to the kernel's tick).
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/process_stats.hpp"

namespace sluice {

inline constexpr std::string_view kThreadGroups[] = {"stages", "sources", "cuda", "main", "other", "exited"};

// One of kThreadGroups but "exited".
std::string_view thread_group(std::string_view comm, bool main_thread) noexcept;

class ThreadCpuAccount {
 public:
  ThreadCpuAccount();
  // `live`: every thread now; `main_tid`: the process's id; `process_cpu_s`: the process's total.
  void update(const std::vector<ThreadSample>& live, long main_tid, double process_cpu_s);
  // Seconds by group: every group of kThreadGroups (0 until a thread of it ran), and no value ever decreases.
  const std::map<std::string, double>& seconds() const noexcept { return seconds_; }

 private:
  std::map<std::pair<long, std::uint64_t>, double> seen_;  // (tid, start ticks) -> CPU seconds last sampled
  std::map<std::string, double> seconds_;
};

}  // namespace sluice
