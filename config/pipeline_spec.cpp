#include "config/pipeline_spec.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "media/media.hpp"
#include "runtime/bounded_file.hpp"
#include "runtime/errors.hpp"
#include "runtime/latency_budget_limit.hpp"

namespace sluice {
namespace {

// Pipeline-level keys are declared like stage parameters, so they are checked and documented the same way.
std::vector<ParamSpec> pipeline_keys() {
  return {
      {"name", ParamType::string, "pipeline", "name shown in logs and summaries"},
      {"device", ParamType::choice, "auto", "where GPU-capable stages run; auto = cuda when a GPU is present",
       {}, {}, {"auto", "cpu", "cuda"}},
      {"gpu", ParamType::integer, "0", "CUDA device index", 0.0, 63.0},
      {"gpus", ParamType::strings, "[]",
       "replicas of the stages between the source and the first stage that keeps state across batches (track), a "
       "tee or the sink: 'all' (one per visible GPU) or a list of CUDA device indices (one replica per entry; an "
       "index twice: two replicas on that GPU); batches go to the least-loaded replica and reach the rest of the "
       "pipeline in the order the source made them; empty: one chain on `gpu`"},
      {"execution", ParamType::choice, "pipelined",
       "pipelined: a thread and stream per stage; serial: one thread and stream, sync after each stage (A/B)",
       {}, {}, {"pipelined", "serial"}},
      {"batch_size", ParamType::integer, "8", "frames per batch before the GPU stages", 1.0, 4096.0},
      {"batch_timeout_ms", ParamType::number, "10", "a partial batch leaves after this wait for more frames",
       0.0, 60000.0},
      {"latency_budget_ms", ParamType::number, "0",
       "capture-to-sink budget of every frame (0 = none): a partial batch leaves once waiting longer would break "
       "its oldest frame's budget given the measured time batches take downstream; frames past it are counted "
       "late, never dropped for it (a source added at run time may have its own)",
       0.0, kMaxLatencyBudgetMs},
      {"queue_depth", ParamType::integer, "4", "default depth (in batches) of every queue between stages", 1.0,
       1024.0},
      {"control_socket", ParamType::string, "", "service mode: control socket path (default /run/sluice/control.sock)"},
      {"control_tcp", ParamType::string, "",
       "service mode: also serve the control protocol on TCP ADDR:PORT (off; 127.0.0.1:PORT keeps it local)"},
      {"metrics", ParamType::string, "", "service mode: Prometheus endpoint ADDR:PORT (off; e.g. 127.0.0.1:9464)"},
      {"control_allow_users", ParamType::strings, "[]",
       "service mode: users who may pause/resume/reload/stop (empty: anyone who can open the socket)"},
      {"control_allow_groups", ParamType::strings, "[]", "service mode: groups who may pause/resume/reload/stop"},
      {"control_token", ParamType::string, "",
       "service mode: file holding the shared secret TCP peers send as 'token' to change things (mode 0600, owned by "
       "sluiced's user); without it TCP control is read-only and only a loopback control_tcp is allowed"},
      {"config_roots", ParamType::strings, "[]",
       "service mode: directories whose files a control reload may load (besides the file sluiced started with)"},
      {"input_roots", ParamType::strings, "[]",
       "service mode: directories (or files) under which source-add may read local paths (none: refused)"},
      {"output_roots", ParamType::strings, "[]",
       "service mode: directories a reloaded pipeline's sinks must write under (none: not checked)"},
      {"allow_source_hosts", ParamType::strings, "[]",
       "service mode: HOST or HOST:PORT (optionally SCHEME:// in front) that source-add may connect to (none: refused)"},
  };
}

// Keys every stage entry may have besides its kind's parameters.
std::vector<ParamSpec> stage_common_keys() {
  return {
      {"kind", ParamType::string, "", "the stage kind (see `sluiced inspect`)", {}, {}, {}, 0, true},
      {"name", ParamType::string, "", "name in logs and statistics (default: the kind)"},
      {"queue_depth", ParamType::integer, "", "depth of the queue after this stage (default: queue_depth)", 1.0,
       1024.0},
      {"leaky", ParamType::choice, "no",
       "when the queue after this stage is full: no = block the stage (lossless), oldest/newest = drop that batch",
       {}, {}, {"no", "oldest", "newest"}},
  };
}

SourceLocation where(const std::string& file, const YAML::Node& node) {
  const auto m = node.Mark();
  return {file, m.line + 1, m.column + 1};
}

[[noreturn]] void fail(const SourceLocation& at, const std::string& what) { throw ConfigError(at.str() + ": " + what); }

const ParamSpec* find_key(const std::vector<ParamSpec>& keys, const std::string& name) {
  for (const auto& k : keys)
    if (k.name == name) return &k;
  return nullptr;
}

std::string key_list(const std::vector<ParamSpec>& a, const std::vector<ParamSpec>& b = {}) {
  std::string s;
  for (const auto* list : {&a, &b})
    for (const auto& k : *list) s += (s.empty() ? "" : ", ") + k.name;
  return s;
}

ParamValue parse_value(const ParamSpec& spec, const YAML::Node& node, const SourceLocation& at,
                       const std::string& context) {
  std::string error;
  std::optional<ParamValue> v;
  if (node.IsSequence()) {
    std::vector<std::string> items;
    for (const auto& item : node) {
      if (!item.IsScalar()) fail(where(at.file, item), context + "key '" + spec.name + "': each list item must be a plain value");
      items.push_back(item.Scalar());
    }
    v = parse_param_list(spec, items, error);
  } else if (node.IsScalar()) {
    v = parse_param(spec, node.Scalar(), error);
  } else if (node.IsNull() && spec.type == ParamType::choice) {
    v = parse_param(spec, "null", error);  // `type: null` means the choice named null
  } else {
    error = "expected " + spec.type_name() + (node.IsMap() ? ", got a mapping" : ", got no value");
  }
  if (!v) fail(at, context + "key '" + spec.name + "': " + error);
  return *v;
}

// Fills `values` with every declared key: the given value (checked) or the default.
void fill_params(const std::vector<ParamSpec>& specs, const std::map<std::string, YAML::Node>& given,
                 const std::string& file, const SourceLocation& owner, const std::string& context,
                 ParamValues& values) {
  for (const auto& spec : specs) {
    auto it = given.find(spec.name);
    if (it != given.end()) {
      values.set(spec.name, parse_value(spec, it->second, where(file, it->second), context), true);
    } else if (spec.required) {
      fail(owner, context + "missing required key '" + spec.name + "' (" + spec.doc + ")");
    } else if (!spec.default_value.empty()) {
      values.set(spec.name, parse_value(spec, YAML::Load(spec.default_value), {"<default>", 0, 0}, context), false);
    } else {
      values.set(spec.name, std::string(), false);  // optional, no default: read only when was_given()
    }
  }
}

// Whether some declared key is "block.name", and those keys' names within the block.
bool has_block(const std::vector<ParamSpec>& keys, const std::string& block) {
  for (const auto& k : keys)
    if (k.name.size() > block.size() && k.name.compare(0, block.size() + 1, block + ".") == 0) return true;
  return false;
}

std::string block_keys(const std::vector<ParamSpec>& keys, const std::string& block) {
  std::string s;
  for (const auto& k : keys)
    if (k.name.size() > block.size() && k.name.compare(0, block.size() + 1, block + ".") == 0)
      s += (s.empty() ? "" : ", ") + k.name.substr(block.size() + 1);
  return s;
}

std::map<std::string, YAML::Node> entries(const YAML::Node& map, const std::string& file) {
  std::map<std::string, YAML::Node> out;
  for (const auto& kv : map) {
    const std::string key = kv.first.Scalar();
    if (out.count(key)) fail(where(file, kv.first), "duplicate key '" + key + "'");
    out.emplace(key, kv.second);
  }
  return out;
}

// `branches` receives a tee's `branches` entry (a tee without one is refused).
StageSpec parse_stage(const YAML::Node& node, int index, const std::string& file, int default_depth,
                      std::optional<YAML::Node>* branches = nullptr) {
  const SourceLocation at = where(file, node);
  const std::string ordinal = "stage #" + std::to_string(index + 1);
  if (!node.IsMap()) fail(at, ordinal + ": expected a mapping with at least 'kind'");
  auto given = entries(node, file);

  auto kind_it = given.find("kind");
  if (kind_it == given.end()) fail(at, ordinal + ": missing required key 'kind' (one of " +
                                           StageRegistry::builtin().kinds() + ")");
  StageSpec spec;
  spec.kind = kind_it->second.Scalar();
  spec.where = at;
  const StageInfo* info = StageRegistry::builtin().find(spec.kind);
  if (!info && std::ranges::find(kMediaStageKinds, spec.kind) != std::end(kMediaStageKinds))
    fail(where(file, kind_it->second),
         ordinal + ": stage kind '" + spec.kind + "' needs the media library (OpenCV videoio/imgcodecs), which this "
                   "sluiced was built without (SLUICE_GPU_HOST)");
  if (!info)
    fail(where(file, kind_it->second),
         ordinal + ": unknown stage kind '" + spec.kind + "' (known: " + StageRegistry::builtin().kinds() + ")");
  spec.name = given.count("name") ? given["name"].Scalar() : spec.kind;
  const std::string context = "stage '" + spec.name + "' (" + spec.kind + "): ";

  if (spec.kind == "tee" && !branches)
    fail(at, context + "a tee inside a branch is not supported (one tee per pipeline: give the first tee more "
                       "branches)");
  const auto common = stage_common_keys();
  std::map<std::string, YAML::Node> own, shared;
  for (const auto& [key, value] : given) {
    SourceLocation key_at = where(file, value);
    spec.key_where[key] = key_at;
    if (key == "branches" && spec.kind == "tee" && branches) {
      *branches = value;
    } else if (find_key(common, key)) shared.emplace(key, value);
    else if (find_key(info->params, key)) own.emplace(key, value);
    else if (value.IsMap() && has_block(info->params, key)) {
      // A block (`detect: {iou_threshold: 0.5}`) holds the keys declared as "detect.iou_threshold".
      for (const auto& [sub, sub_value] : entries(value, file)) {
        const std::string full = key + "." + sub;
        const SourceLocation sub_at = where(file, sub_value);
        if (!find_key(info->params, full))
          fail(sub_at, context + "unknown key '" + full + "' (valid in '" + key + "': " + block_keys(info->params, key) + ")");
        if (given.count(full)) fail(sub_at, context + "key '" + full + "' is given twice (in the block and as '" + full + "')");
        spec.key_where[full] = sub_at;
        own.emplace(full, sub_value);
      }
    } else fail(key_at, context + "unknown key '" + key + "' (valid: " + key_list(common, info->params) + ")");
  }
  if (spec.kind == "tee" && !*branches)
    fail(at, context + "missing 'branches' (a list of at least two branches, each a list of stages ending in a sink)");
  ParamValues common_values;
  fill_params(common, shared, file, at, context, common_values);
  fill_params(info->params, own, file, at, context, spec.params);
  spec.queue_depth = common_values.was_given("queue_depth") ? static_cast<int>(common_values.integer("queue_depth"))
                                                            : default_depth;
  const std::string& leaky = common_values.string("leaky");
  spec.queue_policy = leaky == "oldest" ? QueuePolicy::leaky_oldest
                      : leaky == "newest" ? QueuePolicy::leaky_newest
                                          : QueuePolicy::block;
  return spec;
}

// yaml-cpp 0.7 parses nested collections by recursion without a depth limit: "[[[[..." a few hundred thousand
// deep overflows the stack. A pipeline nests a few levels, so refuse text that could nest deeper than
// kMaxYamlNesting, judged by a conservative scan: open flow brackets outside quoted scalars and comments, plus
// the column where a line's content starts (each block level takes at least one column, "- - x" two each).
constexpr int kMaxYamlNesting = 100;
constexpr std::size_t kMaxYamlColumn = 1000;

void refuse_deep_nesting(const std::string& text, const std::string& file) {
  int flow = 0, line = 1;
  std::size_t column = 0;
  bool at_line_start = true;
  char quote = 0, previous = '\n';
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    ++column;
    if (c == '\n') {
      ++line, column = 0, at_line_start = true, previous = c;
      continue;
    }
    if (quote) {
      if (quote == '"' && c == '\\') ++i, ++column;  // an escaped character, maybe a quote
      else if (c == quote) quote = 0;
      previous = c;
      continue;
    }
    if (at_line_start && c != ' ' && c != '\t' && !((c == '-' || c == '?') && i + 1 < text.size() && text[i + 1] == ' ')) {
      at_line_start = false;
      if (column > kMaxYamlColumn)
        throw ConfigError(file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": nested deeper than " +
                          std::to_string(kMaxYamlColumn) + " columns; a pipeline needs a few levels");
    }
    const bool starts_token = previous == ' ' || previous == '\t' || previous == '\n' || previous == '[' ||
                              previous == '{' || previous == ',' || previous == ':' || previous == '-';
    if (c == '#' && (previous == ' ' || previous == '\t' || previous == '\n')) {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;  // a comment, to the end of the line
    } else if ((c == '\'' || c == '"') && starts_token) {
      quote = c;
    } else if (c == '[' || c == '{') {
      if (++flow > kMaxYamlNesting)
        throw ConfigError(file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": nested deeper than " +
                          std::to_string(kMaxYamlNesting) + " levels; a pipeline needs a few");
    } else if ((c == ']' || c == '}') && flow > 0) {
      --flow;
    }
    previous = c;
  }
}

// A tee's branches: each a list of stages (the queue into it takes the tee's queue_depth and leaky), or a mapping
// with `stages` and its own `queue_depth` / `leaky` for the queue from the tee into it.
template <class AddStage>
void parse_branches(const YAML::Node& node, const std::string& file, int depth, PipelineSpec& spec,
                    AddStage&& add_stage) {
  const StageSpec tee = spec.stages[static_cast<std::size_t>(spec.tee)];  // a copy: add_stage grows the list
  const std::string context = "stage '" + tee.name + "' (tee): ";
  if (!node.IsSequence())
    fail(where(file, node), context + "'branches' must be a list of branches, each a list of stages ending in a sink");
  if (node.size() < 2)
    fail(where(file, node), context + "a tee needs at least two branches, got " + std::to_string(node.size()) +
                                " (with one, put its stages after the tee's upstream stage and drop the tee)");
  const std::vector<ParamSpec> keys = {
      {"stages", ParamType::string, "", "the branch's stages, ending in a sink"},
      {"queue_depth", ParamType::integer, "", "depth of the queue from the tee into this branch", 1.0, 1024.0},
      {"leaky", ParamType::choice, "no", "when the queue into this branch is full: no = block the tee, oldest/newest = "
                                         "drop that batch in this branch", {}, {}, {"no", "oldest", "newest"}}};
  for (std::size_t b = 0; b < node.size(); ++b) {
    const YAML::Node& entry = node[b];
    const std::string which = context + "branch " + std::to_string(b + 1) + ": ";
    BranchSpec branch;
    branch.where = where(file, entry);
    branch.queue_depth = tee.queue_depth;
    branch.queue_policy = tee.queue_policy;
    // An optional, not a Node assigned to: yaml-cpp's Node::operator= rewrites the node it refers to.
    std::optional<YAML::Node> stages;
    if (!entry.IsMap()) stages.emplace(entry);
    if (entry.IsMap()) {
      std::map<std::string, YAML::Node> queue;
      for (const auto& [key, value] : entries(entry, file)) {
        if (key == "stages") stages.emplace(value);
        else if (key == "queue_depth" || key == "leaky") queue.emplace(key, value);
        else fail(where(file, value), which + "unknown key '" + key + "' (valid: stages, queue_depth, leaky)");
      }
      if (!stages) fail(branch.where, which + "missing 'stages' (a list of stages ending in a sink)");
      ParamValues values;
      fill_params({keys[1], keys[2]}, queue, file, branch.where, which, values);
      if (values.was_given("queue_depth")) branch.queue_depth = static_cast<int>(values.integer("queue_depth"));
      if (values.was_given("leaky")) {
        const std::string& leaky = values.string("leaky");
        branch.queue_policy = leaky == "oldest" ? QueuePolicy::leaky_oldest
                              : leaky == "newest" ? QueuePolicy::leaky_newest
                                                  : QueuePolicy::block;
      }
    }
    if (!stages->IsSequence() || stages->size() == 0)
      fail(where(file, *stages), which + "expected a list of stages ending in a sink (or a mapping with 'stages', "
                                        "'queue_depth', 'leaky')");
    branch.first = spec.stages.size();
    branch.count = stages->size();
    const YAML::Node& list = *stages;
    for (std::size_t i = 0; i < list.size(); ++i) {
      StageSpec st = parse_stage(list[i], static_cast<int>(i), file, depth);
      st.branch = static_cast<int>(b);
      add_stage(std::move(st));
    }
    spec.branches.push_back(branch);
  }
}

// `gpus:` as written: "all" (kAllGpus), or device indices 0..63, at most kMaxReplicas of them.
std::vector<int> parse_gpus(const std::vector<std::string>& given, const std::string& file) {
  if (given.size() == 1 && given.front() == "all") return {kAllGpus};
  if (given.size() > static_cast<std::size_t>(kMaxReplicas))
    throw ConfigError(file + ": gpus: " + std::to_string(given.size()) + " replicas, at most " +
                      std::to_string(kMaxReplicas));
  std::vector<int> gpus;
  for (const std::string& g : given) {
    int index = -1;
    const auto [end, ec] = std::from_chars(g.data(), g.data() + g.size(), index);
    if (ec != std::errc() || end != g.data() + g.size() || index < 0 || index > 63)
      throw ConfigError(file + ": gpus: '" + g + "' is not a CUDA device index 0..63 (write 'all', or a list such as [0, 1])");
    gpus.push_back(index);
  }
  return gpus;
}

}  // namespace

