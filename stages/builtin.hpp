#pragma once
// The built-in stage kinds. Adding a stage: one .cpp in stages/ defining its StageInfo, plus one line here
// and one in builtin.cpp.
#include "runtime/stage.hpp"

namespace sluice {

StageInfo decode_stage();
StageInfo upload_stage();
StageInfo preprocess_stage();
StageInfo infer_stage();
StageInfo download_stage();
StageInfo track_stage();
StageInfo classify_boxes_stage();
StageInfo tee_stage();
StageInfo sink_stage();

// Also registers the readers the core provides (testsrc:PATTERN).
void register_builtin_stages(StageRegistry& registry);
void register_testsrc_reader();

}  // namespace sluice
