#pragma once
// The runner: one thread and one stream per stage with bounded queues between them (pipelined), or one
// thread and one stream with a sync after each stage (serial, the A/B baseline).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime/bounded_queue.hpp"
#include "runtime/gpu_timer.hpp"
#include "runtime/replica_merge.hpp"
#include "runtime/stage.hpp"
#include "runtime/stats.hpp"

namespace sluice {

enum class Execution { pipelined, serial };
const char* to_string(Execution e) noexcept;
const char* to_string(Device d) noexcept;

struct PlannedStage {
  std::string name, kind;
  StageRole role = StageRole::transform;
  std::unique_ptr<Stage> stage;
  std::optional<PayloadDesc> input;
  PayloadDesc output;            // meaningful unless role == sink
  int queue_depth = 4;           // the queue after this stage
  QueuePolicy queue_policy = QueuePolicy::block;
  int pool_slots = 0;            // 0: the stage takes no output pool (it forwards or it is the sink)
  std::string params;            // resolved parameters, "name=value ...", for `sluiced check`
  // Where the stage lies in the graph. Without a tee: branch -1, upstream i - 1, position i.
  int branch = -1;    // its branch of the tee, -1: the trunk (the source .. the tee)
  int upstream = -1;  // index of the stage that feeds it (-1: the source)
  int position = 0;   // its place on its path from the source (Batch::stage_done_ns, records' stage_ms)
  // Pictures (Batch::pictures) for a stage downstream that reads them: this stage keeps its frames input as its
  // output's pictures, or hands its input's pictures on to its output.
  bool keeps_pictures = false, passes_pictures = false;
  // Replicas (PipelinePlan::replica_gpus): the replica the stage belongs to (-1: not replicated), and the CUDA
  // device its stream, pool and events are on (device cuda).
  int replica = -1;
  int gpu = 0;
};

// One branch of a tee: stages [first, last] of PipelinePlan::stages (the last a sink), fed from the tee through
// a queue of its own.
struct PlannedBranch {
  std::size_t first = 0, last = 0;
  int queue_depth = 4;
  QueuePolicy queue_policy = QueuePolicy::block;
};

struct PipelinePlan {
  std::string name = "pipeline";
  Device device = Device::cpu;
  int gpu = 0;  // the device of every stage that is not replicated
  // Replicas of the stages after the source (`gpus:`): one device per replica, empty: none. Replica r's stages
  // follow the source as stages [1 + r * replica_length, 1 + (r + 1) * replica_length); the source hands each
  // batch to the least-loaded live replica, and the stage after the replicas takes them back in the source's order.
  std::vector<int> replica_gpus;
  int replica_length = 0;
  Execution execution = Execution::pipelined;
  std::int64_t latency_budget_ns = 0;  // what the sources stamp on their frames (for status and the summary)
  int batch_size = 1;                  // for `sluiced check`'s description of the batching policy
  std::int64_t batch_timeout_us = 0;
  std::vector<PlannedStage> stages;  // the trunk, then each branch's stages
  int tee = -1;                      // index of the tee stage, -1: a linear pipeline
  std::vector<PlannedBranch> branches;
  std::shared_ptr<PipelineShared> shared = std::make_shared<PipelineShared>();  // what the stages were given

