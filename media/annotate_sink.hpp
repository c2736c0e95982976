#pragma once
// The annotate sink (media library): draws each frame's detections (boxes, tags, a colour per track) or top-k
// classes onto the source frame (from the pipeline's FrameTap) and writes a video (media/video_writer.hpp) or a
// folder of JPEG or PNG images per input.
#include "runtime/stage.hpp"

namespace sluice {

// The stage's declaration (kind "annotate", a sink).
StageInfo annotate_stage();
// Adds it to StageRegistry::builtin(); called by register_media().
void register_annotate_stage();

}  // namespace sluice
