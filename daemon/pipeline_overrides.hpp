#pragma once
// The one-liner: `sluiced run --uri clip.mp4 [--model m.onnx] [--output -]` runs a pipeline file (by default
// the shipped default pipeline) with its sources, model, sink and a few keys replaced from the command line.
// The options edit the parsed pipeline, each value checked by the same declaration a YAML value is, and
// every error names the option that caused it.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config/pipeline_spec.hpp"
#include "runtime/pipeline.hpp"

namespace sluice {

struct PipelineOverrides {
  std::vector<std::string> uris;                 // --uri (repeatable): the source stage's `uri` list
  std::optional<std::string> model, labels;      // --model, --labels: the infer stage's files
  std::optional<std::string> top_k;              // --top-k: the infer stage's `top_k`
  std::optional<std::string> batch_size;         // --batch-size: the pipeline's `batch_size`
  std::optional<std::string> device;             // --device auto|cpu|cuda
  std::optional<std::string> output;             // --output PATH|-: the sink writes JSON lines there
  std::optional<std::string> size;               // --size WxH: the frame size the model takes (preprocess)
  bool resume = false;                           // --resume: a folder or glob of --uri is a resumable job

  bool empty() const {
    return uris.empty() && !model && !labels && !top_k && !batch_size && !device && !output && !size && !resume;
  }
  // Reads the override option at `option` (one of the names above) with its value. False: not an override.
  bool take(const std::string& option, const std::string& value);
  static bool is_option(const std::string& option);
};

// The shipped default pipeline: config/pipelines/default.yaml above the running executable (a build tree
// inside the checkout), else share/sluice/config/pipelines/default.yaml above it (an installed sluiced:
// /usr/bin/sluiced -> /usr/share/sluice/...). Throws ConfigError naming where it looked.
std::string shipped_default_pipeline();

// The overrides applied to a parsed pipeline. Each checked value replaces the key it names; the stages each
// option changed are remembered, so that an error while building one (a model that is not a model) can name
// the option. Throws std::invalid_argument naming the option and its value (shown as valid UTF-8).
class AppliedOverrides {
 public:
  AppliedOverrides(PipelineSpec& spec, const PipelineOverrides& overrides);
  // plan_pipeline(spec), with a ConfigError about a stage an option changed naming that option.
  PipelinePlan plan(const PipelineSpec& spec) const;

 private:
  std::map<std::string, std::vector<std::string>> options_by_stage_;  // stage name -> "--model 'm.onnx'", ...
  std::vector<std::string> pipeline_options_;                          // --device, --batch-size
};

}  // namespace sluice