  std::size_t pool_bytes(MemoryKind kind) const;
  // With replicas: the index of the first stage after them (the one the merge feeds).
  std::size_t after_replicas() const { return 1 + replica_gpus.size() * static_cast<std::size_t>(replica_length); }
};

class Pipeline {
 public:
  // Allocates every pool, stream and event; nothing is allocated after this.
  explicit Pipeline(PipelinePlan plan);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // Records per-batch intervals of every stage (its GPU stream and its host thread) for `duration` from
  // now, at most `max_slices` per track; a new call starts a new recording. Safe while running.
  void record_trace(std::chrono::nanoseconds duration, std::size_t max_slices = 1 << 16);
  // Starts every stage's thread: the stages with a warm-up (Stage::warm_up_plan) open and warm up; the source
  // waits for start() before it opens, so no frame is made (nor its latency clock started) before they are warm.
  // Returns at once; warm() says when they are done. start() calls it when nobody did.
  void begin_warm_up();
  bool warm() const;
  void wait_warm() const;
  // Once warm: why a stage could not open or warm up ("" when all did); its frames would fail.
  std::string warm_error() const;
  // Warms up (begin_warm_up, waiting for it), then lets the source open and frames flow.
  void start();
  // Sources end their streams; frames in flight drain to the sink. Safe from any thread (not a signal handler).
  void request_stop() noexcept;
  // Paused: sources produce nothing (the next batch waits); frames already in flight still reach the sink.
  // A source making a batch when the pause comes hands on what it holds (it waits for no further frame), then
  // waits at the gate; downstream stages never stop.
  void set_paused(bool paused) noexcept;
  bool paused() const noexcept { return paused_.load(); }
  // Paused, and the source has handed on every frame it made (it waits at the gate, or it ended): from now on
  // nothing is produced until resume, so once the ledger shows nothing in flight the pipeline is settled.
  // Without this, a batch being made when the pause came can still leave after `in_flight` read 0.
  bool pause_taken() const noexcept;
  void wait();  // joins every stage thread
  bool finished() const noexcept { return finished_threads_.load() == thread_count_; }
  bool started() const noexcept { return thread_count_ > 0; }
  // Gives up on frames still in flight after a drain that did not end in time (a stage or source thread
  // stuck in a blocking call): they are counted failed with `reason`, and later updates from the stuck
  // threads are ignored. Returns how many frames that failed. The pipeline must then never be destroyed
  // (its threads may still run); the caller leaks it on purpose.
  std::uint64_t abandon(const std::string& reason) { return ledger_.abandon(reason); }
  // Stage errors that failed frames or an input's outputs (so counted among failed frames or inputs with
  // errors too); the others (a stage that could not open or close) are errors of the run itself.
  std::uint64_t errors_of_frames() const noexcept { return errors_of_frames_.load(); }
  // The first failure no wait fixes a sink failed frames for ("stage 'sink' (sink): writing '/out/x.jsonl'
  // failed: No space left on device", a StorageFullError); "" while there is none. `sluiced run` stops on it:
  // the rest could not be delivered either. A failure a retry may fix (a network sink's outage) is not one.
  std::string sink_failure() const;

  PipelineSnapshot snapshot() const;
  // The recording as Chrome/Perfetto trace events (JSON). Safe while running.
  std::string trace_json() const;
  const FrameLedger& ledger() const { return ledger_; }
  const LatencyHistogram& latency() const { return latency_; }
  const PipelinePlan& plan() const { return plan_; }
  // The source's run-time source management, when it has one (the decode stage with `uri`/`idle: wait`).
  SourceControl* source_control() const { return plan_.stages.front().stage->source_control(); }
  const InputTracker& inputs() const { return plan_.shared->inputs; }
  // After wait(): lets go of the job ledger (its lock), so a pipeline that replaces this one can take it.
  void release_job() { plan_.shared->job.reset(); }

 private:
  struct StageRuntime;
  void run_pipelined_stage(std::size_t i);
  void run_serial();
  void open_stage(std::size_t i);
  void close_stage(std::size_t i) noexcept;
  // One step of stage i: wait for the input, run the stage, hand the batches on, account for it.
  struct StepTimes {
    std::int64_t begin = 0, end = 0, cpu_begin = 0, helper_cpu_before = 0, acquire_wait_before = 0,
                 pacing_wait_before = 0;
  };
  BatchLease step(std::size_t i, BatchLease& in);
  Batch* wait_for_input(std::size_t i, Batch* in);
  BatchLease run_stage(std::size_t i, BatchLease& in, StepTimes& times, bool& failed);
  void hand_on(std::size_t i, BatchLease& in, BatchLease& out, Batch* pictures, std::int64_t done_ns);
  void account(std::size_t i, Batch* in, const Batch* out, const StepTimes& times);
  void push_downstream(std::size_t i, BatchLease out);
  void push_branches(std::size_t tee, BatchLease out);  // the tee: one share of the batch to each branch
  // Replicas (PipelinePlan::replica_gpus): the source hands each batch to one, the merge takes them back in order.
  void dispatch(BatchLease out);
  void push_merged(BatchLease b);
  bool last_of_replica(std::size_t i) const;
  std::string replica_name(int r) const;
  std::string replica_down(int r) const;  // why replica r is down, "" while it is up
  void take_replica_down(int r, const std::string& why);
  void left_replica(int r, std::uint64_t order, const Batch* finished);  // a batch left replica r: done or not
  struct ReplicaState {
    std::atomic<std::int64_t> outstanding{0};  // batches handed to it that have not left it
    std::atomic<bool> down{false};
    mutable std::mutex mu;
    std::string why;
  };
  std::vector<std::unique_ptr<ReplicaState>> replicas_;
  std::unique_ptr<BoundedQueue<Batch*>> merged_;  // the merge's output: the stage after the replicas reads it
  std::unique_ptr<ReplicaMerge> merge_;
  std::uint64_t next_order_ = 0;  // the source's thread only
  std::size_t next_replica_ = 0;
  // The one place frames get their fate (besides the source's `produced`). A stage in a branch reports the
  // branch's fate; the frame's fate is settled once every branch reported it (the worst of them: failed, then
  // dropped, then delivered). `done`: the delivering sink's stage_done_ns (latency attribution).
  void settle(std::size_t i, std::span<const FrameMeta> frames, FrameFate fate, const std::string& reason,
              std::int64_t sink_ns = 0, const std::array<std::int64_t, kMaxStages>* done = nullptr);
  void settle_final(std::size_t i, std::span<const FrameMeta> frames, FrameFate fate, const std::string& reason,
                    std::int64_t sink_ns, const std::array<std::int64_t, kMaxStages>* done);
  struct Finishing;
  void conclude_input(const Finishing& f);
  void keep_gpu_slices(StageRuntime& rt);
  // `storage_full`: the failure was a StorageFullError (what sink_failure() reports).
  void fail_frames(std::size_t i, const Batch* in, const std::string& what, bool storage_full = false);
  void finish_inputs(std::size_t sink);  // on the sink's thread: commit completed inputs, record the job

