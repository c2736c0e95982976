#pragma once
// What `sluiced run` says after the summary when a signal stopped it before its sources ended: that the run was
// interrupted, what was delivered, and what was not done (sources stopped before their end, inputs cut short,
// files of a job not started), so that an interrupted run never reads like a complete one.
#include <string>
#include <vector>

#include "runtime/input_tracker.hpp"
#include "runtime/source_control.hpp"
#include "runtime/stats.hpp"

namespace sluice {

// "interrupted by <signal>: ..." lines, each ending in '\n'. `inputs`: the tracker's snapshot (open and recent
// inputs); those it marks interrupted are named with their frames delivered of their total.
std::string describe_interruption(const std::string& signal_name, const FrameLedger::Totals& frames,
                                  const std::vector<SourceReport>& sources, const std::vector<InputProgress>& inputs);

}  // namespace sluice
