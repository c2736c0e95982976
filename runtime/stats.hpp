#pragma once
// Counters the stages update while running, and the snapshot the daemon prints or serves.
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace sluice {

std::int64_t now_ns() noexcept;         // steady clock
std::int64_t wall_ns() noexcept;        // system clock: ns since the Unix epoch (UTC)
// RFC 3339 in UTC with milliseconds, e.g. "2026-12-02T01:03:04.123Z".
std::string format_utc_ms(std::int64_t unix_ns);
std::int64_t thread_cpu_ns() noexcept;  // CPU time of the calling thread
double process_cpu_seconds() noexcept;  // CPU time of every thread of the process, user + system

// Log-scale latency histogram (about 4% bucket width, 1 µs .. 1 h); lock-free recording.
class LatencyHistogram {
 public:
  void record(std::int64_t ns) noexcept;
  std::uint64_t count() const noexcept { return count_.load(std::memory_order_relaxed); }
  // Upper edge of the bucket holding the p-quantile (p in 0..1), in ns; 0 when empty.
  std::int64_t quantile_ns(double p) const noexcept;
  // Values recorded in buckets whose upper edge is <= ns (a Prometheus `le` bucket, at ~4% resolution).
  std::uint64_t count_at_most(std::int64_t ns) const noexcept;
  std::int64_t sum_ns() const noexcept { return sum_ns_.load(std::memory_order_relaxed); }

 private:
  static constexpr int kBuckets = 640;
  static int bucket_of(std::int64_t ns) noexcept;
  static std::int64_t upper_edge(int bucket) noexcept;
  std::array<std::atomic<std::uint64_t>, kBuckets> buckets_{};
  std::atomic<std::uint64_t> count_{0};
  std::atomic<std::int64_t> sum_ns_{0};
};

struct FrameMeta;

// Every frame a source produced ends in exactly one of: delivered, dropped (with a reason), failed.
class FrameLedger {
 public:
  // The same four counts per source (FrameMeta::source_id), for the run's summary.
  struct SourceTotals {
    std::uint64_t produced = 0, delivered = 0, dropped = 0, failed = 0;
    std::uint64_t late = 0;  // delivered past their latency budget (a subset of delivered, not a fate)
    std::uint64_t in_flight() const { return produced - delivered - dropped - failed; }
  };
  // After kMaxSources distinct sources, further ones are counted together under kOtherSources.
  static constexpr std::size_t kMaxSources = 1024;
  static constexpr std::uint32_t kOtherSources = 0xffffffffu;
  void produced(std::span<const FrameMeta> frames);
  void delivered(std::span<const FrameMeta> frames);
  void dropped(std::span<const FrameMeta> frames, const std::string& reason);
  void failed(std::span<const FrameMeta> frames, const std::string& error);
  // A delivered frame that missed its latency budget: counted beside its delivery, never instead of it.
  void late(const FrameMeta& frame);
  // Gives up on the frames in flight: they are counted failed with `reason` (in each source's row too), and
  // from now on every update is ignored (a stage thread that was stuck and wakes up later cannot count a frame
  // twice). Returns how many frames it failed.
  std::uint64_t abandon(const std::string& reason);
  bool abandoned() const noexcept { return abandoned_.load(); }

  struct Totals {
    std::uint64_t produced = 0, delivered = 0, dropped = 0, failed = 0;
    std::uint64_t late = 0;  // delivered past their latency budget
    std::map<std::string, std::uint64_t> drop_reasons;
    std::vector<std::string> errors;  // first few distinct errors, in order
    std::map<std::uint32_t, SourceTotals> sources;  // by source id
    std::uint64_t in_flight() const { return produced - delivered - dropped - failed; }
  };
  Totals totals() const;

 private:
  std::atomic<std::uint64_t> produced_{0}, delivered_{0}, dropped_{0}, failed_{0}, late_{0};
  std::atomic<bool> abandoned_{false};
  mutable std::mutex mu_;  // every update (once per batch): abandon() must see a consistent ledger
  std::map<std::string, std::uint64_t> drop_reasons_;
  std::vector<std::string> errors_;
  std::map<std::uint32_t, SourceTotals> sources_;
  enum class Column : std::uint8_t { produced, delivered, dropped, failed, late };
  void count(std::span<const FrameMeta> frames, Column column);  // mu_ held
};

struct StageCounters {
  std::atomic<std::uint64_t> frames{0}, batches{0}, errors{0};
  std::atomic<std::uint64_t> host_ns{0};           // time inside the stage's process() on its thread
  std::atomic<std::uint64_t> gpu_ns{0}, gpu_batches{0};  // from timing events on the stage's stream
  std::atomic<std::uint64_t> wait_in_ns{0};        // blocked waiting for input
  std::atomic<std::uint64_t> wait_out_ns{0};       // blocked on a full output queue or an empty pool
  std::atomic<std::uint64_t> dropped{0};           // frames dropped by this stage's output queue
  // CPU time of the stage's steps (process() and the runner's work around it, thread CPU clock), with what its
  // helper threads spent for it (StageContext::helper_cpu_ns).
  std::atomic<std::uint64_t> cpu_ns{0};
  std::atomic<std::uint64_t> late{0};              // late frames whose time went mostly to this stage
};

struct StageSnapshot {
  std::string name, kind, output;
  int replica = -1;  // which replica of `gpus:` it belongs to (-1: none)
  int gpu = -1;      // the CUDA device it runs on (-1: the CPU)
  std::string down;  // its replica is down: why
  std::uint64_t frames = 0, batches = 0, errors = 0, dropped = 0;
  std::uint64_t late = 0;  // late frames whose time went mostly to this stage
  double fps = 0, host_ms_per_batch = 0, cpu_ms_per_batch = 0, gpu_ms_per_batch = 0, wait_in_ms = 0, wait_out_ms = 0;
  bool on_gpu = false;
  // Totals since start, for windows computed from two snapshots.
  double host_ms_total = 0, gpu_ms_total = 0, cpu_ms_total = 0;
  std::uint64_t gpu_batches = 0;
  double gpu_busy = 0;  // GPU time of the stage's stream / wall time
  std::size_t queue_depth = 0, queue_capacity = 0, queue_high_water = 0;  // output queue; 0 for the sink
  std::string queue_policy;
  std::string health;  // Stage::health(): why it is stuck, "" when it is not
};

// How reports name a stage: its name, and for a replica's stage "@" and the replica (infer@2).
inline std::string display_name(const StageSnapshot& st) {
  return st.replica >= 0 ? st.name + "@" + std::to_string(st.replica + 1) : st.name;
}

struct PipelineSnapshot {
  std::string name, device, execution;
  std::map<std::uint32_t, std::string> source_names;  // for frames.sources, where known
  double elapsed_s = 0;
  std::vector<StageSnapshot> stages;
  FrameLedger::Totals frames;
  std::int64_t latency_p50_ns = 0, latency_p90_ns = 0, latency_p99_ns = 0;
  std::int64_t latency_budget_ns = 0;  // the pipeline's (sources may have their own); 0: none
  std::int64_t downstream_ns = 0;      // the batcher's current estimate of batcher -> sink's end
  std::int64_t warmup_ns = 0;          // opening and warming the stages with a warm-up, before the source opened
  bool running = false;
};

// The summary's line on late frames ("" when the pipeline has no budget and nothing was late).
std::string format_late(const PipelineSnapshot& s);
// The summary table `sluiced run` prints at the end.
std::string format_summary(const PipelineSnapshot& s);

}  // namespace sluice
