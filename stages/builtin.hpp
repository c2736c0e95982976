#pragma once
// The readers the core provides, registered with the built-in stages (StageRegistry::builtin()), and the infer
// stage's declaration, which classify_boxes builds on. The stages register themselves
// (runtime/stage_registrar.hpp).
#include "runtime/stage.hpp"

namespace sluice {

StageInfo infer_stage();

void register_builtin_readers();
void register_testsrc_reader();

}  // namespace sluice
