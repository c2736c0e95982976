#pragma once
// Shared by the CPU and GPU pipeline tests: run a YAML pipeline to its end and read what it wrote.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/pipeline_spec.hpp"
#include "config/plan.hpp"
#include "runtime/errors.hpp"
#include "runtime/pipeline.hpp"
#include "runtime/stage.hpp"

namespace sluice::test {

// The source tree: $SLUICE_SOURCE_DIR when set, else the working directory when it holds the shipped pipelines
// (a GPU host runs the test executable from a copy of the checkout), else the nearest directory above the
// test executable that holds them (a build directory inside the checkout, wherever the two lie now). Only
// then, where the executable was built with one (SLUICE_SOURCE_DIR: the CPU tests), the tree it was built
// from; the GPU tests have none compiled in, so a bundle of them runs wherever it is unpacked.
inline std::string source_dir() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("SLUICE_SOURCE_DIR"); env && *env) return env;
  const fs::path marker = fs::path("config") / "pipelines" / "default.yaml";
  std::error_code ec;
  if (fs::is_regular_file(marker, ec)) return ".";
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec)
    for (fs::path dir = exe.parent_path(); !dir.empty(); dir = dir.parent_path()) {
      if (fs::is_regular_file(dir / marker, ec)) return dir.string();
      if (dir == dir.root_path()) break;
    }
#ifdef SLUICE_SOURCE_DIR
  return SLUICE_SOURCE_DIR;
#else
  throw std::runtime_error("cannot find the source tree (config/pipelines/default.yaml): run from the checkout, "
                           "keep the test executable inside it, or set SLUICE_SOURCE_DIR");
#endif
}

inline PipelinePlan plan_from(const std::string& yaml) { return plan_pipeline(parse_pipeline(yaml, "test.yaml")); }

// The ConfigError planning `yaml` throws, or "(accepted)".
inline std::string config_error(const std::string& yaml) {
  try {
    plan_from(yaml);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

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
// A decode → ... → jsonl sink chain writing to `jsonl_path`. A per-run jsonl file is appended to across runs
// (it may hold delivered results), so the file is removed here: each chain a test builds starts empty.
inline std::string chain_yaml(const std::string& device, const std::string& format, int frames,
                              const std::string& jsonl_path, const std::string& extra_pre = "") {
  std::remove(jsonl_path.c_str());
  return "name: t\ndevice: " + device + "\nbatch_size: 8\nstages:\n"
         "  - kind: decode\n    pattern: shapes\n    width: 320\n    height: 240\n    format: " + format +
         "\n    frames: " + std::to_string(frames) +
         "\n  - kind: upload\n  - kind: preprocess\n    width: 96\n    height: 64\n" + extra_pre +
         "  - kind: download\n  - kind: sink\n    type: jsonl\n    path: " + jsonl_path + "\n";
}

// The shipped default pipeline (config/pipelines/default.yaml: testsrc -> ... -> infer with the shipped model ->
// sink) on fresh frames: each pattern at sizes, formats, seeds and frame numbers the model was not trained on
// (models/README.md lists its training set), top-1 label against the pattern that was rendered.
struct Accuracy {
  int correct = 0, total = 0;
  std::string misses;  // "pattern size format: got label" for each miss, for the failure message
};

inline Accuracy default_model_accuracy(DeviceChoice device, const std::string& jsonl_path) {
  struct Fresh {
    int width, height;
    const char* format;
  };
  const Fresh fresh[] = {{960, 540, "bgr8"}, {1366, 768, "nv12"}, {640, 480, "i420"}, {1152, 648, "rgb8"}};
  Accuracy acc;
  for (const char* pattern : {"bars", "shapes", "gradient", "checkerboard", "noise"}) {
    for (const Fresh& f : fresh) {
      PipelineSpec spec = load_pipeline(source_dir() + "/config/pipelines/default.yaml");
      spec.device = device;
      ParamValues& src = spec.stages.front().params;
      src.set("pattern", std::string(pattern), true);
      src.set("width", std::int64_t{f.width}, true);
      src.set("height", std::int64_t{f.height}, true);
      src.set("format", std::string(f.format), true);
      src.set("frames", std::int64_t{12}, true);
      src.set("seed", std::int64_t{4242}, true);
      ParamValues& sink = spec.stages.back().params;
      sink.set("type", std::string("jsonl"), true);
      std::remove(jsonl_path.c_str());  // appended to across runs: each run reads its own records
      sink.set("path", jsonl_path, true);
      const auto totals = run_to_end(plan_pipeline(spec));
      if (totals.delivered != 12) throw std::runtime_error("default pipeline delivered " + std::to_string(totals.delivered) + " of 12");
      for (const auto& record : read_jsonl(jsonl_path)) {
        const std::string label = record.at("classes").at(0).at("label");
        ++acc.total;
        if (label == pattern) ++acc.correct;
        else acc.misses += std::string(pattern) + " " + std::to_string(f.width) + "x" + std::to_string(f.height) + " " +
                           f.format + " seq " + record.at("sequence").dump() + ": got " + label + "\n";
      }
    }
  }
  return acc;
}

// Forwards its input after a pause: a consumer slower than the source. The pause is far longer than the test
// pattern takes per batch even under ThreadSanitizer on a loaded machine (3 ms was not: no drops, test failed).
class SlowForward final : public Stage {
 public:
  explicit SlowForward(PayloadDesc d) : desc_(d) {}
  PayloadDesc output() const override { return desc_; }
  bool forwards_input() const override { return true; }
  BatchLease process(Batch*, StageContext&) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return {};
  }

 private:
  PayloadDesc desc_;
};

// Runs `inner` until its `fault_at`-th batch (from 1), which throws GpuFault instead, as a CUDA call does after an
// Xid or an uncorrectable ECC error.
class FaultAt final : public Stage {
 public:
  FaultAt(std::unique_ptr<Stage> inner, int fault_at) : inner_(std::move(inner)), fault_at_(fault_at) {}
  PayloadDesc output() const override { return inner_->output(); }
  bool forwards_input() const override { return inner_->forwards_input(); }
  bool uses_gpu() const override { return inner_->uses_gpu(); }
  bool reads_pictures() const override { return inner_->reads_pictures(); }
  void open(StageContext& ctx) override { inner_->open(ctx); }
  std::string warm_up_plan() const override { return inner_->warm_up_plan(); }
  void warm_up(StageContext& ctx) override { inner_->warm_up(ctx); }
  BatchLease process(Batch* in, StageContext& ctx) override {
    if (++batches_ == fault_at_) throw GpuFault("cudaStreamSynchronize failed: cudaErrorECCUncorrectable (injected)");
    return inner_->process(in, ctx);
  }
  void close(StageContext& ctx) override { inner_->close(ctx); }

 private:
  std::unique_ptr<Stage> inner_;
  int fault_at_, batches_ = 0;
};

// Makes stage k of `plan` fault at its `fault_at`-th batch.
inline void inject_fault(PipelinePlan& plan, std::size_t k, int fault_at) {
  plan.stages[k].stage = std::make_unique<FaultAt>(std::move(plan.stages[k].stage), fault_at);
}

// Stage `name` of replica `replica` (-1: not replicated) in `plan`.
inline std::size_t stage_of(const PipelinePlan& plan, const std::string& name, int replica) {
  for (std::size_t i = 0; i < plan.stages.size(); ++i)
    if (plan.stages[i].name == name && plan.stages[i].replica == replica) return i;
  throw std::runtime_error("no stage " + name + " in replica " + std::to_string(replica));
}

}  // namespace sluice::test
