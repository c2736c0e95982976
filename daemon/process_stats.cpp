#include "daemon/process_stats.hpp"

#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

namespace sluice {

namespace {

std::optional<std::uint64_t> parse_u64(std::string_view s) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::vector<std::string_view> split_spaces(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n')) ++i;
    const std::size_t start = i;
    while (i < s.size() && s[i] != ' ' && s[i] != '\t' && s[i] != '\n') ++i;
    if (i > start) out.push_back(s.substr(start, i - start));
  }
  return out;
}

// A small /proc file, whole (they are generated on read: no size is known beforehand); bounded.
std::optional<std::string> read_small_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text;
  constexpr std::size_t kMax = 64 * 1024;
  char buf[4096];
  while (text.size() < kMax && in.read(buf, sizeof buf).gcount() > 0) text.append(buf, static_cast<std::size_t>(in.gcount()));
  return text;
}

double ticks_per_second() {
  const long t = sysconf(_SC_CLK_TCK);
  return t > 0 ? static_cast<double>(t) : 100.0;
}

}  // namespace

std::optional<ProcStat> parse_proc_stat(std::string_view text) {
  // "PID (COMM) STATE PPID ...": COMM may itself hold ')' and spaces, so it ends at the last ')'.
  const auto open = text.find('(');
  const auto close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) return std::nullopt;
  ProcStat st;
  st.comm = std::string(text.substr(open + 1, close - open - 1));
  const auto fields = split_spaces(text.substr(close + 1));
  // fields[0] is field 3 (state) of proc(5); field N is fields[N - 3].
  constexpr std::size_t kUtime = 14 - 3, kStime = 15 - 3, kThreads = 20 - 3, kStart = 22 - 3, kVsize = 23 - 3,
                        kRss = 24 - 3;
  if (fields.size() <= kRss) return std::nullopt;
  const auto utime = parse_u64(fields[kUtime]), stime = parse_u64(fields[kStime]),
             threads = parse_u64(fields[kThreads]), start = parse_u64(fields[kStart]),
             vsize = parse_u64(fields[kVsize]);
  // rss is a signed long in the kernel; a negative one (never seen) is not a size.
  const auto rss = parse_u64(fields[kRss]);
  if (!utime || !stime || !threads || !start || !vsize || !rss) return std::nullopt;
  st.utime_ticks = *utime;
  st.stime_ticks = *stime;
  st.num_threads = *threads;
  st.start_ticks = *start;
  st.vsize_bytes = *vsize;
  st.rss_pages = *rss;
  return st;
}

std::optional<std::uint64_t> parse_max_open_files(std::string_view limits) {
  constexpr std::string_view kKey = "Max open files";
  std::size_t pos = 0;
  while (pos < limits.size()) {
    auto end = limits.find('\n', pos);
    if (end == std::string_view::npos) end = limits.size();
    const std::string_view line = limits.substr(pos, end - pos);
    pos = end + 1;
    if (line.substr(0, kKey.size()) != kKey) continue;
    const auto fields = split_spaces(line.substr(kKey.size()));
    if (fields.empty()) return std::nullopt;
    return parse_u64(fields[0]);  // the soft limit; "unlimited" does not parse
  }
  return std::nullopt;
}

std::optional<std::uint64_t> parse_boot_time(std::string_view proc_stat) {
  std::size_t pos = 0;
  while (pos < proc_stat.size()) {
    auto end = proc_stat.find('\n', pos);
    if (end == std::string_view::npos) end = proc_stat.size();
    const auto fields = split_spaces(proc_stat.substr(pos, end - pos));
    pos = end + 1;
    if (fields.size() == 2 && fields[0] == "btime") return parse_u64(fields[1]);
  }
  return std::nullopt;
}

ProcessStats read_process_stats() {
  ProcessStats out;
  const double hz = ticks_per_second();
  if (const auto text = read_small_file("/proc/self/stat"))
    if (const auto st = parse_proc_stat(*text)) {
      out.cpu_s = static_cast<double>(st->utime_ticks + st->stime_ticks) / hz;
      out.virtual_bytes = static_cast<double>(st->vsize_bytes);
      const long page = sysconf(_SC_PAGESIZE);
      if (page > 0) out.resident_bytes = static_cast<double>(st->rss_pages) * static_cast<double>(page);
      out.threads = static_cast<double>(st->num_threads);
      if (const auto stat = read_small_file("/proc/stat"))
        if (const auto boot = parse_boot_time(*stat))
          out.start_time_s = static_cast<double>(*boot) + static_cast<double>(st->start_ticks) / hz;
    }
  if (const auto limits = read_small_file("/proc/self/limits"))
    if (const auto max = parse_max_open_files(*limits)) out.max_fds = static_cast<double>(*max);
  std::error_code ec;
  std::size_t fds = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) ++fds;
  if (!ec) out.open_fds = static_cast<double>(fds);
  return out;
}

std::vector<ThreadSample> read_thread_samples() {
  std::vector<ThreadSample> out;
  const double hz = ticks_per_second();
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc/self/task", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const auto tid = parse_u64(name);
    if (!tid) continue;
    const auto text = read_small_file(it->path() / "stat");
    if (!text) continue;  // ended meanwhile
    const auto st = parse_proc_stat(*text);
    if (!st) continue;
    out.push_back({static_cast<long>(*tid), st->start_ticks, st->comm,
                   static_cast<double>(st->utime_ticks + st->stime_ticks) / hz});
  }
  return out;
}

}  // namespace sluice
