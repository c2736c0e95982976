#pragma once
// Shared by the CPU and GPU pipeline tests: run a YAML pipeline to its end and read what it wrote.
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/pipeline_spec.hpp"
#include "config/plan.hpp"
#include "runtime/pipeline.hpp"

namespace sluice::test {

inline PipelinePlan plan_from(const std::string& yaml) { return plan_pipeline(parse_pipeline(yaml, "test.yaml")); }

inline FrameLedger::Totals run_to_end(PipelinePlan plan, PipelineSnapshot* snapshot = nullptr) {
  Pipeline p(std::move(plan));
  p.start();
  p.wait();
  if (snapshot) *snapshot = p.snapshot();
  return p.ledger().totals();
}

inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

// A chain testsrc -> upload -> preprocess -> download -> sink jsonl on `device`.
inline std::string chain_yaml(const std::string& device, const std::string& format, int frames,
                              const std::string& jsonl_path, const std::string& extra_pre = "") {
  return "name: t\ndevice: " + device + "\nbatch_size: 8\nstages:\n"
         "  - kind: decode\n    pattern: shapes\n    width: 320\n    height: 240\n    format: " + format +
         "\n    frames: " + std::to_string(frames) +
         "\n  - kind: upload\n  - kind: preprocess\n    width: 96\n    height: 64\n" + extra_pre +
         "  - kind: download\n  - kind: sink\n    type: jsonl\n    path: " + jsonl_path + "\n";
}

}  // namespace sluice::test
