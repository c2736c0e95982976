#include "runtime/pipeline.hpp"

#include <nlohmann/json.hpp>
#include <limits>
#include <mutex>
#include <utility>
#include <spdlog/spdlog.h>

#include "runtime/errors.hpp"
#include "runtime/job_ledger.hpp"
#include "runtime/latency_budget.hpp"
#include "runtime/thread_name.hpp"
#include "runtime/utf8.hpp"

namespace sluice {

const char* to_string(Execution e) noexcept { return e == Execution::serial ? "serial" : "pipelined"; }
const char* to_string(Device d) noexcept { return d == Device::cuda ? "cuda" : "cpu"; }

std::size_t PipelinePlan::pool_bytes(MemoryKind kind) const {
  std::size_t total = 0;
  for (const auto& st : stages)
    if (st.pool_slots > 0 && st.output.memory == kind) total += st.output.batch_bytes() * static_cast<std::size_t>(st.pool_slots);
  return total;
}

struct Pipeline::StageRuntime {
  Stream stream;                 // owned when the stage has its own stream
  StageContext ctx;
  std::unique_ptr<BatchPool> pool;
  std::unique_ptr<BoundedQueue<Batch*>> out_queue;
  std::vector<std::unique_ptr<BoundedQueue<Batch*>>> branch_queues;  // the tee: one into each branch
  std::vector<std::unique_ptr<BoundedQueue<Batch*>>> replica_queues;  // the source with replicas: one into each
  BoundedQueue<Batch*>* in_queue = nullptr;                          // the upstream stage's (or branch) queue
  std::vector<std::size_t> path;  // the stages from the source to this one (index by stage_done_ns position)
  std::vector<std::shared_ptr<Finishing>> finishing;  // a sink: completed inputs it has yet to finish
  GpuTimer timer;
  StageCounters counters;
  mutable std::mutex trace_mu;  // the stage thread appends while a reader may copy
  std::vector<TraceSlice> gpu_trace, host_trace;  // the current recording, up to their capacity
  bool opened = false;
  // The last failure logged and how many times it came again since (not logged: a full disk fails every batch).
  mutable std::mutex failure_mu;
  std::string last_failure;
  std::uint64_t failure_repeats = 0;
  std::string storage_failure;  // the first StorageFullError of a sink, for sink_failure()
};

struct Pipeline::Finishing {
  InputProgress progress;
  std::size_t pending = 0;  // sinks yet to finish it
  std::vector<std::string> outputs;
  std::string error;  // the first sink's that failed to finish it
};

namespace {
constexpr int kTimerSlots = 64;
constexpr int kPieceTimerSlots = 1024;  // a source's: one pair per frame copied, several batches in flight

// An NVTX range that closes on every way out of its scope, exceptions included.
class ScopedRange {
 public:
  explicit ScopedRange(const char* name) noexcept { gpu::range_push(name); }
  ~ScopedRange() { gpu::range_pop(); }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;
};

std::string first_frame(const Batch* b) {
  if (!b || b->frames.empty()) return "";
  const auto& f = b->frames.front();
  return " on frame " + std::to_string(f.source_id) + ":" + std::to_string(f.sequence) +
         (b->count > 1 ? " (batch of " + std::to_string(b->count) + ")" : "");
}
}  // namespace

Pipeline::Pipeline(PipelinePlan plan) : plan_(std::move(plan)) {
  plan_.shared->ledger = &ledger_;
  const bool gpu = plan_.device == Device::cuda;
  if (gpu) gpu::set_device(plan_.gpu);
  const bool serial = plan_.execution == Execution::serial;
  Stream shared;
  if (gpu && serial) shared = Stream::create();
  const bool replicated = !plan_.replica_gpus.empty();
  for (std::size_t i = 0; i < plan_.stages.size(); ++i) {
    auto& ps = plan_.stages[i];
    if (plan_.tee < 0 && !replicated) {  // a linear pipeline (also one a caller assembled by hand): each feeds the next
      ps.branch = -1;
      ps.upstream = static_cast<int>(i) - 1;
      ps.position = static_cast<int>(i);
    }
    auto rt = std::make_unique<StageRuntime>();
    if (gpu) gpu::set_device(ps.gpu);  // its stream, pool and events live there
    if (gpu && ps.stage->uses_gpu()) {
      if (!serial) rt->stream = Stream::create();
      rt->ctx.stream = serial ? shared.get() : rt->stream.get();
      const bool times_pieces = ps.role == StageRole::source;
      rt->timer = GpuTimer(times_pieces ? kPieceTimerSlots : kTimerSlots);
      if (times_pieces) rt->ctx.piece_timer = &rt->timer;
    }
    if (ps.pool_slots > 0) {
      // Readers with their own released events: each replica reading the source's batches (on its own GPU), or
      // each branch of a tee sharing a batch.
      const std::vector<int> readers = i == 0 && replicated ? plan_.replica_gpus
                                                            : std::vector<int>(plan_.branches.size(), ps.gpu);
      rt->pool = std::make_unique<BatchPool>(ps.name, ps.output, ps.pool_slots, gpu, readers);
      rt->ctx.out_pool = rt->pool.get();
    }
    if (static_cast<int>(i) == plan_.tee) {
      for (const auto& b : plan_.branches)
        rt->branch_queues.push_back(std::make_unique<BoundedQueue<Batch*>>(static_cast<std::size_t>(b.queue_depth), b.queue_policy));
    } else if (i == 0 && replicated) {
      for (std::size_t r = 0; r < plan_.replica_gpus.size(); ++r)
        rt->replica_queues.push_back(std::make_unique<BoundedQueue<Batch*>>(static_cast<std::size_t>(ps.queue_depth), ps.queue_policy));
    } else if (last_of_replica(i)) {
      if (!merged_)  // the replicas' batches, back in order, into the stage after them (replica 1's queue settings)
        merged_ = std::make_unique<BoundedQueue<Batch*>>(static_cast<std::size_t>(ps.queue_depth), ps.queue_policy);
    } else if (ps.role != StageRole::sink) {
      rt->out_queue = std::make_unique<BoundedQueue<Batch*>>(static_cast<std::size_t>(ps.queue_depth),
                                                             serial ? QueuePolicy::block : ps.queue_policy);
    }
    if (ps.role == StageRole::sink) ++sinks_;
    if (i > 0) {
      const auto up = static_cast<std::size_t>(ps.upstream);
      rt->in_queue = static_cast<int>(up) == plan_.tee ? rt_[up]->branch_queues[static_cast<std::size_t>(ps.branch)].get()
                     : ps.replica >= 0 && up == 0  ? rt_[0]->replica_queues[static_cast<std::size_t>(ps.replica)].get()
                     : last_of_replica(up)         ? merged_.get()
                                                   : rt_[up]->out_queue.get();
      rt->path = rt_[up]->path;
    }
    rt->path.push_back(i);
    rt->ctx.stop = &stop_;
    rt->ctx.pause = &paused_;
    rt_.push_back(std::move(rt));
  }
  if (shared) rt_.front()->stream = std::move(shared);  // keeps the serial stream alive with the pipeline
  if (gpu) gpu::set_device(plan_.gpu);
  for (std::size_t r = 0; r < plan_.replica_gpus.size(); ++r) replicas_.push_back(std::make_unique<ReplicaState>());
  if (replicated)
    merge_ = std::make_unique<ReplicaMerge>(plan_.replica_gpus.size(), [this](BatchLease b) { push_merged(std::move(b)); });
}

bool Pipeline::last_of_replica(std::size_t i) const {
  const auto& ps = plan_.stages[i];
  return ps.replica >= 0 && i == 1 + static_cast<std::size_t>((ps.replica + 1) * plan_.replica_length) - 1;
}

std::string Pipeline::replica_name(int r) const {
  const std::string where = plan_.device == Device::cuda ? " (gpu " + std::to_string(plan_.replica_gpus[static_cast<std::size_t>(r)]) + ")" : "";
  return "replica " + std::to_string(r + 1) + where;
}

std::string Pipeline::replica_down(int r) const {
  const ReplicaState& state = *replicas_[static_cast<std::size_t>(r)];
  if (!state.down.load(std::memory_order_acquire)) return {};
  std::lock_guard lock(state.mu);
  return state.why;
}

void Pipeline::take_replica_down(int r, const std::string& why) {
  ReplicaState& state = *replicas_[static_cast<std::size_t>(r)];
  {
    std::lock_guard lock(state.mu);
    if (state.down.load()) return;
    state.why = replica_name(r) + " is down after: " + why;
    state.down.store(true, std::memory_order_release);
  }
  spdlog::error("{}; its batches go to the other replicas", state.why);
}

// The source's batch goes to the live replica with the fewest batches in it (handed to it and not out yet: a slower
// replica gets fewer; ties: the next in turn), numbered for the merge behind the replicas. With every replica down
// its frames fail.
void Pipeline::dispatch(BatchLease out) {
  auto& rt = *rt_[0];
  const std::size_t n = rt.replica_queues.size();
  std::size_t pick = n, fewest = std::numeric_limits<std::size_t>::max();
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t r = (next_replica_ + k) % n;
    if (!replica_down(static_cast<int>(r)).empty()) continue;
    const auto load = static_cast<std::size_t>(std::max<std::int64_t>(0, replicas_[r]->outstanding.load()));
    if (load < fewest) fewest = load, pick = r;
  }
  if (pick == n) {
    rt.counters.errors++;
    errors_of_frames_.fetch_add(1);
    settle(0, out->frames, FrameFate::failed, "every replica is down (" + replica_down(0) + ")");
    return;
  }
  next_replica_ = (pick + 1) % n;
  out->order = next_order_++;
  replicas_[pick]->outstanding.fetch_add(1);
  const std::int64_t t0 = now_ns();
  auto result = rt.replica_queues[pick]->push(out.detach());
  rt.counters.wait_out_ns += static_cast<std::uint64_t>(now_ns() - t0);
  if (!result.dropped) return;
  BatchLease dropped = BatchLease::adopt(*result.dropped);
  rt.counters.dropped += static_cast<std::uint64_t>(dropped->count);
  left_replica(static_cast<int>(pick), dropped->order, nullptr);  // an older one of its batches, when leaky
  const std::string queue = "queue into " + replica_name(static_cast<int>(pick));
  settle(0, dropped->frames, FrameFate::dropped,
         !result.accepted ? queue + " closed" : queue + " full (leaky: " + std::string(to_string(plan_.stages[0].queue_policy)) + ")");
}

