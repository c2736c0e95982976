#pragma once
// The preprocess stage's parameters, declared once: the preprocess stage and classify_boxes (which crops each
// detected box and prepares it the same way) share them.
#include <vector>

#include "kernels/preprocess.hpp"
#include "runtime/params.hpp"

namespace sluice {

// Without `crop`: classify_boxes takes each box as its crop.
std::vector<ParamSpec> preprocess_param_specs(bool with_crop);
// The kernel's parameters for a batch of `in` frames. Throws ConfigError naming a bad field.
kernels::PreprocessParams preprocess_params(const ParamValues& p, const PayloadDesc& in, bool with_crop);

}  // namespace sluice
