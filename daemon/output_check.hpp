#pragma once
// What `sluiced check` says about outputs: whether each sink's path can be written on this host, before a run
// finds out at the sink's open (with every frame of the run failed).
#include <string>
#include <vector>

#include "config/pipeline_spec.hpp"

namespace sluice {

// One message per output path that cannot be written: "FILE:LINE:COL: stage 'NAME' (KIND): path 'P': why".
// Each stage kind declares what it writes (StageInfo::output). A file output (the sink's jsonl per run) needs
// its directory to exist and be writable, and the file, if there, to be a writable regular file; a directory
// output (every other one) is created if missing, so its nearest existing ancestor must be a writable
// directory. Looks with stat/access only: nothing is created or opened.
std::vector<std::string> output_problems(const PipelineSpec& spec);

}  // namespace sluice
