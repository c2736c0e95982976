#include <catch2/catch.hpp>

#include "config/pipeline_spec.hpp"
#include "config/plan.hpp"
#include "runtime/errors.hpp"

using namespace sluice;
using Catch::Matchers::Contains;

namespace {
const char* kGood = R"(name: t
device: cpu
batch_size: 4
stages:
  - kind: decode
    pattern: noise
    width: 64
    height: 48
    frames: 10
  - kind: upload
  - kind: preprocess
    width: 32
    height: 16
    dtype: f16
    layout: nhwc
  - kind: download
  - kind: sink
    type: null
)";

std::string error_of(const std::string& yaml) {
  try {
    plan_pipeline(parse_pipeline(yaml, "p.yaml"));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  auto pos = s.find(from);
  REQUIRE(pos != std::string::npos);
  return s.replace(pos, from.size(), to);
}
}  // namespace

TEST_CASE("a good pipeline parses with its values and defaults", "[config]") {
  auto spec = parse_pipeline(kGood, "p.yaml");
  REQUIRE(spec.name == "t");
  REQUIRE(spec.device == DeviceChoice::cpu);
  REQUIRE(spec.batch_size == 4);
  REQUIRE(spec.batch_timeout_us == 10'000);
  REQUIRE(spec.stages.size() == 5);
  REQUIRE(spec.stages[0].params.string("pattern") == "noise");
  REQUIRE(spec.stages[0].params.string("format") == "bgr8");  // default
  REQUIRE(spec.stages[0].queue_depth == 4);
  REQUIRE(spec.stages[2].params.numbers("mean") == std::vector<double>{0.485, 0.456, 0.406});
  REQUIRE(spec.stages[4].params.string("type") == "null");

  auto plan = plan_pipeline(spec);
  REQUIRE(plan.device == Device::cpu);
  REQUIRE(plan.stages[0].output.describe() == "frames bgr8 64x48 x4 (host)");
  REQUIRE(plan.stages[1].pool_slots == 0);  // upload forwards on the CPU
  REQUIRE(plan.stages[2].output.describe() == "tensor f16 nhwc 3x16x32 x4 (host)");
  REQUIRE(plan.pool_bytes(MemoryKind::host) == 6u * (64u * 48u * 3u * 4u) + 6u * (3u * 16u * 32u * 2u * 4u));
  REQUIRE_THAT(describe_plan(plan), Contains("queue: depth 4, blocking"));
}

TEST_CASE("config errors name file:line:col and the stage and the key", "[config]") {
  SECTION("unknown key") {
    auto msg = error_of(replace(kGood, "    pattern: noise", "    patern: noise"));
    REQUIRE_THAT(msg, Contains("p.yaml:6:13") && Contains("stage 'decode'") && Contains("unknown key 'patern'") &&
                          Contains("pattern"));
  }
  SECTION("unknown stage kind") {
    auto msg = error_of(replace(kGood, "kind: upload", "kind: uplaod"));
    REQUIRE_THAT(msg, Contains("p.yaml:10:11") && Contains("unknown stage kind 'uplaod'") && Contains("upload"));
  }
  SECTION("wrong type") {
    auto msg = error_of(replace(kGood, "width: 64", "width: wide"));
    REQUIRE_THAT(msg, Contains("p.yaml:7:12") && Contains("key 'width'") && Contains("expected an integer"));
  }
  SECTION("out of range") {
    auto msg = error_of(replace(kGood, "batch_size: 4", "batch_size: 0"));
    REQUIRE_THAT(msg, Contains("p.yaml:3:13") && Contains("batch_size") && Contains("out of range"));
  }
  SECTION("bad choice") {
    auto msg = error_of(replace(kGood, "dtype: f16", "dtype: f64"));
    REQUIRE_THAT(msg, Contains("p.yaml:14:12") && Contains("stage 'preprocess'") && Contains("'f64' is not one of f32|f16"));
  }
  SECTION("wrong list length") {
    auto msg = error_of(replace(kGood, "    layout: nhwc", "    layout: nhwc\n    mean: [0.5, 0.5]"));
    REQUIRE_THAT(msg, Contains("key 'mean'") && Contains("expected 3 numbers, got 2"));
  }
  SECTION("chain that cannot connect: a tensor where frames are needed") {
    auto msg = error_of(replace(kGood, "  - kind: download", "  - kind: preprocess\n    name: again\n  - kind: download"));
    REQUIRE_THAT(msg, Contains("p.yaml:16:5") && Contains("stage 'again' (preprocess)") &&
                          Contains("takes frames, got tensor f16 nhwc 3x16x32 x4 (host)"));
  }
  SECTION("a sink in the middle") {
    auto msg = error_of(replace(kGood, "  - kind: preprocess", "  - kind: sink\n    name: early\n  - kind: preprocess"));
    REQUIRE_THAT(msg, Contains("p.yaml:11:5") && Contains("is a sink but position 3 needs a transform"));
  }
  SECTION("a source in the middle") {
    auto msg = error_of(replace(kGood, "  - kind: upload", "  - kind: decode\n    name: second"));
    REQUIRE_THAT(msg, Contains("stage 'second' (decode)") && Contains("is a source but position 2"));
  }
  SECTION("odd size for nv12") {
    auto msg = error_of(replace(replace(kGood, "height: 48", "height: 47"), "pattern: noise", "format: nv12"));
    REQUIRE_THAT(msg, Contains("p.yaml:5:5") && Contains("nv12 needs an even width and height"));
  }
  SECTION("duplicate stage names") {
    auto msg = error_of(replace(kGood, "  - kind: upload", "  - kind: upload\n    name: decode"));
    REQUIRE_THAT(msg, Contains("stage name 'decode' is used twice"));
  }
  SECTION("missing stages") {
    REQUIRE_THAT(error_of("name: x\n"), Contains("p.yaml:1:1") && Contains("missing 'stages'"));
  }
  SECTION("YAML syntax") {
    REQUIRE_THAT(error_of("stages: [\n  - kind: x\n"), Contains("p.yaml:") && Contains("YAML syntax error"));
  }
  SECTION("unknown top-level key") {
    auto msg = error_of(replace(kGood, "batch_size: 4", "batchsize: 4"));
    REQUIRE_THAT(msg, Contains("p.yaml:3:12") && Contains("unknown top-level key 'batchsize'"));
  }
  SECTION("jsonl without a path") {
    auto msg = error_of(replace(kGood, "type: null", "type: jsonl"));
    REQUIRE_THAT(msg, Contains("stage 'sink' (sink)") && Contains("needs a 'path'"));
  }
  SECTION("missing file") {
    REQUIRE_THROWS_WITH(load_pipeline("/nonexistent/x.yaml"), Contains("/nonexistent/x.yaml: cannot open"));
  }
}

TEST_CASE("every shipped pipeline validates", "[config]") {
  for (const char* name : {"default", "camera-leaky", "throughput-1080p", "bench-1080p-bgr8", "bench-1080p-nv12"}) {
    const std::string path = std::string(SLUICE_SOURCE_DIR) + "/config/pipelines/" + name + ".yaml";
    INFO(path);
    auto spec = load_pipeline(path);
    spec.device = DeviceChoice::cpu;  // the bench pipelines ask for cuda; their chain must hold on the CPU too
    REQUIRE_NOTHROW(plan_pipeline(spec));
  }
  // Its model is exported on the GPU host (bench/README.md), not shipped: the plan names the missing file.
  auto spec = load_pipeline(std::string(SLUICE_SOURCE_DIR) + "/config/pipelines/bench-1080p-resnet50.yaml");
  spec.device = DeviceChoice::cpu;
  REQUIRE_THROWS_WITH(plan_pipeline(spec), Contains("bench-1080p-resnet50.yaml:") && Contains("stage 'infer'") &&
                                               Contains("bench/models/resnet50.onnx"));
}