PipelineSpec parse_pipeline(const std::string& yaml_text, const std::string& file) {
  refuse_deep_nesting(yaml_text, file);
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(file + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                      ": YAML syntax error: " + e.msg);
  }
  if (!root.IsMap()) throw ConfigError(file + ":1:1: expected a mapping with 'stages' at the top level");

  auto given = entries(root, file);
  const auto keys = pipeline_keys();
  std::optional<YAML::Node> stages_entry;
  std::map<std::string, YAML::Node> top;
  for (const auto& [key, value] : given) {
    if (key == "stages") stages_entry = value;
    else if (find_key(keys, key)) top.emplace(key, value);
    else fail(where(file, value), "unknown top-level key '" + key + "' (valid: " + key_list(keys) + ", stages)");
  }
  ParamValues values;
  fill_params(keys, top, file, {file, 1, 1}, "", values);

  PipelineSpec spec;
  spec.file = file;
  spec.name = values.string("name");
  const std::string& device = values.string("device");
  spec.device = device == "cpu" ? DeviceChoice::cpu : device == "cuda" ? DeviceChoice::cuda : DeviceChoice::automatic;
  spec.gpu = static_cast<int>(values.integer("gpu"));
  spec.gpus = parse_gpus(values.strings("gpus"), file);
  spec.execution = values.string("execution") == "serial" ? Execution::serial : Execution::pipelined;
  spec.batch_size = static_cast<int>(values.integer("batch_size"));
  spec.batch_timeout_us = static_cast<std::int64_t>(values.number("batch_timeout_ms") * 1000.0);
  spec.latency_budget_ns = static_cast<std::int64_t>(values.number("latency_budget_ms") * 1e6);
  const int depth = static_cast<int>(values.integer("queue_depth"));
  spec.service.control_socket = values.string("control_socket");
  spec.service.control_tcp = values.string("control_tcp");
  spec.service.metrics = values.string("metrics");
  spec.service.allow_users = values.strings("control_allow_users");
  spec.service.allow_groups = values.strings("control_allow_groups");
  spec.service.control_token = values.string("control_token");
  spec.service.config_roots = values.strings("config_roots");
  spec.service.input_roots = values.strings("input_roots");
  spec.service.output_roots = values.strings("output_roots");
  spec.service.allow_source_hosts = values.strings("allow_source_hosts");

  if (!stages_entry) throw ConfigError(file + ":1:1: missing 'stages' (a list of stages, source first, sink last)");
  const YAML::Node& stages_node = *stages_entry;
  if (!stages_node.IsSequence() || stages_node.size() < 2)
    fail(where(file, stages_node), "'stages' must be a list of at least two stages (a source and a sink)");
  std::set<std::string> names;
  auto add_stage = [&](StageSpec st) {
    if (!names.insert(st.name).second)
      fail(st.where, "stage name '" + st.name + "' is used twice (names are unique across the trunk and every "
                     "branch of a tee: give one a distinct 'name')");
    spec.stages.push_back(std::move(st));
  };
  std::optional<YAML::Node> branches;
  for (std::size_t i = 0; i < stages_node.size(); ++i) {
    if (branches)
      fail(where(file, stages_node[i]), "stage #" + std::to_string(i + 1) + " follows the tee '" +
                                            spec.stages[static_cast<std::size_t>(spec.tee)].name +
                                            "': a tee is the trunk's last stage; put what follows it in its branches");
    StageSpec st = parse_stage(stages_node[i], static_cast<int>(i), file, depth, &branches);
    if (branches) spec.tee = static_cast<int>(spec.stages.size());
    add_stage(std::move(st));
  }
  if (branches) parse_branches(*branches, file, depth, spec, add_stage);
  if (spec.stages.size() > static_cast<std::size_t>(kMaxStages))
    fail(where(file, stages_node), "at most " + std::to_string(kMaxStages) + " stages are supported (counting every branch's)");
  return spec;
}

