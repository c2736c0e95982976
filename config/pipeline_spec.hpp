#pragma once
// YAML -> typed pipeline description. Every error names file:line:col, the stage and the key.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/bounded_queue.hpp"
#include "runtime/params.hpp"
#include "runtime/pipeline.hpp"
#include "runtime/stage.hpp"

namespace sluice {

struct SourceLocation {
  std::string file;
  int line = 0, col = 0;  // 1-based
  std::string str() const { return file + ":" + std::to_string(line) + ":" + std::to_string(col); }
};

enum class DeviceChoice { automatic, cpu, cuda };

constexpr int kAllGpus = -1;     // `gpus: all`
constexpr int kMaxReplicas = 8;  // replicas of a pipeline's GPU stages

struct StageSpec {
  std::string kind, name;
  ParamValues params;
  SourceLocation where;  // the stage's entry in the list
  std::map<std::string, SourceLocation> key_where;
  // The queue after this stage (unused for the last one).
  int queue_depth = 4;
  QueuePolicy queue_policy = QueuePolicy::block;
  int branch = -1;  // which branch of the tee the stage is in (-1: the trunk, before and including the tee)
};

// One branch of a tee: its stages lie at stages[first, first + count) of the (flattened) PipelineSpec, the last a
// sink; the queue from the tee into the branch has its own depth and policy.
struct BranchSpec {
  SourceLocation where;
  std::size_t first = 0, count = 0;
  int queue_depth = 4;
  QueuePolicy queue_policy = QueuePolicy::block;
};

// How the service exposes itself; sluiced's command-line options override these.
struct ServiceSettings {
  std::string control_socket, control_tcp, metrics;
  std::vector<std::string> allow_users, allow_groups;
  std::string control_token;  // access control (daemon/access_policy.hpp)
  std::vector<std::string> config_roots, input_roots, output_roots, allow_source_hosts;
  bool operator==(const ServiceSettings&) const = default;
};

struct PipelineSpec {
  std::string file;
  std::string name = "pipeline";
  DeviceChoice device = DeviceChoice::automatic;
  int gpu = 0;
  // Replicas (`gpus:`): one device index per replica, {kAllGpus} for every visible GPU; empty: no replicas.
  std::vector<int> gpus;
  Execution execution = Execution::pipelined;
  int batch_size = 8;
  std::int64_t batch_timeout_us = 10'000;
  std::int64_t latency_budget_ns = 0;  // 0: none
  // Every stage, flattened: the trunk (source first; with a tee, the tee last), then each branch's stages in
  // order. Without a tee `branches` is empty and the last stage is the sink.
  std::vector<StageSpec> stages;
  int tee = -1;  // index of the tee stage in `stages`, -1: none (a linear pipeline)
  std::vector<BranchSpec> branches;
  ServiceSettings service;
  std::string state_dir;  // resumable jobs' ledgers: --state-dir, else $STATE_DIRECTORY (systemd), else empty
};

// Parses a pipeline; `file` names the origin in messages. Throws ConfigError.
PipelineSpec parse_pipeline(const std::string& yaml_text, const std::string& file);
PipelineSpec load_pipeline(const std::string& path);

// The top-level keys and their meaning, for `sluiced inspect` and docs/stages.md.
std::string describe_pipeline_keys();
// The declaration of top-level key `name` (type, range, default), to check a value given another way (a
// command-line override) as the file's would be; nullopt when there is no such key.
std::optional<ParamSpec> pipeline_key(const std::string& name);


}  // namespace sluice
