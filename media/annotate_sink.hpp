#pragma once
// The annotate sink (media library): draws each frame's detections (boxes, tags, a colour per track) or top-k
// classes onto the source frame (from the pipeline's FrameTap) and writes a video (media/video_writer.hpp) or a
// folder of JPEG or PNG images per input.
#include "runtime/stage.hpp"

namespace sluice {

// The stage's declaration (kind "annotate", a sink); it registers itself (SLUICE_REGISTER_STAGE).
StageInfo annotate_stage();

}  // namespace sluice