// A batch leaves replica r: finished (to the merge, which hands it on in its turn), or not (the merge skips it).
void Pipeline::left_replica(int r, std::uint64_t order, const Batch* finished) {
  replicas_[static_cast<std::size_t>(r)]->outstanding.fetch_sub(1);
  if (!finished) merge_->skip(order);
}

// The merge's batches, in the source's order, into the stage after the replicas.
void Pipeline::push_merged(BatchLease b) {
  auto result = merged_->push(b.detach());
  if (!result.dropped) return;
  BatchLease dropped = BatchLease::adopt(*result.dropped);
  settle(plan_.after_replicas(), dropped->frames, FrameFate::dropped,
         !result.accepted ? "queue after the replicas closed"
                          : "queue after the replicas full (leaky: " + std::string(to_string(merged_->policy())) + ")");
}

Pipeline::~Pipeline() {
  request_stop();
  wait();
  plan_.shared->ledger = nullptr;  // the plan's stages may outlive this runner (they do not, but say so)
}

void Pipeline::record_trace(std::chrono::nanoseconds duration, std::size_t max_slices) {
  for (auto& rt : rt_) {
    std::lock_guard lock(rt->trace_mu);
    rt->host_trace.clear();
    rt->gpu_trace.clear();
    rt->host_trace.reserve(max_slices);
    if (rt->ctx.stream) rt->gpu_trace.reserve(max_slices);
  }
  const auto until = now_ns() + std::min<std::int64_t>(duration.count(), std::numeric_limits<std::int64_t>::max() / 2);
  trace_until_ns_.store(until);
}

void Pipeline::begin_warm_up() {
  {
    std::lock_guard lock(warm_mu_);
    if (thread_count_ > 0) return;
    warm_begin_ns_ = now_ns();
    for (std::size_t i = 1; i < rt_.size(); ++i) warm_pending_ += warms_up(i) ? 1 : 0;
    thread_count_ = plan_.execution == Execution::serial ? 1 : rt_.size();
  }
  if (plan_.execution == Execution::serial) {
    threads_.emplace_back([this] { run_serial(); });
  } else {
    for (std::size_t i = 0; i < rt_.size(); ++i) threads_.emplace_back([this, i] { run_pipelined_stage(i); });
  }
}

