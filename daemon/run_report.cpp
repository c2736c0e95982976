#include "daemon/run_report.hpp"

#include <algorithm>

#include "runtime/printable.hpp"

namespace sluice {

std::string describe_interruption(const std::string& signal_name, const FrameLedger::Totals& frames,
                                  const std::vector<SourceReport>& sources, const std::vector<InputProgress>& inputs) {
  std::string out = "interrupted by " + signal_name + ": " + std::to_string(frames.delivered) +
                    " frames delivered before the stop (" + std::to_string(frames.failed) + " failed, " +
                    std::to_string(frames.dropped) + " dropped); the run is not complete:\n";
  std::size_t not_done = 0;
  for (const auto& s : sources) {
    const std::string name = s.name.empty() ? unnamed_source(s.id) : printable(s.name);
    if (s.inputs_total > 0) {  // a job: which files it did not get to
      const std::uint64_t finished = s.inputs_done + s.inputs_failed + s.inputs_skipped;
      if (finished >= s.inputs_total) continue;
      out += "  " + name + ": " + std::to_string(finished) + " of " + std::to_string(s.inputs_total) +
             " files finished; " + std::to_string(s.inputs_total - finished) + " not done\n";
      ++not_done;
    } else if (s.stopped || s.state != SourceState::eos) {
      out += "  " + name + ": stopped after " + std::to_string(s.frames) + " frames, before its end\n";
      ++not_done;
    }
  }
  for (const auto& p : inputs) {
    if (!p.interrupted || p.removed) continue;
    const std::string total = p.frames_total > 0 ? " of " + std::to_string(p.frames_total) : "";
    out += "  input " + printable(p.uri) + ": " + std::to_string(p.delivered) + total + " frames delivered, cut short\n";
    ++not_done;
  }
  if (not_done == 0) out += "  (every source had ended; frames in flight were drained)\n";
  return out;
}

}  // namespace sluice
