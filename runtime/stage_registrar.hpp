#pragma once
// A stage kind registers itself next to its code: after the function that declares it,
//   SLUICE_REGISTER_STAGE(tee_stage);
// adds what tee_stage() returns to StageRegistry::builtin(). Registrations are collected while static objects are
// made and turned into the registry on the first builtin() call, where a kind registered twice throws. Nothing
// else names such a file, so a static library would drop it at link time: CMakeLists.txt puts these files in
// sluice_stages, which it links whole.
#include "runtime/stage.hpp"

namespace sluice {

struct StageRegistrar {
  explicit StageRegistrar(StageInfo (*declare)());
};

}  // namespace sluice

#define SLUICE_REGISTER_STAGE(declare) \
  static const ::sluice::StageRegistrar sluice_stage_registrar_##declare { declare }