bool Pipeline::warm() const {
  std::lock_guard lock(warm_mu_);
  return thread_count_ > 0 && warm_pending_ == 0;
}

void Pipeline::wait_warm() const {
  std::unique_lock lock(warm_mu_);
  warm_cv_.wait(lock, [&] { return thread_count_ > 0 && warm_pending_ == 0; });
}

void Pipeline::open_and_warm(std::size_t i) {
  struct CountWarm {  // on every way out, exceptions included: the source must never wait for a failed stage
    Pipeline& p;
    bool counts;
    ~CountWarm() {
      if (!counts) return;
      {
        std::lock_guard lock(p.warm_mu_);
        if (--p.warm_pending_ == 0) p.warmup_ns_ = now_ns() - p.warm_begin_ns_;
      }
      p.warm_cv_.notify_all();
    }
  } count{*this, warms_up(i)};
  const std::int64_t t0 = now_ns();
  try {
    open_stage(i);
    const ScopedRange range("warm-up");
    plan_.stages[i].stage->warm_up(rt_[i]->ctx);
  } catch (const std::exception& e) {
    std::lock_guard lock(warm_mu_);
    if (warm_error_.empty()) warm_error_ = "stage '" + plan_.stages[i].name + "': " + e.what();
    throw;
  }
  spdlog::info("stage '{}': warmed up in {:.1f} ms ({})", plan_.stages[i].name, static_cast<double>(now_ns() - t0) / 1e6,
               plan_.stages[i].stage->warm_up_plan());
}

std::string Pipeline::warm_error() const {
  std::lock_guard lock(warm_mu_);
  return warm_error_;
}

bool Pipeline::wait_for_go() {
  std::unique_lock lock(warm_mu_);
  warm_cv_.wait(lock, [&] { return go_ || stop_.load(); });
  // Once started, every stage runs (a stop right after start() drains what the source made before it saw it).
  return go_;
}

void Pipeline::start() {
  begin_warm_up();
  wait_warm();
  if (plan_.device == Device::cuda) {
    // One reference event places every stream's timing events on the host clock (for traces).
    std::int64_t reference_ns = 0;
    for (auto& rt : rt_) {
      if (!rt->ctx.stream) continue;
      if (!trace_reference_) {
        trace_reference_ = Event::create(true);
        gpu::event_record(trace_reference_.get(), rt->ctx.stream);
        gpu::event_synchronize(trace_reference_.get());  // once, before any data flows
        reference_ns = now_ns();
      }
      rt->timer.set_reference(trace_reference_.get(), reference_ns);
    }
  }
  start_ns_ = now_ns();
  {
    std::lock_guard lock(warm_mu_);
    go_ = true;
  }
  warm_cv_.notify_all();
}

void Pipeline::request_stop() noexcept {
  stop_.store(true);
  {
    std::lock_guard lock(gate_mu_);
    paused_.store(false);  // a paused source must see the stop
  }
  gate_cv_.notify_all();
  {
    std::lock_guard lock(warm_mu_);  // a source still waiting for start() must see the stop
  }
  warm_cv_.notify_all();
}

void Pipeline::set_paused(bool paused) noexcept {
  {
    std::lock_guard lock(gate_mu_);
    if (stop_.load()) return;
    paused_.store(paused);
  }
  gate_cv_.notify_all();
}

// Under the gate's lock a pause and the source's arrival at the gate are ordered: pause_taken() is true only
// while the source is really parked here (a resume and a new pause before it woke leave it parked).
void Pipeline::wait_while_paused() {
  std::unique_lock lock(gate_mu_);
  if (!paused_.load()) return;
  source_held_ = true;
  gate_cv_.wait(lock, [this] { return !paused_.load(); });
  source_held_ = false;
}

void Pipeline::source_left() noexcept {
  std::lock_guard lock(gate_mu_);
  source_gone_ = true;
}

bool Pipeline::pause_taken() const noexcept {
  std::lock_guard lock(gate_mu_);
  return paused_.load() && (source_held_ || source_gone_ || thread_count_ == 0);
}

void Pipeline::wait() {
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

void Pipeline::open_stage(std::size_t i) {
  auto& rt = *rt_[i];
  if (plan_.device == Device::cuda) gpu::set_device(plan_.stages[i].gpu);  // the current device is per thread
  plan_.stages[i].stage->open(rt.ctx);
  rt.opened = true;
}

void Pipeline::close_stage(std::size_t i) noexcept {
  auto& rt = *rt_[i];
  const auto& name = plan_.stages[i].name;
  try {
    if (plan_.stages[i].role == StageRole::sink) {
      if (rt.opened) finish_inputs(i);  // what the last batches completed
      if (sinks_ > 1) {
        // Several sinks (a tee): an input completes only once every branch settled its frames, maybe after this
        // sink's last batch. Wait for the other sinks to end, finishing what completes meanwhile, then once more.
        {
          std::lock_guard lock(finish_mu_);
          ++sinks_ended_;
        }
        finish_cv_.notify_all();
        for (;;) {
          {
            std::unique_lock lock(finish_mu_);
            if (finish_cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return sinks_ended_ == sinks_; })) break;
          }
          if (rt.opened) finish_inputs(i);
        }
        if (rt.opened) finish_inputs(i);
      }
    }
    {
      std::lock_guard lock(rt.failure_mu);
      if (rt.failure_repeats > 0)
        spdlog::error("stage '{}' ({}): the failure before failed {} more batch(es)", name, plan_.stages[i].kind,
                      std::exchange(rt.failure_repeats, 0));
    }
    if (rt.opened) plan_.stages[i].stage->close(rt.ctx);
    if (rt.ctx.stream) {
      gpu::stream_synchronize(rt.ctx.stream);  // shutdown: finish the timing events
      rt.timer.collect(true);
      keep_gpu_slices(rt);
      rt.counters.gpu_ns = rt.timer.total_ns();
      rt.counters.gpu_batches = rt.timer.timed_batches();
    }
  } catch (const std::exception& e) {
    rt.counters.errors++;
    spdlog::error("stage '{}': closing failed: {}", name, e.what());
  }
}

// Finished GPU intervals of stage `rt` go into the trace while a recording lasts.
void Pipeline::keep_gpu_slices(StageRuntime& rt) {
  rt.timer.drain_finished([&](const TraceSlice& slice) {
    if (slice.begin_ns >= trace_until_ns_.load(std::memory_order_relaxed)) return;
    std::lock_guard lock(rt.trace_mu);
    if (rt.gpu_trace.size() < rt.gpu_trace.capacity()) rt.gpu_trace.push_back(slice);
  });
}

