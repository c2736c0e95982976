#pragma once
// Sources managed at run time: what the control socket lists, adds and removes (`sluicectl sources`,
// `source-add`, `source-remove`). Implemented by the decode stage; every call returns promptly and never
// waits on another source.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/frame_reader.hpp"

namespace sluice {

enum class SourceState : std::uint8_t { connecting, live, stalled, backoff, eos, failed, removed };
inline constexpr SourceState kSourceStates[] = {SourceState::connecting, SourceState::live,   SourceState::stalled,
                                                SourceState::backoff,    SourceState::eos,    SourceState::failed,
                                                SourceState::removed};
std::string_view to_string(SourceState s) noexcept;

// How one source behaves; the decode stage's parameters give the defaults.
struct SourceOptions {
  std::string uri;                  // file, directory, glob, image sequence (%04d), /dev/videoN, rtsp://..., testsrc:PATTERN
  std::string name;                 // default: derived from the URI
  std::optional<bool> leaky;        // default: live sources leaky (drop oldest), files blocking
  double rate_limit = 0;            // frames per second, 0 = unlimited (live: extra frames are dropped)
  bool loop = false;                // files: start again at the end (soak tests, demo loops)
  int decode_threads = 1;           // directories/globs: files decoded at once
  double stall_timeout_s = 5;       // live: no frame for this long = stalled
  double backoff_initial_s = 0.5, backoff_max_s = 30;  // live: reconnect delays (jittered, doubling)
  int max_attempts = 0;             // live: reconnects before giving up (failed); 0 = forever
  std::optional<double> latency_budget_ms;  // this source's own budget (0 = none); default: the pipeline's
  ReaderOptions reader;             // camera mode, stream timeouts, test pattern settings
};

// The name of a source that has none of its own (no configured name, none derived from its URI): the one form
// every report, record and log line uses, so that a source is never called three things.
inline std::string unnamed_source(std::uint32_t id) { return "source" + std::to_string(id); }

// Frames over the time from `start_ns` to `last_ns` (steady clock): a true rate however short the run. None
// without a frame, or when that time is too short to divide by (below 1 ms).
inline std::optional<double> mean_rate(std::uint64_t frames, std::int64_t start_ns, std::int64_t last_ns) {
  constexpr std::int64_t kShortestNs = 1'000'000;
  if (frames == 0 || start_ns == 0 || last_ns - start_ns < kShortestNs) return std::nullopt;
  return static_cast<double>(frames) * 1e9 / static_cast<double>(last_ns - start_ns);
}

struct SourceReport {
  std::uint32_t id = 0;
  std::string name, uri;
  InputKind kind = InputKind::file;
  SourceState state = SourceState::connecting;
  std::string reason;               // why it is stalled, backing off, failed (or the last error)
  bool leaky = false;
  std::uint64_t frames = 0;         // decoded and handed to the pipeline
  std::uint64_t dropped = 0;        // dropped before batching (leaky or rate limit)
  std::uint64_t errors = 0;         // read/open errors, bad files
  std::uint64_t reconnects = 0;
  std::uint64_t inputs_total = 0, inputs_done = 0, inputs_failed = 0, inputs_skipped = 0;  // files of a job
  double fps = 0;                   // decoded frames per second over the last few seconds
  // Frames over the time it ran (its start to its last frame): the rate of a run too short for `fps` to have
  // a window, and of a source that ended. None before a frame, or when that time is too short to divide by.
  std::optional<double> mean_fps;
  bool stopped = false;             // eos because the pipeline was stopped (SIGINT, stop), not at its own end
  double since_last_frame_s = -1;   // -1 before the first frame
  double next_attempt_in_s = -1;    // backoff: seconds until the next attempt
  std::vector<std::string> bad_inputs;  // "path: reason" for the first few bad files
  std::string decoder;              // the open input's decoder, e.g. "NVDEC H.264 (frames stay on the GPU)"
};

class SourceControl {
 public:
  virtual ~SourceControl() = default;
  virtual std::vector<SourceReport> sources() const = 0;
  // Starts a new source; returns its id. Throws std::invalid_argument with a message for a bad request.
  virtual std::uint32_t add_source(SourceOptions options) = 0;
  // Stops a source by id or name: frames it already decoded still flow; false when there is no such source.
  virtual bool remove_source(const std::string& id_or_name) = 0;
  // The sources add_source() started and remove_source() did not stop, as they were asked for: a reload
  // starts them again in the new pipeline.
  virtual std::vector<SourceOptions> added_at_run_time() const { return {}; }
  // Reload: called on the generation being replaced, before it is stopped, with the new generation's
  // (built, not started). When `next` can take the running sources as they are (same frame geometry), the
  // old stage hands them over instead of stopping them: sources whose settings did not change go on
  // without reconnecting, sources added at run time carry over. False when it cannot; the caller then
  // stops the old sources as usual and adds the run-time ones again.
  virtual bool hand_over_to(SourceControl& next) {
    (void)next;
    return false;
  }
  // Stops every source now (their decoded frames stay where they are). For a generation whose drain timed
  // out: its stuck pipeline may never get to stop them itself, and a camera must be let go of before the
  // next generation can open it.
  virtual void stop_sources() {}
};

}  // namespace sluice
