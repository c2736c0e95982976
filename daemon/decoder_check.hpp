#pragma once
// What `sluiced check` says about decoding: per source of each decode stage, which decoder its inputs will get
// on this host and why (NVDEC, and where its frames go, or the CPU decoder with the reason NVDEC was passed over).
#include <string>
#include <vector>

#include "config/pipeline_spec.hpp"
#include "runtime/pipeline.hpp"

namespace sluice {

struct DecoderReport {
  std::string text;                     // per decode stage and URI: the decoder, or why it cannot be read
  std::vector<std::string> unreadable;  // "URI: why" for each URI that cannot be read (a run would fail it)
};

// Opens each file input (a directory or glob: the first file of each extension) the way the source would, reads
// up to its first frame and closes it; live inputs are not opened. Never throws: a failure is reported per input.
DecoderReport describe_decoders(const PipelineSpec& spec, const PipelinePlan& plan);

}  // namespace sluice