std::string Pipeline::sink_failure() const {
  for (std::size_t i = 0; i < rt_.size(); ++i) {
    if (plan_.stages[i].role != StageRole::sink) continue;
    std::lock_guard lock(rt_[i]->failure_mu);
    if (!rt_[i]->storage_failure.empty())
      return "stage '" + plan_.stages[i].name + "' (" + plan_.stages[i].kind + "): " + rt_[i]->storage_failure;
  }
  return {};
}

void Pipeline::fail_frames(std::size_t i, const Batch* in, const std::string& what, bool storage_full) {
  const auto& ps = plan_.stages[i];
  auto& rt = *rt_[i];
  rt.counters.errors++;
  // The frames' reason leaves the frame out: one cause (a full disk) failing many batches is one reason in the
  // summary. The log names the first frame it failed, once per cause; a repeat is counted, said when it changes.
  const std::string reason = "stage '" + ps.name + "' (" + ps.kind + "): " + what;
  if (in && in->count > 0) {
    errors_of_frames_.fetch_add(1);  // its frames count failed
    settle(i, in->frames, FrameFate::failed, reason);
  }
  std::uint64_t repeats = 0;
  {
    std::lock_guard lock(rt.failure_mu);
    if (storage_full && rt.storage_failure.empty()) rt.storage_failure = what;
    if (rt.last_failure == what) {
      rt.failure_repeats++;
      return;
    }
    repeats = std::exchange(rt.failure_repeats, 0);
    rt.last_failure = what;
  }
  if (repeats > 0) spdlog::error("stage '{}' ({}): the failure before failed {} more batch(es)", ps.name, ps.kind, repeats);
  spdlog::error("stage '{}' ({}){}: {}", ps.name, ps.kind, first_frame(in), what);
}

void Pipeline::settle(std::size_t i, std::span<const FrameMeta> frames, FrameFate fate, const std::string& reason,
                      std::int64_t sink_ns, const std::array<std::int64_t, kMaxStages>* done) {
  const int branch = plan_.stages[i].branch;
  if (branch < 0) return settle_final(i, frames, fate, reason, sink_ns, done);
  // A branch's report: the frame's fate waits for the other branches'.
  const auto& b = plan_.branches[static_cast<std::size_t>(branch)];
  const std::string why = fate == FrameFate::delivered ? std::string()
                          : "branch " + std::to_string(branch + 1) + " ('" + plan_.stages[b.last].name + "'): " + reason;
  const auto rank = [](FrameFate f) { return f == FrameFate::failed ? 2 : f == FrameFate::dropped ? 1 : 0; };
  struct Group {
    FrameFate fate;
    std::string reason;
    std::vector<FrameMeta> frames;
  };
  std::vector<Group> settled;
  {
    std::lock_guard lock(join_mu_);
    for (const auto& f : frames) {
      const FrameKey key{f.source_id, f.sequence};
      const auto it = joining_.try_emplace(key).first;
      Joining& j = it->second;
      if (rank(fate) > rank(j.fate)) j.fate = fate, j.reason = why;  // the first worst fate and its reason
      if (++j.reports < static_cast<int>(plan_.branches.size())) continue;
      auto g = std::find_if(settled.begin(), settled.end(), [&](const Group& x) { return x.fate == j.fate && x.reason == j.reason; });
      if (g == settled.end()) g = settled.insert(settled.end(), Group{j.fate, j.reason, {}});
      g->frames.push_back(f);
      joining_.erase(it);
    }
  }
  for (const auto& g : settled) settle_final(i, g.frames, g.fate, g.reason, sink_ns, done);
}

void Pipeline::settle_final(std::size_t i, std::span<const FrameMeta> frames, FrameFate fate, const std::string& reason,
                            std::int64_t sink_ns, const std::array<std::int64_t, kMaxStages>* done) {
  if (frames.empty()) return;
  switch (fate) {
    case FrameFate::delivered: {
      for (const auto& f : frames) latency_.record(sink_ns - f.capture_ns);
      ledger_.delivered(frames);
      const auto& path = rt_[i]->path;
      for (const auto& f : frames) {
        if (!is_late(f, sink_ns)) continue;
        ledger_.late(f);  // delivered all the same: late is counted, never a reason to drop
        if (done) rt_[path[std::min(dominant_stage(f, *done, path.size()), path.size() - 1)]]->counters.late++;
      }
      break;
    }
    case FrameFate::dropped: ledger_.dropped(frames, reason); break;
    case FrameFate::failed: ledger_.failed(frames, reason); break;
  }
  plan_.shared->inputs.settle(frames, fate);
}

// Inputs whose every frame is settled: the sink commits their outputs, then the job ledger records them.
// Only input-side errors are recorded as failed; an input the sink could not finish, or whose frames failed
// in a stage, is left out so that a restart does it again.
void Pipeline::finish_inputs(std::size_t sink) {
  auto& shared = *plan_.shared;
  auto& rt = *rt_[sink];
  std::vector<std::shared_ptr<Finishing>> mine;
  std::vector<InputProgress> completed = shared.inputs.take_completed();
  for (InputProgress& p : completed) {
    // An input of a job shared with other workers is committed only while it is still ours: one another
    // worker took over (this one was cut off past claim_idle_s) is theirs to commit, not committed twice.
    if (p.interrupted || shared.outcomes.still_ours({p.source_id, p.uri, InputOutcome::retry, {}, p.options})) continue;
    spdlog::warn("input '{}' ({}): taken over by another worker of the job; its outputs are not committed here",
                 shown_uri(p.uri), p.source);
    p.interrupted = p.taken_over = true;
    p.error = "taken over by another worker of the job";
  }
  {
    // Whichever sink takes the completed inputs hands each to every sink (one, without a tee).
    std::lock_guard lock(finish_mu_);
    for (InputProgress& p : completed) {
      auto f = std::make_shared<Finishing>();
      f->progress = std::move(p);
      f->pending = sinks_;
      for (std::size_t k = 0; k < rt_.size(); ++k)
        if (plan_.stages[k].role == StageRole::sink) rt_[k]->finishing.push_back(f);
    }
    mine.swap(rt.finishing);
  }
  for (const auto& f : mine) {
    const InputProgress& p = f->progress;
    std::vector<std::string> outputs;
    std::string error;
    if (!p.interrupted) {  // stopped mid-way: the sink discards its partial outputs; the next run redoes it
      try {
        outputs = plan_.stages[sink].stage->finish_input(p, rt.ctx);
      } catch (const std::exception& e) {
        rt.counters.errors++;
        errors_of_frames_.fetch_add(1);  // the input counts as one with errors
        spdlog::error("stage '{}': finishing the outputs of '{}' failed: {}", plan_.stages[sink].name, shown_uri(p.uri), e.what());
        error = std::string("finishing its outputs failed: ") + e.what();
      }
    }
    bool last = false;
    {
      std::lock_guard lock(finish_mu_);
      f->outputs.insert(f->outputs.end(), outputs.begin(), outputs.end());
      if (f->error.empty()) f->error = error;
      last = --f->pending == 0;
    }
    if (last) conclude_input(*f);
  }
}