PipelineSpec load_pipeline(const std::string& path) {
  std::string text;
  try {
    text = read_bounded_file(path, "pipeline file", kMaxPipelineFileBytes);
  } catch (const FileReadError& e) {
    throw ConfigError(e.what());
  }
  PipelineSpec spec = parse_pipeline(text, path);
  // systemd's StateDirectory= hands the directory over in $STATE_DIRECTORY (colon-separated when several).
  if (const char* dirs = std::getenv("STATE_DIRECTORY"); dirs && *dirs) {
    const std::string all(dirs);
    spec.state_dir = all.substr(0, all.find(':'));
  }
  return spec;
}

std::optional<ParamSpec> pipeline_key(const std::string& name) {
  const auto keys = pipeline_keys();
  if (const ParamSpec* key = find_key(keys, name)) return *key;
  return std::nullopt;
}

std::string describe_pipeline_keys() {
  StageInfo top{"(pipeline)", StageRole::transform, "top-level keys of a pipeline file", pipeline_keys(), {}};
  StageInfo common{"(every stage)", StageRole::transform, "keys every stage entry takes", stage_common_keys(), {}};
  auto strip = [](std::string s) { return s.substr(s.find(':') + 2); };
  return "pipeline file, top-level keys: " + strip(describe_stage(top)) +
         "  stages  list of stages, a source first and a sink last (or a tee last, whose `branches` each end in a sink)\n\nevery stage entry: " +
         strip(describe_stage(common));
}

}  // namespace sluice