  PipelinePlan plan_;
  std::vector<std::unique_ptr<StageRuntime>> rt_;
  // A tee's frames between their first and their last branch's report (in flight; see settle()).
  struct FrameKey {
    std::uint32_t source;
    std::uint64_t sequence;
    bool operator==(const FrameKey&) const = default;
  };
  struct FrameKeyHash {
    std::size_t operator()(const FrameKey& k) const noexcept {
      return std::hash<std::uint64_t>()(k.sequence * 0x9e3779b97f4a7c15ull ^ k.source);
    }
  };
  struct Joining {
    int reports = 0;
    FrameFate fate = FrameFate::delivered;
    std::string reason;
  };
  std::mutex join_mu_;
  std::unordered_map<FrameKey, Joining, FrameKeyHash> joining_;
  // Completed inputs wait until every sink finished them (finish_input on its own thread); sinks that ended wait
  // for the others, so that none closes before an input its frames completed was handed to it.
  std::mutex finish_mu_;
  std::condition_variable finish_cv_;
  std::size_t sinks_ = 0, sinks_ended_ = 0;
  FrameLedger ledger_;
  LatencyHistogram latency_;
  void wait_while_paused();
  void source_left() noexcept;  // the source's loop ended: it will make nothing more
  bool warms_up(std::size_t i) const { return !plan_.stages[i].stage->warm_up_plan().empty(); }
  void open_and_warm(std::size_t i);  // on stage i's thread; counts it warm on every way out
  bool wait_for_go();                 // true once start() came, false when stopped before it
  mutable std::mutex warm_mu_;
  mutable std::condition_variable warm_cv_;
  std::size_t warm_pending_ = 0;  // stages with a warm-up not yet warm (or failed)
  bool go_ = false;
  std::int64_t warm_begin_ns_ = 0;
  std::string warm_error_;
  std::atomic<std::int64_t> warmup_ns_{0};
  std::atomic<std::uint64_t> errors_of_frames_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> paused_{false};  // also read by sources while they make a batch (StageContext::pausing)
  // The pause gate: a paused source sleeps on gate_cv_. source_held_ (under gate_mu_): it waits at the gate or
  // has left its loop, so every frame it made has been handed on (pause_taken()).
  mutable std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  bool source_held_ = false;
  bool source_gone_ = false;
  std::vector<std::thread> threads_;
  std::atomic<std::size_t> finished_threads_{0};
  std::size_t thread_count_ = 0;
  std::int64_t start_ns_ = 0;
  std::atomic<std::int64_t> end_ns_{0};
  Event trace_reference_;  // a timing event recorded at start: GPU times are placed relative to it
  std::atomic<std::int64_t> trace_until_ns_{0};  // record while now_ns() < this
};

}  // namespace sluice