// Every sink finished the input: the job ledger records it, its source hears the outcome.
void Pipeline::conclude_input(const Finishing& f) {
  auto& shared = *plan_.shared;
  const InputProgress& p = f.progress;
  // What the input's source hears at the end (a Redis source acknowledges done and failed ones only).
  InputResult result{p.source_id, p.uri, InputOutcome::retry, {}, p.options};
  // An input left to be done again that a feed heard of is handed back to the job, which does it again (here or
  // on another worker): its failed frames and errors are not this run's final word on it.
  struct Tell {
    InputTracker& inputs;
    const InputOutcomes& outcomes;
    const InputResult& result;
    const InputProgress& progress;
    bool counted_with_errors;
    ~Tell() {
      if (outcomes.notify(result) && result.outcome == InputOutcome::retry)
        inputs.handed_back(progress, counted_with_errors);
    }
  } tell{shared.inputs, shared.outcomes, result, p, p.with_errors || !f.error.empty()};  // output_failed() counted it
  if (p.interrupted) {
    result.reason = p.taken_over ? p.error : "interrupted";
    return;
  }
  if (!f.error.empty()) {
    result.reason = f.error;
    return;
  }
  const std::vector<std::string>& outputs = f.outputs;
  if (!p.error.empty()) spdlog::warn("input '{}' ({}): {}", shown_uri(p.uri), p.source, p.error);
  const bool input_failed = !p.error.empty();
  if (input_failed && p.transient) {
    // A failure that may pass (a remote file's server refused, timed out, answered 5xx): an input whose source
    // tries it again later is handed back to its job, not recorded failed; otherwise it fails as any other.
    result.transient = true;
    if (shared.outcomes.retries({p.source_id, p.uri, InputOutcome::retry, {}, p.options})) {
      result.reason = p.error;
      spdlog::info("input '{}' ({}): the failure may pass; its job tries it again later", shown_uri(p.uri), p.source);
      return;
    }
  }
  if (p.failed > 0 && !input_failed) result.reason = std::to_string(p.failed) + " frames failed in a stage";
  if (!shared.job || is_live(p.kind)) {  // no ledger: committed once the sinks finished it
    if (input_failed) result.fail(p.error);
    else if (p.failed == 0) result.outcome = InputOutcome::done;
    return;
  }
  try {
    if (input_failed) {
      shared.job->failed(p.uri, p.error, p.delivered, p.options);  // the records it did write
      result.fail(p.error);
    } else if (p.failed == 0) {
      shared.job->done(p.uri, p.delivered, outputs, p.options);
      result.outcome = InputOutcome::done;
    } else {
      spdlog::warn("input '{}': {} frames failed; not recorded as done, a restart does it again", shown_uri(p.uri), p.failed);
    }
  } catch (const std::exception& e) {
    spdlog::error("job ledger {}: {}", shared.job->path().string(), e.what());
    result.outcome = InputOutcome::retry;
    result.reason = std::string("the job ledger: ") + e.what();
  }
}

// Runs stage i on one batch (none for a source) and returns what it emits. GPU work is only enqueued:
// `ready` of the output and `released` of the input are recorded on the stage's stream.
BatchLease Pipeline::step(std::size_t i, BatchLease& in) {
  StepTimes times;
  BatchLease out;
  try {
    Batch* const pictures = wait_for_input(i, in.get());
    bool failed = false;
    out = run_stage(i, in, times, failed);
    if (failed) return {};
    hand_on(i, in, out, pictures, times.end);
  } catch (const std::exception& e) {
    // The runner's own GPU calls around the stage failed (its device faulted): the batch in hand fails, and the
    // stage with it (the caller's handler).
    if (const Batch* lost = out ? out.get() : in.get(); lost && plan_.stages[i].role != StageRole::source)
      fail_frames(i, lost, e.what());
    throw;
  }
  account(i, in.get(), out.get(), times);
  return out;
}

// The stage's stream (or, for a host stage, its thread) waits for the input's GPU work; returns the pictures the
// stage reads, if it reads any.
Batch* Pipeline::wait_for_input(std::size_t i, Batch* in) {
  const gpu::StreamHandle s = rt_[i]->ctx.stream;
  const Stage& stage = *plan_.stages[i].stage;
  if (in && in->ready_pending) {
    if (s) gpu::stream_wait_event(s, in->ready.get());
    // A host stage waits for the batch's GPU work, except one that passes the batch on without touching it
    // (upload of device frames): the event stays pending for the next stage.
    else if (!stage.forwards_input()) gpu::event_synchronize(in->ready.get());
  }
  Batch* const pictures = in && stage.reads_pictures() ? in->pictures : nullptr;
  if (pictures && pictures->ready_pending) {  // ordered already through the chain's events; cheap to say so
    if (s) gpu::stream_wait_event(s, pictures->ready.get());
    else gpu::event_synchronize(pictures->ready.get());
  }
  return pictures;
}

