#include "runtime/stats.hpp"

#include "runtime/batch.hpp"
#include "runtime/source_control.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>

namespace sluice {

std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::int64_t wall_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string format_utc_ms(std::int64_t unix_ns) {
  std::int64_t ms = unix_ns / 1'000'000;
  if (unix_ns % 1'000'000 < 0) --ms;  // floor: times before 1970 stay in order
  std::int64_t sec = ms / 1000, milli = ms % 1000;
  if (milli < 0) {
    milli += 1000;
    --sec;
  }
  const auto seconds = static_cast<std::time_t>(sec);
  std::tm utc{};
  if (!gmtime_r(&seconds, &utc)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday,
                utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<int>(milli));
  return buf;
}

std::int64_t thread_cpu_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

double process_cpu_seconds() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

namespace {
constexpr double kBase = 1.04;           // bucket growth factor
constexpr double kFirstEdgeNs = 1000.0;  // 1 µs
}  // namespace

int LatencyHistogram::bucket_of(std::int64_t ns) noexcept {
  if (ns <= kFirstEdgeNs) return 0;
  int b = 1 + static_cast<int>(std::log(static_cast<double>(ns) / kFirstEdgeNs) / std::log(kBase));
  return std::min(b, kBuckets - 1);
}

std::int64_t LatencyHistogram::upper_edge(int bucket) noexcept {
  return static_cast<std::int64_t>(kFirstEdgeNs * std::pow(kBase, bucket));
}

void LatencyHistogram::record(std::int64_t ns) noexcept {
  buckets_[static_cast<std::size_t>(bucket_of(ns))].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(ns, std::memory_order_relaxed);
}

std::uint64_t LatencyHistogram::count_at_most(std::int64_t ns) const noexcept {
  std::uint64_t n = 0;
  for (int i = 0; i < kBuckets && upper_edge(i) <= ns; ++i) n += buckets_[static_cast<std::size_t>(i)].load(std::memory_order_relaxed);
  return n;
}

std::int64_t LatencyHistogram::quantile_ns(double p) const noexcept {
  std::uint64_t total = 0;
  for (const auto& b : buckets_) total += b.load(std::memory_order_relaxed);
  if (total == 0) return 0;
  const auto rank = static_cast<std::uint64_t>(std::ceil(p * static_cast<double>(total)));
  std::uint64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += buckets_[static_cast<std::size_t>(i)].load(std::memory_order_relaxed);
    if (seen >= std::max<std::uint64_t>(rank, 1)) return upper_edge(i);
  }
  return upper_edge(kBuckets - 1);
}

void FrameLedger::count(std::span<const FrameMeta> frames, Column column) {
  (column == Column::produced    ? produced_
   : column == Column::delivered ? delivered_
   : column == Column::dropped   ? dropped_
   : column == Column::late      ? late_
                                 : failed_) += frames.size();
  for (const FrameMeta& f : frames) {
    std::uint32_t id = f.source_id;
    if (!sources_.count(id) && sources_.size() >= kMaxSources) id = kOtherSources;
    SourceTotals& t = sources_[id];
    ++(column == Column::produced    ? t.produced
       : column == Column::delivered ? t.delivered
       : column == Column::dropped   ? t.dropped
       : column == Column::late      ? t.late
                                     : t.failed);
  }
}

void FrameLedger::produced(std::span<const FrameMeta> frames) {
  std::lock_guard lock(mu_);
  if (!abandoned_) count(frames, Column::produced);
}

void FrameLedger::delivered(std::span<const FrameMeta> frames) {
  std::lock_guard lock(mu_);
  if (!abandoned_) count(frames, Column::delivered);
}

void FrameLedger::dropped(std::span<const FrameMeta> frames, const std::string& reason) {
  std::lock_guard lock(mu_);
  if (abandoned_ || frames.empty()) return;
  count(frames, Column::dropped);
  drop_reasons_[reason] += frames.size();
}

void FrameLedger::failed(std::span<const FrameMeta> frames, const std::string& error) {
  std::lock_guard lock(mu_);
  if (abandoned_ || frames.empty()) return;
  count(frames, Column::failed);
  if (errors_.size() < 16 && std::find(errors_.begin(), errors_.end(), error) == errors_.end())
    errors_.push_back(error);
}

std::uint64_t FrameLedger::abandon(const std::string& reason) {
  std::lock_guard lock(mu_);
  if (abandoned_) return 0;
  const std::uint64_t n = produced_ - delivered_ - dropped_ - failed_;
  failed_ += n;
  for (auto& [id, t] : sources_) t.failed += t.in_flight();
  if (n > 0 && errors_.size() < 16) errors_.push_back(reason);
  abandoned_ = true;
  return n;
}

void FrameLedger::late(const FrameMeta& frame) {
  std::lock_guard lock(mu_);
  if (!abandoned_) count(std::span<const FrameMeta>(&frame, 1), Column::late);
}

FrameLedger::Totals FrameLedger::totals() const {
  std::lock_guard lock(mu_);
  Totals t;
  // Read the end states before `produced`, so a concurrent snapshot never shows more ended than produced.
  t.delivered = delivered_.load();
  t.dropped = dropped_.load();
  t.failed = failed_.load();
  t.produced = produced_.load();
  t.late = late_.load();
  t.drop_reasons = drop_reasons_;
  t.errors = errors_;
  t.sources = sources_;
  return t;
}

