#pragma once
// The infer stage's declaration, which classify_boxes builds on (both register themselves:
// runtime/stage_registrar.hpp).
#include "runtime/stage.hpp"

namespace sluice {

StageInfo infer_stage();

}  // namespace sluice
