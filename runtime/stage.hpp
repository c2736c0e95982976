#pragma once
// The stage interface and the registry of stage kinds.
//
// A stage is built from validated parameters and the description of what its upstream emits; its
// constructor checks that it can take that input (throwing ConfigError with a plain message; the config
// layer adds file:line:col) and must stay cheap: memory and GPU objects are made in open(), on the
// stage's own thread. The runner owns queues, pools, events and statistics, so a stage only does its work.
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/batch.hpp"
#include "runtime/input_tracker.hpp"
#include "runtime/params.hpp"
#include "runtime/pool.hpp"
#include "runtime/stats.hpp"

namespace sluice {

class GpuTimer;

enum class StageRole { source, transform, sink };
enum class Device { cpu, cuda };

struct StageInit {
  std::string name;                  // the stage's name in the pipeline (defaults to its kind)
  const ParamValues& params;
  std::optional<PayloadDesc> input;  // what the upstream stage emits (none for sources)
  Device device = Device::cpu;
  int batch_size = 1;
  std::int64_t batch_timeout_us = 0;
  std::vector<std::string> stage_names;  // every stage of the pipeline, in order
  int index = 0;                         // this stage's position
  std::string pipeline_file;             // the pipeline's file: relative paths in params are relative to it
  std::shared_ptr<PipelineShared> shared;  // inputs, job ledger, frame tap: what stages share besides batches
  std::string state_dir;                 // where resumable jobs keep their ledger ($STATE_DIRECTORY, --state-dir)
  std::int64_t latency_budget_ns = 0;    // the pipeline's latency budget (sources stamp it on frames); 0: none
  // The frames a stage upstream turned into a tensor (the preprocess stage's input), which a stage that
  // reads_pictures() finds in Batch::pictures; none before such a stage, or past a tee.
  std::optional<PayloadDesc> pictures = {};
};

struct StageContext {
  gpu::StreamHandle stream = nullptr;  // the stage's stream; null when the stage runs on the CPU
  BatchPool* out_pool = nullptr;       // where the stage takes output batches (null if it forwards or sinks)
  const std::atomic<bool>* stop = nullptr;  // sources end their stream once this is set
  const std::atomic<bool>* pause = nullptr;  // set while the pipeline is paused: sources cut the batch short
  // Set for a source with a stream: it times each piece of GPU work it enqueues (GpuTimer::end(s, false)), since
  // it enqueues them as frames arrive and a pair around process() would count the waits between them.
  GpuTimer* piece_timer = nullptr;

  // Waiting is not work: the runner moves these out of the stage's host time.
  std::int64_t acquire_wait_ns = 0;  // blocked in acquire(): back-pressure from downstream
  std::int64_t pacing_wait_ns = 0;   // a source waiting for its next frame to be due
  // CPU time threads other than the stage's own spent on its batches (a ForkJoin crew's workers), so far: the
  // runner adds what it grew by during a step to the stage's CPU time.
  std::int64_t helper_cpu_ns = 0;