// Calls the stage. A stage that throws fails the batch's frames (`failed`; a source's error goes to its loop).
BatchLease Pipeline::run_stage(std::size_t i, BatchLease& in, StepTimes& times, bool& failed) {
  auto& rt = *rt_[i];
  const auto& ps = plan_.stages[i];
  const gpu::StreamHandle s = rt.ctx.stream;
  times.begin = now_ns();
  times.cpu_begin = thread_cpu_ns();
  times.helper_cpu_before = rt.ctx.helper_cpu_ns;
  times.acquire_wait_before = rt.ctx.acquire_wait_ns;
  times.pacing_wait_before = rt.ctx.pacing_wait_ns;
  const std::uint64_t first_sequence = in && !in->frames.empty() ? in->frames.front().sequence : 0;
  BatchLease out;
  try {
    const ScopedRange range(ps.name.c_str());
    const bool pieces = rt.ctx.piece_timer != nullptr;
    if (s && !pieces) rt.timer.begin(s, first_sequence, in ? in->count : 0);
    out = ps.stage->process(in.get(), rt.ctx);
    if (s) {
      if (pieces) rt.timer.close_batch();
      else rt.timer.end(s);
      rt.counters.gpu_ns = rt.timer.total_ns();
      rt.counters.gpu_batches = rt.timer.timed_batches();
      keep_gpu_slices(rt);
    }
  } catch (const std::exception& e) {
    if (ps.role == StageRole::source) throw;
    if (ps.replica >= 0 && dynamic_cast<const GpuFault*>(&e)) take_replica_down(ps.replica, e.what());
    if (s) {
      try {
        gpu::stream_synchronize(s);  // error path: nothing may still read the input when it is recycled
      } catch (const std::exception&) {
      }
    }
    fail_frames(i, in.get(), e.what(), dynamic_cast<const StorageFullError*>(&e) != nullptr);
    failed = true;
    return {};
  }
  if (ps.stage->forwards_input()) out = std::move(in);
  times.end = now_ns();
  return out;
}

// What goes with the batches: the output gets the input's frames and times, its ready event and the pictures
// it carries on; the input's released event tells its pool's next writer when this stage is done reading it.
void Pipeline::hand_on(std::size_t i, BatchLease& in, BatchLease& out, Batch* pictures, std::int64_t done_ns) {
  const auto& ps = plan_.stages[i];
  const gpu::StreamHandle s = rt_[i]->ctx.stream;
  // A tee's shared batch that a branch stage forwards stays untouched (the other branches read it): no done
  // time (the tee stamped it for the branch's positions), no new ready event (forwarding adds no GPU work).
  const bool forwards_shared = out && out->shared;
  if (pictures && s) {  // this stage's reads of them come before the slot's next writer
    gpu::event_record(pictures->released.get(), s);
    pictures->release_pending = true;
  }
  if (out) {
    if (in && out.get() != in.get()) {
      out->count = in->count;
      out->frames = in->frames;  // within reserved capacity: no allocation
      out->stage_done_ns = in->stage_done_ns;
      out->order = in->order;
      if (ps.passes_pictures) out->pictures = std::exchange(in->pictures, nullptr);
    }
    if (!forwards_shared) out->stage_done_ns[static_cast<std::size_t>(ps.position)] = done_ns;
    if (s && !forwards_shared) {
      gpu::event_record(out->ready.get(), s);
      out->ready_pending = true;
    }
    if (ps.role == StageRole::source) ledger_.produced(out->frames);
  }
  if (in && s) {
    if (ps.replica >= 0 && ps.upstream == 0 && static_cast<std::size_t>(ps.replica) < in->branch_released.size()) {
      gpu::event_record(in->branch_released[static_cast<std::size_t>(ps.replica)].get(), s);  // on its own GPU
      in->branch_release_pending[static_cast<std::size_t>(ps.replica)] = 1;
    } else if (!in->shared) {
      gpu::event_record(in->released.get(), s);
      in->release_pending = true;
    } else if (const auto b = static_cast<std::size_t>(ps.branch); b < in->branch_released.size()) {
      gpu::event_record(in->branch_released[b].get(), s);  // this branch's own: the others record theirs
      in->branch_release_pending[b] = 1;
    } else {
      gpu::stream_synchronize(s);  // a shared batch from a pool without branch events (none the runner makes)
    }
  }
  // The frames go on by reference as the output's pictures, with their released event recorded above.
  if (ps.keeps_pictures && in && out && out.get() != in.get()) out->pictures = in.detach();
}

// The stage's counters and trace; a sink's batch is delivered here (and the inputs it completed finished).
void Pipeline::account(std::size_t i, Batch* in, const Batch* out, const StepTimes& times) {
  auto& rt = *rt_[i];
  const auto& ps = plan_.stages[i];
  const std::int64_t blocked = rt.ctx.acquire_wait_ns - times.acquire_wait_before;  // waiting for a free output slot
  const std::int64_t pacing = rt.ctx.pacing_wait_ns - times.pacing_wait_before;     // waiting for frames to be due
  rt.counters.host_ns += static_cast<std::uint64_t>(times.end - times.begin - blocked - pacing);
  rt.counters.wait_out_ns += static_cast<std::uint64_t>(blocked);
  rt.counters.wait_in_ns += static_cast<std::uint64_t>(pacing);
  // What this step handled: its output, or the input a sink consumed.
  if (const Batch* handled = out ? out : in) {
    rt.counters.frames += static_cast<std::uint64_t>(handled->count);
    rt.counters.batches++;
    if (times.begin < trace_until_ns_.load(std::memory_order_relaxed)) {
      const std::uint64_t first = handled->frames.empty() ? 0 : handled->frames.front().sequence;
      std::lock_guard lock(rt.trace_mu);
      if (rt.host_trace.size() < rt.host_trace.capacity())
        rt.host_trace.push_back({times.begin, times.end, first, handled->count});
    }
  }
  if (ps.role == StageRole::sink && in) {
    // How long the batch took since it left the batcher: what the batcher must leave time for.
    if (i > 0) plan_.shared->downstream.record(times.end - in->stage_done_ns[0]);
    auto done = in->stage_done_ns;
    done[static_cast<std::size_t>(ps.position)] = times.end;
    settle(i, in->frames, FrameFate::delivered, {}, times.end, &done);
    finish_inputs(i);
  }
  const std::int64_t helpers = rt.ctx.helper_cpu_ns - times.helper_cpu_before;  // its crew's threads, if any
  rt.counters.cpu_ns += static_cast<std::uint64_t>(thread_cpu_ns() - times.cpu_begin + helpers);
}

void Pipeline::push_downstream(std::size_t i, BatchLease out) {
  auto& rt = *rt_[i];
  const std::int64_t t0 = now_ns();
  auto result = rt.out_queue->push(out.detach());
  rt.counters.wait_out_ns += static_cast<std::uint64_t>(now_ns() - t0);
  if (result.dropped) {
    BatchLease dropped = BatchLease::adopt(*result.dropped);
    const auto n = static_cast<std::uint64_t>(dropped->count);
    rt.counters.dropped += n;
    const auto& ps = plan_.stages[i];
    if (ps.replica >= 0) left_replica(ps.replica, dropped->order, nullptr);
    settle(i, dropped->frames, FrameFate::dropped,
           !result.accepted ? "queue after '" + ps.name + "' closed"
                            : "queue after '" + ps.name + "' full (leaky: " + std::string(to_string(ps.queue_policy)) + ")");
  }
}

