#pragma once
// The infer stage's `output: detections`: the `detect:` block's declarations, and turning its values plus the
// model's output shapes and the preprocess geometry into kernels::DetectParams (every value checked, errors
// naming the key and the value), and a line for `sluiced check` saying what was chosen.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/detect.hpp"
#include "runtime/format.hpp"
#include "runtime/params.hpp"

namespace sluice {

// "detect.head", "detect.score_threshold", ...: appended to the infer stage's parameters.
std::vector<ParamSpec> detect_param_specs();

struct DetectSetup {
  kernels::DetectParams params;       // items 0; class_thresholds null (point it at `class_thresholds`' copy)
  std::vector<float> class_thresholds;  // empty: detect.score_threshold for every class
  std::vector<float> priors;            // ssd: [A, 4]
  std::string summary;                  // what was chosen, for `sluiced check`
};

// The model outputs the head reads, by name: detect.outputs, else the model's outputs in order (as many as the
// head takes). Throws ConfigError.
std::vector<std::string> detect_output_names(const ParamValues& p, const std::vector<std::string>& model_outputs);

// `shapes`: the chosen outputs' shapes for a batch of `batch` (from the prepared model); `input`: the tensor the
// model gets (its size, and the preprocess geometry); `priors_path`: detect.priors resolved. Throws ConfigError naming the key and the value.
DetectSetup setup_detect(const ParamValues& p, const std::vector<std::string>& output_names,
                         const std::vector<std::vector<std::int64_t>>& shapes, int batch, const PayloadDesc& input,
                         const std::string& priors_path);

}  // namespace sluice
