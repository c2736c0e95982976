#pragma once
// The decode stage's sources: each source (one URI: a file, a directory or glob job, a camera, a stream, a
// test pattern) decodes on its own thread(s) into a small ring of frame slots, with its own state machine
//   connecting -> live -> stalled -> backoff -> live | eos | failed     (and removed, from the control socket)
// and the stage takes frames of every source into one batch. Live sources reconnect with jittered
// exponential backoff and drop their oldest frame when the pipeline is behind (counted); files block.
//
// Every frame a source decodes is counted: handed on in a batch, or dropped here with a reason (ledger and
// input tracker both learn of it), so conservation holds across sources added and removed at run time.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <list>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/batch.hpp"
#include "runtime/input_tracker.hpp"
#include "runtime/input_options.hpp"
#include "runtime/source_control.hpp"
#include "runtime/stats.hpp"

namespace sluice {

class GpuTimer;

struct SourceSetSettings {
  int width = 0, height = 0;
  PixelFormat pixel = PixelFormat::bgr8;
  MemoryKind ring_memory = MemoryKind::host;  // pinned when the pipeline runs on the GPU
  // Where batches live. Device: each frame goes from its ring slot into the batch by one async copy on the
  // taking stage's stream (from pinned memory, or from device memory when a GPU decoder wrote it there).
  MemoryKind batch_memory = MemoryKind::host;
  int ring_frames = 4;                        // per source, plus one per decode thread
  int copy_threads = -1;                      // ring -> batch copies; -1: one per 4 cores, at most 4
  std::int64_t latency_budget_ns = 0;         // stamped on the frames of sources without their own; 0: none
  std::shared_ptr<PipelineShared> shared;     // input tracker, job ledger, frame tap
};

class SourceSet final : public SourceControl {
 public:
  explicit SourceSet(SourceSetSettings settings);
  ~SourceSet() override;
  SourceSet(const SourceSet&) = delete;
  SourceSet& operator=(const SourceSet&) = delete;

  std::vector<SourceReport> sources() const override;
  std::uint32_t add_source(SourceOptions options) override;
  bool remove_source(const std::string& id_or_name) override;

  // Moves ready frames into `batch` (from its current count up to its capacity), fairly across sources.
  // Waits for the first frame until one is ready or `stop` is set, or (unless wait_when_idle) every source
  // ended; returns within ~50 ms either way so the caller can look again. Later frames are waited for
  // until batch_timeout after the first, and never past the moment a frame in the batch would break its latency
  // budget given `downstream_ns` (the time batches take from here to the sink's end): frames ready already are
  // taken, but no longer waited for. Returns the number of frames added; adds the time spent waiting
  // for frames to *waited_ns.
  // Device batches need `stream`: the copies are enqueued on it and the batch is ready once its work is.
  // With `timer`, each frame's copy is timed on its own (GpuTimer::end(stream, false)).
  int take(Batch& batch, std::int64_t batch_timeout_ns, const std::atomic<bool>& stop, bool wait_when_idle,
           std::int64_t* waited_ns = nullptr, gpu::StreamHandle stream = nullptr, std::int64_t downstream_ns = 0,
           GpuTimer* timer = nullptr);
  // The budget of sources without their own (a reload whose file changed it); frames published from now on.
  void set_latency_budget(std::int64_t ns);
  // Stops every source's decoding (what is already decoded can still be taken).
  void stop_all();
  // stop_all(), then waits up to `bound` for every decode thread to end. A thread still running then is
  // stuck in a blocking open or read (a FIFO without a writer, a hung mount): its source is marked failed
  // with the reason, and false is returned; the caller must then never destroy this set (the stuck thread
  // still points into it) and abandons it instead.
  bool stop_within(std::chrono::milliseconds bound);
  // True when no source can produce another frame and nothing is left to take.
  bool exhausted() const;