// The tee hands one share of the batch to each branch's queue (by reference: the same slot); the last branch
// to let go of it gives it back to its pool. A branch whose queue drops a batch reports its frames dropped.
void Pipeline::push_branches(std::size_t tee, BatchLease out) {
  auto& rt = *rt_[tee];
  const std::size_t trunk = static_cast<std::size_t>(plan_.stages[tee].position) + 1;
  for (std::size_t p = trunk; p < kMaxStages; ++p) out->stage_done_ns[p] = out->stage_done_ns[trunk - 1];
  Batch* b = out.detach();
  b->shared = true;
  b->holders.store(static_cast<int>(plan_.branches.size()), std::memory_order_relaxed);  // the queues publish it
  for (std::size_t k = 0; k < plan_.branches.size(); ++k) {
    const std::int64_t t0 = now_ns();
    auto result = rt.branch_queues[k]->push(b);
    rt.counters.wait_out_ns += static_cast<std::uint64_t>(now_ns() - t0);
    if (!result.dropped) continue;
    BatchLease dropped = BatchLease::adopt(*result.dropped);  // this branch's share (maybe of an older batch)
    const auto& branch = plan_.branches[k];
    rt.counters.dropped += static_cast<std::uint64_t>(dropped->count);
    const std::string queue = "queue into branch " + std::to_string(k + 1) + " ('" + plan_.stages[branch.first].name + "')";
    // Reported as the branch's first stage: the frames' fate in that branch.
    settle(branch.first, dropped->frames, FrameFate::dropped,
           !result.accepted ? queue + " closed" : queue + " full (leaky: " + std::string(to_string(branch.queue_policy)) + ")");
  }
}

void Pipeline::run_pipelined_stage(std::size_t i) {
  name_this_thread(kStageThreadName);
  auto& rt = *rt_[i];
  const auto& ps = plan_.stages[i];
  BoundedQueue<Batch*>* in_queue = rt.in_queue;
  constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t order_in_hand = kNone;  // a replica's batch being worked on (the merge waits for its number)
  try {
    // Stages with a warm-up open and warm up at once; the others (the source, sinks with their outputs) open
    // after start(), so a reload's new generation touches no output, ledger or source while the old one runs.
    const bool go = in_queue && warms_up(i) ? (open_and_warm(i), true) : wait_for_go();
    if (go && !rt.opened) open_stage(i);
    while (go) {
      BatchLease in;
      if (in_queue) {
        const std::int64_t t0 = now_ns();
        std::optional<Batch*> b;
        if (ps.role == StageRole::sink) {
          // An input may complete after its last frame got here (its reader saw the end later): while no
          // batch comes, the sink still finishes such inputs (a job fed at run time may send no batch for long).
          b = in_queue->pop_for(std::chrono::milliseconds(100));
          if (!b && !in_queue->closed_and_empty()) {
            rt.counters.wait_in_ns += static_cast<std::uint64_t>(now_ns() - t0);
            finish_inputs(i);
            continue;
          }
        } else {
          b = in_queue->pop();
        }
        rt.counters.wait_in_ns += static_cast<std::uint64_t>(now_ns() - t0);
        if (!b) break;  // upstream ended and the queue is drained
        in = BatchLease::adopt(*b);
      } else {
        wait_while_paused();
        if (stop_.load()) break;
      }
      if (ps.replica >= 0) {
        if (const std::string down = replica_down(ps.replica); !down.empty()) {  // its frames fail, unread
          fail_frames(i, in.get(), down);
          left_replica(ps.replica, in->order, nullptr);
          continue;
        }
        order_in_hand = in->order;
      }
      BatchLease out = step(i, in);
      if (ps.role == StageRole::source && !out) {
        if (paused_.load()) continue;  // cut short by the pause with nothing made: wait at the gate, ask again
        break;                         // end of stream
      }
      if (out && static_cast<int>(i) == plan_.tee) push_branches(i, std::move(out));
      else if (out && !rt.replica_queues.empty()) dispatch(std::move(out));
      else if (out && last_of_replica(i)) {
        left_replica(ps.replica, out->order, out.get());
        merge_->put(std::move(out));
      }
      else if (out && rt.out_queue) push_downstream(i, std::move(out));
      else if (!out && order_in_hand != kNone) left_replica(ps.replica, order_in_hand, nullptr);  // failed, or kept nothing
      order_in_hand = kNone;
    }
  } catch (const std::exception& e) {
    // A stage that cannot go on: fail what reaches it so upstream never blocks and the counts add up. In a
    // replica, the replica goes down: the source sends the others its batches.
    fail_frames(i, nullptr, e.what());
    if (ps.replica >= 0) {
      take_replica_down(ps.replica, "stage '" + ps.name + "': " + e.what());
      if (order_in_hand != kNone) left_replica(ps.replica, order_in_hand, nullptr);
    }
    if (in_queue)
      while (auto b = in_queue->pop()) {
        BatchLease lost = BatchLease::adopt(*b);
        fail_frames(i, lost.get(), std::string("stage stopped after: ") + e.what());
        if (ps.replica >= 0) left_replica(ps.replica, lost->order, nullptr);
      }
  }
  if (!in_queue) source_left();
  if (rt.out_queue) rt.out_queue->close();
  for (auto& q : rt.branch_queues) q->close();
  for (auto& q : rt.replica_queues) q->close();
  if (last_of_replica(i) && merge_->replica_ended()) merged_->close();
  close_stage(i);
  end_ns_ = now_ns();
  finished_threads_++;
}