std::string format_late(const PipelineSnapshot& s) {
  const auto& f = s.frames;
  if (f.late == 0 && s.latency_budget_ns == 0) return {};
  char line[200];
  std::snprintf(line, sizeof line, "late: %llu delivered past their latency budget", static_cast<unsigned long long>(f.late));
  std::string out = line;
  if (s.latency_budget_ns > 0) {
    std::snprintf(line, sizeof line, " (%.1f ms, downstream estimate %.1f ms)", static_cast<double>(s.latency_budget_ns) / 1e6,
                  static_cast<double>(s.downstream_ns) / 1e6);
    out += line;
  }
  std::string stages;
  for (const auto& st : s.stages)
    if (st.late) stages += (stages.empty() ? "" : ", ") + st.name + " " + std::to_string(st.late);
  if (!stages.empty()) out += "; most of their time in: " + stages;
  std::string sources;
  for (const auto& [id, n] : f.sources) {
    if (!n.late) continue;
    std::string name = id == FrameLedger::kOtherSources ? "(other sources)" : unnamed_source(id);
    if (auto it = s.source_names.find(id); it != s.source_names.end() && !it->second.empty()) name = it->second;
    sources += (sources.empty() ? "" : ", ") + name + " " + std::to_string(n.late);
  }
  if (!sources.empty()) out += "; by source: " + sources;
  return out + "\n";
}

std::string format_summary(const PipelineSnapshot& s) {
  std::string out;
  char line[320];
  std::snprintf(line, sizeof line, "pipeline '%s': device %s, execution %s, %.2f s\n", s.name.c_str(),
                s.device.c_str(), s.execution.c_str(), s.elapsed_s);
  out += line;
  std::snprintf(line, sizeof line, "%-12s %-10s %9s %8s %9s %9s %9s %6s %9s %9s %9s %7s %7s\n", "stage", "kind",
                "frames", "fps", "host ms/b", "cpu ms/b", "gpu ms/b", "busy", "wait in", "wait out", "queue", "drops",
                "errors");
  out += line;
  for (const auto& st : s.stages) {
    char gpu[32] = "-", busy[16] = "-";
    if (st.on_gpu) {
      std::snprintf(gpu, sizeof gpu, "%.3f", st.gpu_ms_per_batch);
      std::snprintf(busy, sizeof busy, "%.0f%%", 100 * st.gpu_busy);
    }
    char queue[32] = "-";
    if (st.queue_capacity) std::snprintf(queue, sizeof queue, "%zu/%zu", st.queue_high_water, st.queue_capacity);
    const std::string name = display_name(st);
    // A stage that moved frames slowly (a sink retrying for minutes) shows two significant digits, not 0.0.
    char fps[32];
    std::snprintf(fps, sizeof fps, st.fps > 0 && st.fps < 0.05 ? "%.2g" : "%.1f", st.fps);
    std::snprintf(line, sizeof line, "%-12s %-10s %9llu %8s %9.3f %9.3f %9s %6s %8.0fms %7.0fms %9s %7llu %7llu\n",
                  name.c_str(), st.kind.c_str(), static_cast<unsigned long long>(st.frames), fps,
                  st.host_ms_per_batch, st.cpu_ms_per_batch, gpu, busy, st.wait_in_ms, st.wait_out_ms, queue,
                  static_cast<unsigned long long>(st.dropped), static_cast<unsigned long long>(st.errors));
    out += line;
  }
  const auto& f = s.frames;
  std::snprintf(line, sizeof line,
                "frames: produced %llu = delivered %llu + dropped %llu + failed %llu + in flight %llu\n",
                static_cast<unsigned long long>(f.produced), static_cast<unsigned long long>(f.delivered),
                static_cast<unsigned long long>(f.dropped), static_cast<unsigned long long>(f.failed),
                static_cast<unsigned long long>(f.in_flight()));
  out += line;
  if (!f.sources.empty()) {
    std::snprintf(line, sizeof line, "  %-24s %10s %10s %10s %10s %10s\n", "source", "produced", "delivered", "dropped",
                  "failed", "in flight");
    out += line;
    for (const auto& [id, n] : f.sources) {
      std::string name = id == FrameLedger::kOtherSources ? "(other sources)" : unnamed_source(id);
      if (auto it = s.source_names.find(id); it != s.source_names.end() && !it->second.empty()) name = it->second;
      if (name.size() > 24) name = name.substr(0, 21) + "...";
      std::snprintf(line, sizeof line, "  %-24s %10llu %10llu %10llu %10llu %10llu\n", name.c_str(),
                    static_cast<unsigned long long>(n.produced), static_cast<unsigned long long>(n.delivered),
                    static_cast<unsigned long long>(n.dropped), static_cast<unsigned long long>(n.failed),
                    static_cast<unsigned long long>(n.in_flight()));
      out += line;
    }
  }
  out += format_late(s);
  for (const auto& [reason, n] : f.drop_reasons)
    out += "  dropped " + std::to_string(n) + ": " + reason + "\n";
  for (const auto& e : f.errors) out += "  error: " + e + "\n";
  for (const auto& st : s.stages)
    if (!st.health.empty()) out += "  stage '" + st.name + "': " + st.health + "\n";
  int last_replica = -1;
  for (const auto& st : s.stages)
    if (st.replica > last_replica) {
      last_replica = st.replica;
      if (!st.down.empty()) out += "  " + st.down + "\n";
    }
  std::snprintf(line, sizeof line, "latency (capture to sink): p50 %.2f ms, p90 %.2f ms, p99 %.2f ms\n",
                static_cast<double>(s.latency_p50_ns) / 1e6, static_cast<double>(s.latency_p90_ns) / 1e6,
                static_cast<double>(s.latency_p99_ns) / 1e6);
  out += line;
  if (s.warmup_ns > 0) {
    std::snprintf(line, sizeof line, "warm-up: %.1f ms before the source opened (in no frame's latency)\n",
                  static_cast<double>(s.warmup_ns) / 1e6);
    out += line;
  }
  return out;
}

}  // namespace sluice
