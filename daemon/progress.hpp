#pragma once
// Progress of batch jobs and live sources: a text block for a terminal (`sluiced run`), redrawn in place,
// and the same numbers as JSON for the `status` reply.
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/input_tracker.hpp"
#include "runtime/source_control.hpp"
#include "runtime/stats.hpp"

namespace sluice {

// Renders the progress block, one '\n'-terminated line each:
//   - one line per source: name, state, fps, "files D/T" (+ failed, skipped) for jobs, the reason when it is
//     stalled, backing off or failed;
//   - one line per input not yet complete (at most 12, then "+ N more inputs"):
//       [########............]  37/120 frames  31%  45.2 fps  ETA 0:02  clip.mp4
//     an unknown total gives no bar, just the count and the rate: "512 frames  29.9 fps  rtsp://cam/1";
//   - when a source runs a job (inputs_total > 0), an overall line: files done/total, failed, frames, rate
//     and ETA (from the in-progress inputs' known totals plus, for files not opened yet, the mean frame count
//     of the inputs seen; "~" marks such an estimate).
// Every line fits `columns` display columns (names are shortened in the middle); columns <= 0: no limit.
// `now_ns` is on the steady clock (runtime/stats.hpp now_ns()), like InputProgress's times.
// `frames`: the frame ledger's totals; the overall line then counts the job's frames that have been through the
// sink (delivered, dropped or failed), as the input lines do, instead of the frames decoded, which run ahead of
// them by what is in flight (so the lines would disagree while the job runs).
std::string render_progress(const std::vector<InputProgress>& inputs, const std::vector<SourceReport>& sources,
                            std::int64_t now_ns, int columns, const FrameLedger::Totals* frames = nullptr);

// Per input: {id, source, uri, kind, frames_done (settled), frames_total (null if unknown), decoded,
// delivered, dropped, failed, fps, eta_s (null if unknown), state, error}; state is "decoding" (the reader
// runs), "finishing" (it ended, frames still in flight), "done", "failed" (complete; failed = ended early
// with an error) or "interrupted" (complete, stopped before its end by a shutdown or removal: redone later).
nlohmann::json progress_json(const std::vector<InputProgress>& inputs, std::int64_t now_ns);

// Draws a block of lines in place on a terminal: each update() moves the cursor up over the previous block
// ("\x1b[<n>A"), rewrites every line after clearing it ("\x1b[2K") and, when the block shrank, clears what
// is left below ("\x1b[J"). Always writes escape sequences: ask wanted() before making one. Thread-safe.
class ProgressDisplay {
 public:
  explicit ProgressDisplay(std::FILE* out);
  ~ProgressDisplay();  // finish()
  ProgressDisplay(const ProgressDisplay&) = delete;
  ProgressDisplay& operator=(const ProgressDisplay&) = delete;

  // Replaces the block with `text` (lines separated by '\n'; a trailing '\n' is optional). Identical text
  // is not redrawn.
  void update(const std::string& text);
  // Erases the block (e.g. before printing a log line to the same terminal); the next update() draws anew.
  void clear();
  // Leaves the last block on screen; later output (and a later update()) starts below it.
  void finish();

  // True when `out` is a terminal that understands the escapes: isatty, and TERM is set and not "dumb".
  static bool wanted(std::FILE* out);
  // True when `a` and `b` are the same terminal (both ttys on one device): what one prints lands among the
  // other's lines, and a redraw of a block moves over (and erases) them.
  static bool same_terminal(std::FILE* a, std::FILE* b);
  // The width of the terminal behind `out` (TIOCGWINSZ), else $COLUMNS, else 80.
  static int columns(std::FILE* out);

 private:
  void write(const std::string& bytes);  // with mu_ held
  std::FILE* out_;
  std::mutex mu_;
  int lines_ = 0;     // lines of the block on screen (the cursor is at the start of the line below it)
  std::string last_;  // the text on screen
};

}  // namespace sluice