  // --- hand-over across a reload: the running sources go on in the new pipeline without reconnecting ---
  // True when this set's frames have the geometry `other` asks for (size, format, ring memory and depth).
  bool compatible(const SourceSetSettings& other) const;  // the latency budget aside: set_latency_budget()
  // Points the set at another pipeline's shared state (input tracker, ledger, frame tap), or at none
  // (nullptr: between the old pipeline letting go and the new one taking over). Frames already in the
  // rings lose their input (the old tracker's ids mean nothing to the new one); each source's running input
  // is interrupted in the old tracker and begun again in the new one at its next frame. Frames dropped
  // while at none are counted in the next ledger.
  void rebind(std::shared_ptr<PipelineShared> shared);
  // Keeps each source (not removed) for which keep(options, id, running) says so and removes the others
  // (their decoded frames still flow), with `why` as the reason.
  void retain(const std::function<bool(const SourceOptions&, std::uint32_t id, bool running)>& keep,
              const std::string& why);

 private:
  struct Source;
  void run_worker(Source& s, int worker);
  void run_live(Source& s);
  void run_files(Source& s);
  // A job whose inputs arrive while it runs (a fed source kind, e.g. redis://): the next input comes from the source's feed.
  void run_feed(Source& s);
  // Reads one input to its end; returns false when the source was stopped meanwhile.
  bool read_input(Source& s, const std::string& uri, InputKind kind, bool live, std::string& error,
                  const InputOptions& options = {});
  // An input read to its end: done, or failed with `error` (the source's reason and list of bad inputs).
  void count_input(Source& s, const std::string& uri, const std::string& error);
  int claim_slot(Source& s);                 // blocks (files) or evicts the oldest frame (live)
  void publish(Source& s, int slot, FrameMeta meta, std::uint64_t epoch);
  void release_slot(Source& s, int slot);    // a claimed slot that holds no frame after all
  void drop_frame(Source& s, FrameMeta meta, const char* why);  // mu_ held
  void fail_frame(Source& s, FrameMeta meta, const std::string& why);  // mu_ held
  void settle_outside_batch(FrameMeta meta, FrameFate fate, const std::string& reason);  // mu_ held
  void set_state(Source& s, SourceState state, std::string reason = {});
  bool wait_backoff(Source& s, double seconds);
  void monitor();                            // stall watchdog, reaping of removed sources
  SourceReport report(const Source& s, std::int64_t now) const;
  // Device batches: the slots' events (once per source, all or none), and the device ring when a GPU decoder
  // opens. Throws with "cannot set up its frame slots on the GPU: <why>".
  void prepare_device_slots(Source& s, bool device_ring);
  // A device batch's frame: one async copy on `stream`, ordered after the writer's and before the next writer's.
  void enqueue_device_copy(std::byte* dst, Source& from, int slot, gpu::StreamHandle stream,
                           GpuTimer* timer);  // mu_ held
  // The slot's memory for a reader, waiting for (host) or ordering after (device) the last copy out of it.
  FrameTarget slot_target(Source& s, int slot, bool device);
  struct CopyJob {
    std::byte* dst;
    Source* from;
    int slot;
  };
  void copy_frame(const CopyJob& job);   // hands the copy to a copy thread (or does it when there is none)
  void finish_copy(const CopyJob& job);  // copies and frees the ring slot
  void run_copier();

  SourceSetSettings settings_;
  std::size_t frame_bytes_;
  mutable std::mutex mu_;  // rings, states, the source list
  std::condition_variable frame_ready_, space_free_, monitor_wake_;
  std::list<std::unique_ptr<Source>> sources_;
  std::uint32_t next_id_ = 1;
  std::size_t round_robin_ = 0;
  bool stopping_ = false;
  std::uint64_t epoch_ = 0;  // +1 per rebind(): frames of an earlier one carry no input
  // Frames dropped or failed (corrupt) while bound to no pipeline, per reason: the next pipeline's ledger
  // counts them (a reload's gap is short, so these stay small).
  std::map<std::string, std::vector<FrameMeta>> unbound_drops_, unbound_failures_;
  bool monitor_exit_ = false;
  std::mt19937_64 jitter_rng_{std::random_device{}()};
  std::thread monitor_;
  // Copy threads: ring slot -> batch item, several frames at once.
  std::mutex copy_mu_;
  std::condition_variable copy_wake_, copy_done_;
  std::deque<CopyJob> copy_jobs_;
  std::size_t copies_pending_ = 0;
  bool copy_exit_ = false;
  std::vector<std::thread> copiers_;
};

}  // namespace sluice
