#pragma once
// Per-input bookkeeping shared by the source, the sink and the runner: which inputs (one file of a job, one
// camera or stream connection) exist, how many frames each decoded, and how many reached their fate. An
// input is complete once it ended and every frame it decoded is settled (delivered, dropped or failed);
// the sink then finishes its outputs for it (atomic rename) and the job ledger records it.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/latency_budget.hpp"
#include "runtime/batch.hpp"
#include "runtime/frame_reader.hpp"
#include "runtime/input_outcomes.hpp"

namespace sluice {

class FrameLedger;
class JobLedger;
class FrameTap;

enum class FrameFate : std::uint8_t { delivered, dropped, failed };

struct InputProgress {
  std::uint32_t id = 0;         // FrameMeta::input
  std::uint32_t source_id = 0;  // FrameMeta::source_id
  std::string source;           // the source's name
  std::string uri;              // the input itself (a file path, a camera, a stream URL)
  InputKind kind = InputKind::file;
  std::string options;  // the input's own options (runtime/input_options.hpp text()), "" when none
  std::int64_t frames_total = -1;  // expected frames when known (container metadata), else -1
  std::uint64_t decoded = 0, delivered = 0, dropped = 0, failed = 0;
  bool ended = false;     // the reader finished (end of file, error, removal, stop)
  std::string error;      // why it ended early; empty when it ended normally
  bool transient = false;  // the error may pass if the input is tried again later (InputError::transient)
  bool interrupted = false;  // stopped before its end (shutdown, source removed): redo it, record nothing
  bool removed = false;      // interrupted because its source was removed at run time
  bool taken_over = false;   // interrupted because another worker of a shared job took it over (not ours to commit)
  bool complete = false;  // ended and every decoded frame settled
  bool with_errors = false;  // counted in Totals::with_errors when it completed
  std::int64_t started_ns = 0, ended_ns = 0, completed_ns = 0;  // steady clock

  std::uint64_t settled() const { return delivered + dropped + failed; }
  double rate_fps(std::int64_t now) const;  // settled frames per second since it started
  // Seconds until done at the current rate; nullopt when the total or the rate is unknown.
  std::optional<double> eta_s(std::int64_t now) const;
};

class InputTracker {
 public:
  // Registers a source's name for its id (sinks name outputs and records after it).
  void name_source(std::uint32_t source_id, std::string name);
  std::string source_name(std::uint32_t source_id) const;

  // The source opened an input; returns the id its frames carry in FrameMeta::input (never 0).
  std::uint32_t begin(std::uint32_t source_id, std::string uri, InputKind kind, std::int64_t frames_total,
                      std::string options = {});
  void decoded(std::uint32_t input, std::uint64_t n = 1);
  // The input has no more frames: normal end (`error` empty) or an early end with the reason.
  // `transient`: the error may pass if the input is tried again later (a remote file's fetch failed).
  void end(std::uint32_t input, std::string error = {}, bool transient = false);
  // The input was stopped before its end (shutdown, removal): it completes once settled, marked interrupted
  // (and removed when its source was removed at run time).
  void interrupt(std::uint32_t input, bool source_removed = false);
  // Frames reached a fate (called by the runner for every batch a sink consumed, a queue dropped or a stage
  // failed, and by the source for frames it dropped before batching). Frames without an input are ignored.
  void settle(std::span<const FrameMeta> frames, FrameFate fate);

  // A sink could not commit the outputs of a complete input (disk full, frames missing): the input counts as
  // one with errors and its `error` (in the recent list) says why. Frames it delivered stay delivered: their
  // records are on disk, kept aside by the sink.
  void output_failed(std::uint32_t input, const std::string& reason);

  // A complete input went back to its job to be done again (a Redis job: here or by another worker), so its
  // failed frames and errors are not its final outcome; `counted_with_errors`: it was counted in with_errors.
  void handed_back(const InputProgress& input, bool counted_with_errors);

  // Inputs that became complete since the last call, in completion order (the sink thread finishes them).
  std::vector<InputProgress> take_completed();
  std::optional<InputProgress> get(std::uint32_t input) const;
  // Every input not yet complete, plus the last `recent` completed ones (for status and the progress bar).
  std::vector<InputProgress> snapshot(std::size_t recent = 8) const;

  struct Totals {
    std::uint64_t inputs = 0, complete = 0;
    std::uint64_t with_errors = 0;  // files that could not be read completely, or inputs with failed frames
    std::uint64_t unreadable = 0;   // of them: files that could not be read completely (the input's fault)
    // Inputs handed back to their job to be done again (handed_back()), and of them: those among with_errors,
    // and their failed frames.
    std::uint64_t handed_back = 0, handed_back_with_errors = 0, handed_back_failed_frames = 0;
  };
  Totals totals() const;

 private:
  void maybe_complete(InputProgress& p);  // with mu_ held
  mutable std::mutex mu_;
  std::uint32_t next_id_ = 1;
  std::map<std::uint32_t, InputProgress> open_;  // not complete yet
  std::deque<InputProgress> done_;               // the most recent completed ones
  std::vector<InputProgress> completed_;         // waiting for take_completed()
  std::map<std::uint32_t, std::string> source_names_;
  Totals totals_;
};

// The job ledger is opened by the source stage's open(), on its own thread, while the other stages open on
// theirs. A source stage that will run a job says so when it is made (expect(), before any stage opens) and
// calls opened() once the ledger is open or could not be; a sink that must take interrupted inputs' records
// out of its outputs waits for that in its open().
class JobGate {
 public:
  void expect() {
    std::lock_guard lock(mu_);
    expected_ = true;
  }
  void opened() {
    {
      std::lock_guard lock(mu_);
      opened_ = true;
    }
    cv_.notify_all();
  }
  // True once opened() was called, or at once when no job is expected; false when `stop` was set first.
  bool wait(const std::atomic<bool>* stop) {
    std::unique_lock lock(mu_);
    while (expected_ && !opened_) {
      if (stop && stop->load()) return false;
      cv_.wait_for(lock, std::chrono::milliseconds(50));
    }
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool expected_ = false, opened_ = false;
};

// What the stages of one pipeline share besides the data path (made by the planner, handed to every stage).
struct PipelineShared {
  DownstreamEstimate downstream;  // batcher -> sink's end, per batch: what the batcher leaves time for
  InputTracker inputs;
  JobGate job_gate;                // `job` may be read once this is open
  std::shared_ptr<JobLedger> job;  // set by a source running a resumable batch job
  InputOutcomes outcomes;          // each input's fate once the sink and the ledger are through with it
  std::shared_ptr<FrameTap> tap;   // the sinks' Stage::frame_tap(), wired by the planner: sources put frames in
  FrameLedger* ledger = nullptr;   // the running pipeline's: sources count frames they drop before batching
};

}  // namespace sluice
