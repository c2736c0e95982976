#include "daemon/pipeline_overrides.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <stdexcept>
#include <utility>

#include "config/plan.hpp"
#include "daemon/output_check.hpp"
#include "nn/graph.hpp"
#include "nn/onnx_loader.hpp"
#include "runtime/bounded_file.hpp"
#include "runtime/errors.hpp"
#include "runtime/gpu.hpp"
#include "runtime/source_kind.hpp"
#include "runtime/utf8.hpp"

namespace sluice {
namespace {

namespace fs = std::filesystem;

// A value from the command line as messages show it: valid UTF-8, control characters as \xNN, quoted.
std::string shown(std::string_view raw) {
  std::string out;
  for (const char c : to_valid_utf8(raw)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", u);
      out += hex;
    } else {
      out += c;
    }
  }
  return out;
}
std::string in_quotes(std::string_view raw) { return "'" + shown(raw) + "'"; }

[[noreturn]] void refuse(const std::string& option, const std::string& value, const std::string& why) {
  throw std::invalid_argument(option + " " + in_quotes(value) + ": " + shown(why));
}

const ParamSpec& declared(const StageSpec& stage, const std::string& key) {
  for (const auto& p : StageRegistry::builtin().find(stage.kind)->params)
    if (p.name == key) return p;
  throw std::logic_error("stage kind " + stage.kind + " declares no '" + key + "'");
}

// Puts `keys` of `stage` back to their defaults, as if the file had not given them: keys that only apply to
// what an option replaced (the direct test pattern's `source`, a per-source sink's rotation).
void reset_to_defaults(StageSpec& stage, std::initializer_list<const char*> keys) {
  ParamValues fresh;
  for (const auto& [name, value] : stage.params.all()) {
    const bool reset = std::find(keys.begin(), keys.end(), name) != keys.end();
    if (!reset) {
      fresh.set(name, value, stage.params.was_given(name));
      continue;
    }
    const ParamSpec& spec = declared(stage, name);
    std::string error;
    const auto default_value = spec.default_value.empty() ? std::nullopt : parse_param(spec, spec.default_value, error);
    fresh.set(name, default_value ? *default_value : ParamValue(std::string()), false);
  }
  stage.params = std::move(fresh);
}

// Paths are taken relative to the working directory, as a shell user means them (a pipeline file's own
// relative paths are relative to that file).
std::string absolute(const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}

// Why a local input named by --uri cannot be read now, if so: a file that is missing, unreadable or not a
// regular file (a FIFO would block its source), a directory without media files, a glob that matches nothing.
// Cameras (plugged in later), streams, image sequences and test patterns are left to the source, which
// reports them as it runs.
std::optional<std::string> local_input_problem(const std::string& uri) {
  if (!source_kind_of(uri).local_files) return std::nullopt;
  struct stat st {};
  if (::stat(uri.c_str(), &st) != 0) {
    const int error = errno;
    // Not a file: a glob (expanded below) when it has the characters of one, else the reason.
    if (error != ENOENT || uri.find_first_of("*?[") == std::string::npos) return std::string(std::strerror(error));
  } else if (S_ISREG(st.st_mode)) {
    if (::access(uri.c_str(), R_OK) != 0) return std::string(std::strerror(errno));
    return std::nullopt;
  } else if (!S_ISDIR(st.st_mode)) {
    return "it is " + file_kind(st.st_mode) + ", not a regular file";
  }
  try {
    expand_local_path(uri);  // a directory or a glob: the files it holds
  } catch (const std::exception& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

StageSpec& only_stage_of_kind(PipelineSpec& spec, const std::string& kind, const std::string& option,
                              const std::string& value) {
  StageSpec* found = nullptr;
  int count = 0;
  for (auto& stage : spec.stages)
    if (stage.kind == kind) found = &stage, ++count;
  if (count != 1)
    refuse(option, value, "the pipeline (" + spec.file + ") has " + std::to_string(count) + " " + kind +
                              " stages; the option changes exactly one (edit the file instead)");
  return *found;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

constexpr int kCommandLineAttempts = 5;  // failed (re)connections in a row: at most 15.5 s of default back-off

constexpr const char* kOptions[] = {"--uri",    "--model",  "--labels", "--top-k",
                                    "--batch-size", "--device", "--output", "--size"};

// "WxH" -> {W, H} as written (the preprocess stage's declaration checks the range); nullopt when it is not that.
std::optional<std::pair<std::string, std::string>> split_size(const std::string& text) {
  const auto x = text.find('x');
  const auto digits = [](std::string_view s) {
    return !s.empty() && s.size() <= 9 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (x == std::string::npos || !digits(std::string_view(text).substr(0, x)) || !digits(std::string_view(text).substr(x + 1)))
    return std::nullopt;
  return std::make_pair(text.substr(0, x), text.substr(x + 1));
}

// The height and width a model's only input fixes (NCHW), each -1 where the file leaves it open; nullopt when
// the file cannot be read as a model of one image input (the infer stage then says why, naming --model).
std::optional<std::pair<std::int64_t, std::int64_t>> model_input_size(const std::string& path, std::string& input) {
  try {
    const nn::Graph graph = nn::load_onnx(path);
    if (graph.inputs.size() != 1 || graph.inputs[0].shape.size() != 4) return std::nullopt;
    input = "'" + graph.inputs[0].name + "' is " + nn::to_string(graph.inputs[0].shape);
    return std::make_pair(graph.inputs[0].shape[2], graph.inputs[0].shape[3]);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

bool PipelineOverrides::is_option(const std::string& option) {
  for (const char* o : kOptions)
    if (option == o) return true;
  return false;
}

bool PipelineOverrides::take(const std::string& option, const std::string& value) {
  if (option == "--uri") {
    if (value.empty()) throw std::invalid_argument("--uri needs a file, directory, glob, camera or URL, got ''");
    uris.push_back(value);
    return true;
  }
  std::optional<std::string>* field = option == "--model"        ? &model
                                      : option == "--labels"     ? &labels
                                      : option == "--top-k"      ? &top_k
                                      : option == "--batch-size" ? &batch_size
                                      : option == "--device"     ? &device
                                      : option == "--output"     ? &output
                                      : option == "--size"       ? &size
                                                                 : nullptr;
  if (!field) return false;
  if (*field) throw std::invalid_argument(option + " is given twice");
  if (value.empty()) throw std::invalid_argument(option + " needs a value, got ''");
  *field = value;
  return true;
}

std::string shipped_default_pipeline() {
  const fs::path in_tree = fs::path("config") / "pipelines" / "default.yaml";
  const fs::path installed = fs::path("share") / "sluice" / in_tree;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec)
    for (fs::path dir = exe.parent_path(); !dir.empty(); dir = dir.parent_path()) {
      for (const auto& candidate : {dir / in_tree, dir / installed})
        if (fs::is_regular_file(candidate, ec)) return candidate.string();
      if (dir == dir.root_path()) break;
    }
  throw ConfigError("cannot find the shipped default pipeline (" + in_tree.string() + " or " + installed.string() +
                    " in a directory above " + shown(exe.string()) + "); name a pipeline FILE");
}

AppliedOverrides::AppliedOverrides(PipelineSpec& spec, const PipelineOverrides& o) {
  if (o.device) {
    const std::string& d = *o.device;
    if (d != "auto" && d != "cpu" && d != "cuda") refuse("--device", d, "expected one of auto|cpu|cuda");
    spec.device = d == "cpu" ? DeviceChoice::cpu : d == "cuda" ? DeviceChoice::cuda : DeviceChoice::automatic;
    // Asked for by name, the GPU is not replaced by the CPU: say so before anything is built.
    if (spec.device == DeviceChoice::cuda && gpu::device_count() <= spec.gpu)
      refuse("--device", d,
             std::string(!gpu::built_with_cuda() ? "this sluiced was built without CUDA"
                         : gpu::device_count() == 0 ? "no CUDA device is visible"
                                                    : "the pipeline's gpu: " + std::to_string(spec.gpu) + " is not visible") +
                 " (--device auto or cpu runs on the CPU)");
    pipeline_options_.push_back("--device " + d);
  }
  if (o.batch_size) {
    std::string error;
    const auto value = parse_param(*pipeline_key("batch_size"), *o.batch_size, error);
    if (!value) refuse("--batch-size", *o.batch_size, error);
    spec.batch_size = static_cast<int>(std::get<std::int64_t>(*value));
    pipeline_options_.push_back("--batch-size " + *o.batch_size);
  }

  // Sets `key` of `stage` to `value` (checked as the file's would be), from `option` given as `text`.
  const auto set = [&](StageSpec& stage, const std::string& key, const std::string& option, const std::string& text,
                       const std::string& value) {
    std::string error;
    const auto checked = parse_param(declared(stage, key), value, error);
    if (!checked) refuse(option, text, error);
    stage.params.set(key, *checked, true);
    auto& options = options_by_stage_[stage.name];
    const std::string mention = option + " " + in_quotes(text);
    if (options.empty() || options.back() != mention) options.push_back(mention);
  };

  if (!o.uris.empty()) {
    StageSpec& source = spec.stages.front();
    if (source.kind != "decode")
      refuse("--uri", o.uris.front(), "the pipeline's first stage is '" + source.name + "' (" + source.kind +
                                          "), not a decode stage");
    for (const auto& uri : o.uris)
      if (auto why = local_input_problem(uri)) refuse("--uri", uri, *why);
    std::string error;
    const auto checked = parse_param_list(declared(source, "uri"), o.uris, error);
    if (!checked) refuse("--uri", o.uris.front(), error);
    reset_to_defaults(source, {"source", "source_id"});
    source.params.set("uri", *checked, true);
    // A one-liner over a folder processes every input each time it runs; --resume makes it a job that skips
    // what an earlier run finished (its ledger: docs/running.md).
    source.params.set("resume", o.resume, true);
    // A camera or stream named on the command line that cannot be reached is a typo or a camera that is off:
    // the run gives up after a few attempts in a row (seconds, with the default back-off) instead of retrying forever.
    source.params.set("max_attempts", std::int64_t{kCommandLineAttempts}, true);
    for (const auto& uri : o.uris) options_by_stage_[source.name].push_back("--uri " + in_quotes(uri));
  }

  if (o.resume && o.uris.empty())
    throw std::invalid_argument("--resume makes the --uri inputs a resumable job; without --uri the file's `resume` applies");

  if (o.model || o.labels || o.top_k) {
    const std::string option = o.model ? "--model" : o.labels ? "--labels" : "--top-k";
    StageSpec& infer = only_stage_of_kind(spec, "infer", option, o.model ? *o.model : o.labels ? *o.labels : *o.top_k);
    // Labels name the classes and detections outputs' classes, top-k shapes the classes output; on other outputs
    // they would be ignored without a word.
    const std::string& output = infer.params.string("output");
    if (o.labels && output != "classes" && output != "detections")
      refuse("--labels", *o.labels, "the infer stage '" + infer.name + "' emits its raw tensor (output: " + output +
                                        "); --labels applies to output: classes and detections");
    if (o.top_k && output != "classes")
      refuse("--top-k", *o.top_k, "the infer stage '" + infer.name + "' emits " +
                                      (output == "detections" ? std::string("detections") : "its raw tensor") +
                                      " (output: " + output + "); --top-k applies to output: classes");
    if (o.model) set(infer, "model", "--model", *o.model, absolute(*o.model));
    // Another model has other classes: its labels are --labels, else NAME.labels beside NAME.onnx, else none.
    if (o.labels) {
      set(infer, "labels", "--labels", *o.labels, absolute(*o.labels));
    } else if (o.model) {
      const fs::path beside = fs::path(absolute(*o.model)).replace_extension(".labels");
      std::error_code ec;
      infer.params.set("labels", fs::is_regular_file(beside, ec) ? beside.string() : std::string(), true);
    }
    if (o.top_k) set(infer, "top_k", "--top-k", *o.top_k, *o.top_k);
  }

  // The frame size the model takes: its input's height and width when the file fixes them, else --size WxH
  // (a model with an open size); the preprocess stage scales every frame to it.
  if (o.model || o.size) {
    std::optional<std::pair<std::string, std::string>> wanted;
    if (o.size && !(wanted = split_size(*o.size))) refuse("--size", *o.size, "expected WIDTHxHEIGHT, e.g. 224x224");
    std::string input;
    const auto fixed = o.model ? model_input_size(absolute(*o.model), input) : std::nullopt;
    if (fixed && fixed->first > 0 && fixed->second > 0) {
      const std::string model_size = std::to_string(fixed->second) + "x" + std::to_string(fixed->first);
      if (wanted && *o.size != model_size)
        refuse("--size", *o.size, "the model " + shown(*o.model) + " takes " + model_size + " frames (its input " +
                                      input + "); leave --size out");
      wanted = std::make_pair(std::to_string(fixed->second), std::to_string(fixed->first));
    } else if (fixed) {
      // sluice's engine binds every dimension but the batch when it loads a model (nn/onnx_loader): say so now.
      refuse("--model", *o.model, "its input " + input + ": the frame size is left open, and sluice runs models " +
                                      "of a fixed size only; re-export it with one (e.g. 224x224)");
    }
    if (wanted) {
      const std::string option = o.size ? "--size" : "--model", text = o.size ? *o.size : *o.model;
      StageSpec& preprocess = only_stage_of_kind(spec, "preprocess", option, text);
      set(preprocess, "width", option, text, wanted->first);
      set(preprocess, "height", option, text, wanted->second);
      // A size the model does not take fails at the infer stage: its error names the option too.
      if (o.size) pipeline_options_.push_back("--size " + in_quotes(*o.size));
    }
  }

  if (o.output) {
    StageSpec& sink = spec.stages.back();
    if (spec.tee >= 0)
      refuse("--output", *o.output, "the pipeline has a tee with " + std::to_string(spec.branches.size()) +
                                        " branches, each with its sink: set their paths in the file");
    if (sink.kind != "sink")
      refuse("--output", *o.output, "the pipeline's last stage is '" + sink.name + "' (" + sink.kind +
                                        "), not a sink stage");
    const std::string path = *o.output == "-" ? "-" : absolute(*o.output);
    // Records of an earlier run are never overwritten, and not added to without a word: --resume says so.
    std::error_code ec;
    if (path != "-" && !o.resume && fs::is_regular_file(path, ec) && fs::file_size(path, ec) > 0 && !ec)
      refuse("--output", *o.output, "it holds " + std::to_string(fs::file_size(path, ec)) +
                                        " bytes of an earlier run: remove it or name another file (--resume adds "
                                        "this run's records to it)");
    reset_to_defaults(sink, {"per", "rotate_mb", "rotate_s"});
    set(sink, "type", "--output", *o.output, "jsonl");
    set(sink, "per", "--output", *o.output, "run");
    set(sink, "path", "--output", *o.output, path);
    PipelineSpec only_sink;
    only_sink.file = spec.file;
    only_sink.stages = {sink};
    if (const auto problems = output_problems(only_sink); !problems.empty()) {
      const std::string& p = problems.front();
      const auto at = p.find("path '");  // "FILE:L:C: stage 'sink' (sink): path 'P': why" -> "why"
      const auto why = at == std::string::npos ? std::string::npos : p.find("': ", at);
      refuse("--output", *o.output, why == std::string::npos ? p : p.substr(why + 3));
    }
  }
}

PipelinePlan AppliedOverrides::plan(const PipelineSpec& spec) const {
  try {
    return plan_pipeline(spec);
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    for (const auto& stage : spec.stages) {
      const auto it = options_by_stage_.find(stage.name);
      if (it != options_by_stage_.end() && message.rfind(stage.where.str() + ": stage '" + stage.name + "'", 0) == 0)
        throw ConfigError(message + " (set by " + join(it->second) + ")");
    }
    if (!pipeline_options_.empty()) throw ConfigError(message + " (with " + join(pipeline_options_) + ")");
    throw;
  }
}

}  // namespace sluice
