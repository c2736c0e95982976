#pragma once
// What the kernel says about this process and its threads (/proc/self), for the process_* metrics and
// per-thread-group CPU time. The parsers take the files' text and never throw: a field that is missing
// or malformed leaves its value empty, and the metric is left out rather than made up.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

// The fields of /proc/PID/stat (or /proc/PID/task/TID/stat) that the metrics use.
struct ProcStat {
  std::string comm;  // the thread's or process's name, as the kernel shows it (may hold spaces or ')')
  std::uint64_t utime_ticks = 0, stime_ticks = 0;  // CPU time in clock ticks
  std::uint64_t num_threads = 0;
  std::uint64_t start_ticks = 0;  // since boot, in clock ticks
  std::uint64_t vsize_bytes = 0;
  std::uint64_t rss_pages = 0;
};

// nullopt when the text is not a stat line (no "(comm)", too few fields, a number that does not parse).
std::optional<ProcStat> parse_proc_stat(std::string_view text);
// The soft "Max open files" limit of /proc/PID/limits; nullopt when absent, malformed or "unlimited".
std::optional<std::uint64_t> parse_max_open_files(std::string_view limits);
// The "btime" line of /proc/stat: boot time in seconds since the epoch.
std::optional<std::uint64_t> parse_boot_time(std::string_view proc_stat);

// This process now; each value is empty when /proc could not give it.
struct ProcessStats {
  std::optional<double> start_time_s;  // since the epoch
  std::optional<double> cpu_s;         // user + system, every thread that ever ran
  std::optional<double> resident_bytes, virtual_bytes;
  std::optional<double> open_fds, max_fds, threads;
};
ProcessStats read_process_stats();

// One live thread of this process.
struct ThreadSample {
  long tid = 0;
  std::uint64_t start_ticks = 0;  // with tid, tells a thread from a later one that reuses its id
  std::string comm;
  double cpu_s = 0;
};
// Every thread of this process that could be read (a thread that ends while being read is skipped).
std::vector<ThreadSample> read_thread_samples();

}  // namespace sluice