  bool stopping() const { return stop && stop->load(std::memory_order_relaxed); }
  bool pausing() const { return pause && pause->load(std::memory_order_relaxed); }
  // An output batch from the stage's pool, ready for this stage's stream (or the host) to write.
  BatchLease acquire();
  // An output batch the host writes although the stage has a stream: a GPU reader of the slot is waited for on
  // the host.
  BatchLease acquire_for_host();
};

class Stage {
 public:
  virtual ~Stage() = default;
  // What the stage emits (sources and transforms); also sizes its output pool.
  virtual PayloadDesc output() const { return {}; }
  // True when the stage hands its input batch on as its output (pass-through on the CPU): no pool.
  virtual bool forwards_input() const { return false; }
  // True when the stage enqueues GPU work and so needs a stream.
  virtual bool uses_gpu() const { return false; }
  // A sink that draws onto the source's pictures (annotate): the tap the source must copy each frame into. The
  // planner wires it to the source (PipelineShared::tap); null: none.
  virtual std::shared_ptr<FrameTap> frame_tap() const { return nullptr; }
  // True when the stage reads the frames its input was made from (Batch::pictures, described by
  // StageInit::pictures): the runner keeps them from the preprocess stage on, and records their released event
  // after this stage's work.
  virtual bool reads_pictures() const { return false; }
  virtual void open(StageContext&) {}
  // What warm_up() will do ("" = nothing), for `sluiced check`. A stage that has something to do is opened and
  // warmed before the source opens, so it must not wait in open() for the source.
  virtual std::string warm_up_plan() const { return {}; }
  // What the stage chose from its parameters, its input and its files beyond what output() says ("" = nothing
  // to add), for `sluiced check`: e.g. the infer stage's detection head, thresholds and box mapping.
  virtual std::string plan_note() const { return {}; }
  // After open(), on the stage's thread, before the source opens: everything the first batches would otherwise
  // pay for (engines or graphs for each batch size the stage can see, lazy loading), so that no frame waits for
  // it. Throwing fails the stage as a failing open() does.
  virtual void warm_up(StageContext&) {}
  // Sources: `in` is null; return a filled batch from ctx.out_pool, or an empty lease at end of stream. Once
  // ctx.pausing(), wait for no further frame: return what the batch holds now. An empty lease while paused is
  // not the end: the runner waits at its pause gate and calls again after the resume (an ended source then
  // returns empty again).
  // Transforms: fill a batch from ctx.out_pool (the runner copies frame metadata), or return empty if
  // forwards_input(). Sinks: consume `in`, return empty. Throwing fails the batch's frames, not the pipeline.
  virtual BatchLease process(Batch* in, StageContext& ctx) = 0;
  // After the last batch: flush (sinks) and free what open() made. Sinks discard uncommitted outputs.
  virtual void close(StageContext&) {}
  // Sinks: every frame of `input` is settled; commit its outputs (fsync, rename) and return their paths.
  // Runs on the sink's thread between process() calls. Throwing fails the input (it is not recorded done).
  virtual std::vector<std::string> finish_input(const InputProgress&, StageContext&) { return {}; }
  // Why the stage is not making progress ("blocked: disk full writing X since ..."), "" when it is; for status.
  // Called from other threads.
  virtual std::string health() const { return {}; }
  // Sources that manage sources at run time (the decode stage) expose them here for the control socket.
  virtual class SourceControl* source_control() { return nullptr; }
};

// A path on this host that a stage writes, known from its parameters alone (for `sluiced check` and
// --output-root, before anything is opened).
struct StageOutput {
  std::string path;      // as written in the pipeline (a relative one: against the working directory)
  bool is_file = false;  // a file in a directory that must exist; otherwise a directory, created with its parents
};

struct StageInfo {
  std::string kind;
  StageRole role = StageRole::transform;
  std::string doc;
  std::vector<ParamSpec> params;
  std::function<std::unique_ptr<Stage>(const StageInit&)> make;
  // What the stage writes here given its parameters; unset, or nullopt: nothing on this host's filesystem.
  std::function<std::optional<StageOutput>(const ParamValues&)> output;
  // The stage keeps state from one batch to the next (a tracker): with replicas (`gpus:`) it runs once, behind
  // them, where batches come back in the source's order; the replicas end before it.
  bool keeps_state = false;
};

class StageRegistry {
 public:
  // The registry with every stage kind linked into the program (runtime/stage_registrar.hpp).
  static const StageRegistry& builtin();
  void add(StageInfo info);  // throws std::logic_error on a duplicate kind
  const StageInfo* find(const std::string& kind) const;
  const std::vector<StageInfo>& all() const { return stages_; }  // sources, transforms, sinks; by kind in each
  std::string kinds() const;  // "decode, download, ..." for error messages

 private:
  std::vector<StageInfo> stages_;
};

// What the stage `kind` with `params` writes on this host (StageInfo::output), nullopt for a kind that writes
// nothing here or that this build does not have.
std::optional<StageOutput> stage_output(const std::string& kind, const ParamValues& params);

// Help text of one stage kind (`sluiced inspect KIND`), generated from its declaration.
std::string describe_stage(const StageInfo& info);

}  // namespace sluice
