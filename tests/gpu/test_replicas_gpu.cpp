// Replicas (`gpus:`) on the GPU path, two on one GPU: each with its own streams, pools, engine and CUDA graphs; the
// source's pinned batches released by each replica's own event; results as one chain gives them; a replica whose
// GPU faults goes down while the other delivers the rest.
#include <catch2/catch.hpp>

#include <cstdio>
#include <map>
#include <string>

#include "../pipeline_helpers.hpp"
#include "runtime/gpu.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

// decode (one source, animated) -> upload -> preprocess -> infer (the shipped classifier) -> download -> jsonl on
// `device`, with `top` at the top level; queue_depth 1 so every pool slot is reused many times.
std::string classify_chain(const std::string& device, const std::string& top, int frames, const std::string& jsonl) {
  std::remove(jsonl.c_str());
  const std::string models = source_dir() + "/models/";
  return "name: replicas-gpu\ndevice: " + device + "\n" + top + "batch_size: 8\nqueue_depth: 1\nstages:\n"
         "  - kind: decode\n    pattern: shapes\n    width: 320\n    height: 240\n    format: nv12\n    frames: " +
         std::to_string(frames) +
         "\n  - kind: upload\n  - kind: preprocess\n    width: 64\n    height: 64\n    order: rgb\n"
         "    mean: [0.485, 0.456, 0.406]\n    std: [0.229, 0.224, 0.225]\n"
         "  - kind: infer\n    model: " + models + "testsrc-classifier.onnx\n    labels: " + models +
         "testsrc-classifier.labels\n    output: classes\n    top_k: 2\n"
         "  - kind: download\n  - kind: sink\n    type: jsonl\n    path: " + jsonl + "\n";
}

std::map<std::uint64_t, nlohmann::json> by_sequence(const std::string& jsonl) {
  std::map<std::uint64_t, nlohmann::json> out;
  std::int64_t last = -1;
  for (const auto& r : read_jsonl(jsonl)) {
    const auto seq = r.at("sequence").get<std::uint64_t>();
    REQUIRE(static_cast<std::int64_t>(seq) > last);  // in the source's order
    last = static_cast<std::int64_t>(seq);
    out[seq] = r;
  }
  return out;
}

}  // namespace

TEST_CASE("GPU replicas: two replicas on one GPU give the CPU chain's results - every frame once - each a share", "[gpu][replicas]") {
  const std::string g = "gpu_replicas.jsonl", c = "cpu_replicas_ref.jsonl";
  auto plan = plan_from(classify_chain("cuda", "gpus: [0, 0]\n", 400, g));
  REQUIRE(plan.device == Device::cuda);
  REQUIRE(plan.replica_gpus.size() == 2);
  const std::size_t first[2] = {stage_of(plan, "upload", 0), stage_of(plan, "upload", 1)};
  PipelineSnapshot s;
  const auto tg = run_to_end(std::move(plan), &s);
  const auto tc = run_to_end(plan_from(classify_chain("cpu", "", 400, c)));
  REQUIRE(tg.produced == 400);
  REQUIRE(tg.delivered == 400);
  REQUIRE(tg.in_flight() == 0);
  REQUIRE(tc.delivered == 400);
  REQUIRE(s.stages[first[0]].frames > 0);
  REQUIRE(s.stages[first[1]].frames > 0);
  REQUIRE(s.stages[first[0]].frames + s.stages[first[1]].frames == 400);
  for (const auto& st : s.stages)
    if (st.kind == "infer") REQUIRE(st.on_gpu);
  const auto got = by_sequence(g), want = by_sequence(c);
  REQUIRE(got.size() == 400);
  for (const auto& [seq, w] : want) {
    INFO("frame " << seq);
    const auto& r = got.at(seq);
    // A source slot rewritten before a replica's copy read it would show another frame's classes here.
    REQUIRE(r["classes"][0]["label"] == w["classes"][0]["label"]);
    REQUIRE(r["classes"][0]["score"].get<double>() == Approx(w["classes"][0]["score"].get<double>()).margin(2e-3));
  }
  std::remove(g.c_str());
  std::remove(c.c_str());
}

TEST_CASE("GPU replicas: a fault in one replica fails its frames in flight - the other delivers the rest in order", "[gpu][replicas][fault]") {
  const std::string g = "gpu_replicas_fault.jsonl";
  auto plan = plan_from(classify_chain("cuda", "gpus: [0, 0]\n", 400, g));
  inject_fault(plan, stage_of(plan, "infer", 1), 4);
  const std::size_t doomed = stage_of(plan, "infer", 1), survivor = stage_of(plan, "infer", 0);
  PipelineSnapshot s;
  const auto t = run_to_end(std::move(plan), &s);
  REQUIRE(t.produced == 400);
  REQUIRE(t.delivered + t.failed == 400);
  REQUIRE(t.failed > 0);
  REQUIRE(t.delivered > 300);
  REQUIRE_FALSE(s.stages[doomed].down.empty());
  REQUIRE(s.stages[survivor].down.empty());
  REQUIRE(by_sequence(g).size() == t.delivered);
  std::remove(g.c_str());
}