void Pipeline::run_serial() {
  name_this_thread(kStageThreadName);
  const std::size_t n = rt_.size();
  std::size_t failing = n - 1;  // the stage an error is put on: the one opening, else the last
  try {
    // The stages with a warm-up first (none of them waits for the source in open()), then the source once
    // start() came, then the rest in order (a sink may wait in open() for the source's job ledger).
    try {
      for (std::size_t i = 1; i < n; ++i)
        if (warms_up(i)) failing = i, open_and_warm(i);
    } catch (...) {
      {
        std::lock_guard lock(warm_mu_);
        warm_pending_ = 0;  // the stages after the failing one will not warm: nobody waits for them
      }
      warm_cv_.notify_all();
      throw;
    }
    const bool go = wait_for_go();
    for (std::size_t i = 0; go && i < n; ++i)
      if (!rt_[i]->opened) failing = i, open_stage(i);
    failing = n - 1;
    while (go) {
      wait_while_paused();
      if (stop_.load()) break;
      BatchLease cur;
      cur = step(0, cur);
      if (!cur && paused_.load()) continue;  // cut short by the pause with nothing made (see run_pipelined_stage)
      if (!cur) break;
      for (std::size_t i = 1; i < n && cur; ++i) {
        BatchLease next = step(i, cur);
        if (rt_[i]->ctx.stream) gpu::stream_synchronize(rt_[i]->ctx.stream);  // serial: the "before" design
        cur = std::move(next);
      }
    }
  } catch (const std::exception& e) {
    fail_frames(failing, nullptr, e.what());
  }
  source_left();
  for (std::size_t i = 0; i < n; ++i) close_stage(i);
  end_ns_ = now_ns();
  finished_threads_++;
}

PipelineSnapshot Pipeline::snapshot() const {
  PipelineSnapshot s;
  s.name = plan_.name;
  s.device = to_string(plan_.device);
  s.execution = to_string(plan_.execution);
  s.running = !finished();
  const std::int64_t end = s.running || end_ns_ == 0 ? now_ns() : end_ns_.load();
  s.elapsed_s = static_cast<double>(end - start_ns_) / 1e9;
  for (std::size_t i = 0; i < rt_.size(); ++i) {
    const auto& rt = *rt_[i];
    const auto& ps = plan_.stages[i];
    const auto& c = rt.counters;
    StageSnapshot st;
    st.name = ps.name;
    st.kind = ps.kind;
    st.output = ps.role == StageRole::sink ? "" : ps.output.describe();
    st.on_gpu = rt.ctx.stream != nullptr;
    st.replica = ps.replica;
    st.gpu = plan_.device == Device::cuda ? ps.gpu : -1;
    if (ps.replica >= 0) st.down = replica_down(ps.replica);
    st.health = ps.stage->health();
    st.frames = c.frames;
    st.batches = c.batches;
    st.errors = c.errors;
    st.dropped = c.dropped;
    st.late = c.late;
    st.fps = s.elapsed_s > 0 ? static_cast<double>(st.frames) / s.elapsed_s : 0;
    const double batches = std::max<double>(1, static_cast<double>(st.batches));
    st.host_ms_per_batch = static_cast<double>(c.host_ns) / 1e6 / batches;
    st.cpu_ms_per_batch = static_cast<double>(c.cpu_ns) / 1e6 / batches;
    st.gpu_ms_per_batch = c.gpu_batches ? static_cast<double>(c.gpu_ns) / 1e6 / static_cast<double>(c.gpu_batches) : 0;
    st.host_ms_total = static_cast<double>(c.host_ns) / 1e6;
    st.gpu_ms_total = static_cast<double>(c.gpu_ns) / 1e6;
    st.cpu_ms_total = static_cast<double>(c.cpu_ns) / 1e6;
    st.gpu_batches = c.gpu_batches;
    st.gpu_busy = s.elapsed_s > 0 ? st.gpu_ms_total / 1e3 / s.elapsed_s : 0;
    st.wait_in_ms = static_cast<double>(c.wait_in_ns) / 1e6;
    st.wait_out_ms = static_cast<double>(c.wait_out_ns) / 1e6;
    if (rt.out_queue) {
      st.queue_depth = rt.out_queue->depth();
      st.queue_capacity = rt.out_queue->capacity();
      st.queue_high_water = rt.out_queue->high_water();
      st.queue_policy = to_string(rt.out_queue->policy());
    }
    for (const auto& q : rt.branch_queues) {  // the tee: its queues into the branches, together
      st.queue_depth += q->depth();
      st.queue_capacity += q->capacity();
      st.queue_high_water = std::max(st.queue_high_water, q->high_water());
      const std::string policy(to_string(q->policy()));
      if (st.queue_policy.empty()) st.queue_policy = policy;
      else if (st.queue_policy != policy) st.queue_policy = "mixed";
    }
    s.stages.push_back(std::move(st));
  }
  s.frames = ledger_.totals();
  for (const auto& [id, counts] : s.frames.sources) s.source_names[id] = plan_.shared->inputs.source_name(id);
  s.latency_p50_ns = latency_.quantile_ns(0.50);
  s.latency_p90_ns = latency_.quantile_ns(0.90);
  s.latency_p99_ns = latency_.quantile_ns(0.99);
  s.latency_budget_ns = plan_.latency_budget_ns;
  s.downstream_ns = plan_.shared->downstream.ns();
  s.warmup_ns = warmup_ns_.load();
  return s;
}

}  // namespace sluice

namespace sluice {

std::string Pipeline::trace_json() const {
  nlohmann::json events = nlohmann::json::array();
  const auto us = [&](std::int64_t ns) { return static_cast<double>(ns - start_ns_) / 1e3; };
  int tid = 0;
  auto track = [&](const std::string& name, std::vector<TraceSlice> slices, const char* category) {
    if (slices.empty()) return;
    ++tid;
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", 1}, {"tid", tid}, {"args", {{"name", name}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", 1}, {"tid", tid}, {"args", {{"sort_index", tid}}}});
    for (const auto& sl : slices)
      events.push_back({{"ph", "X"}, {"name", "batch @" + std::to_string(sl.first_sequence)}, {"cat", category},
                        {"pid", 1}, {"tid", tid}, {"ts", us(sl.begin_ns)}, {"dur", static_cast<double>(sl.end_ns - sl.begin_ns) / 1e3},
                        {"args", {{"frames", sl.frames}, {"first_sequence", sl.first_sequence}}}});
  };
  for (std::size_t i = 0; i < rt_.size(); ++i) {
    const auto& ps = plan_.stages[i];
    std::vector<TraceSlice> host, gpu;
    {
      std::lock_guard lock(rt_[i]->trace_mu);
      host = rt_[i]->host_trace;
      gpu = rt_[i]->gpu_trace;
    }
    track(ps.name + " (host)", std::move(host), "host");
    track(ps.name + " (GPU stream)", std::move(gpu), "gpu");
  }
  nlohmann::json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"},
                        {"otherData", {{"pipeline", plan_.name}, {"execution", to_string(plan_.execution)}}}};
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);  // names need not be UTF-8
}

}  // namespace sluice
