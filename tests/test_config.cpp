#include <catch2/catch.hpp>

#include "config/pipeline_spec.hpp"
#include "config/plan.hpp"
#include "runtime/bounded_file.hpp"
#include "runtime/errors.hpp"
#include "runtime/params.hpp"
#include "runtime/stage.hpp"
#include "tests/temp_dir.hpp"

#include <sys/stat.h>

#include <fstream>
#include <stdexcept>

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
  // Their models are made on the GPU host (bench/README.md), not shipped: the plan names the missing file.
  for (const auto& [name, model] : {std::pair{"bench-1080p-resnet50", "resnet50.onnx"},
                                    std::pair{"bench-1080p-yolov8s", "yolov8s-like.onnx"}}) {
    auto spec = load_pipeline(std::string(SLUICE_SOURCE_DIR) + "/config/pipelines/" + name + ".yaml");
    spec.device = DeviceChoice::cpu;
    REQUIRE_THROWS_WITH(plan_pipeline(spec), Contains(std::string(name) + ".yaml:") && Contains("stage 'infer'") &&
                                                 Contains(std::string("bench/models/") + model));
  }
}

// Regression: `check` accepted pools of 806 TB and `run` then died in a bare std::bad_alloc. Pools are sized with
// checked arithmetic and refused when they exceed this machine's memory, naming the stage, the size and the limit.
TEST_CASE("plan refuses pools larger than this machine's memory, naming the pool and the limit", "[config]") {
  const std::string huge = replace(replace(replace(kGood, "width: 64", "width: 8192"), "height: 48", "height: 8192"),
                                   "batch_size: 4", "batch_size: 4096");
  const std::string msg = error_of(huge);
  CHECK_THAT(msg, Contains("p.yaml:5:5: stage 'decode' (decode): its pool of"));
  CHECK_THAT(msg, Contains("frames bgr8 8192x8192 x4096"));
  CHECK_THAT(msg, Contains("more than the") && Contains("this machine has"));
  CHECK(error_of(kGood) == "(no error)");
}

// Regression: /dev/zero as a pipeline read gigabytes and died in std::bad_alloc with a misleading message.
TEST_CASE("pipeline files are read bounded and must be regular files", "[config]") {
  sluice::test::TempDir dir;
  CHECK_THROWS_WITH(load_pipeline("/dev/zero"), Contains("/dev/zero: pipeline file is a character device, not a regular file"));
  CHECK_THROWS_WITH(load_pipeline(dir.str()), Contains("pipeline file is a directory"));
  const std::string fifo = dir.str() + "/fifo.yaml";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(load_pipeline(fifo), Contains("pipeline file is a FIFO"));
  const std::string big = dir.str() + "/big.yaml";
  {
    std::ofstream out(big);
    out << kGood << std::string(kMaxPipelineFileBytes, '#');
  }
  CHECK_THROWS_WITH(load_pipeline(big), Contains("over the limit of 1.0 MiB"));
}

// Regression: /dev/zero as the infer stage's labels file read gigabytes; labels are read bounded too.
TEST_CASE("labels files are read bounded and must be regular files", "[config]") {
  sluice::test::TempDir dir;
  const std::string model = std::string(SLUICE_SOURCE_DIR) + "/models/testsrc-classifier.onnx";
  auto with_labels = [&](const std::string& labels) {
    return "device: cpu\nstages:\n  - kind: decode\n    pattern: shapes\n    width: 64\n    height: 64\n"
           "  - kind: preprocess\n    width: 64\n    height: 64\n    order: rgb\n    layout: nchw\n    dtype: f32\n"
           "  - kind: infer\n    model: " + model + "\n    labels: " + labels + "\n    output: classes\n"
           "  - kind: sink\n    type: null\n";
  };
  CHECK(error_of(with_labels(std::string(SLUICE_SOURCE_DIR) + "/models/testsrc-classifier.labels")) == "(no error)");
  CHECK_THAT(error_of(with_labels("/dev/zero")), Contains("/dev/zero: labels file is a character device"));
  CHECK_THAT(error_of(with_labels(dir.str())), Contains("labels file is a directory"));
}

// Regression (found by fuzz/pipeline_fuzz): yaml-cpp recursed once per nesting level without a limit, so
// "[[[[..." 100 000 deep overflowed the stack (SIGSEGV) in `sluiced check`.
TEST_CASE("deeply nested YAML is refused before yaml-cpp recurses into it", "[config]") {
  CHECK_THAT(error_of("stages: " + std::string(100000, '[') + std::string(100000, ']')),
             Contains("p.yaml:1:109: nested deeper than 100 levels"));
  CHECK_THAT(error_of("stages: " + std::string(100000, '{')), Contains("nested deeper than 100 levels"));
  std::string dashes = "stages:\n";
  for (int i = 0; i < 50000; ++i) dashes += "- ";
  CHECK_THAT(error_of(dashes + "x\n"), Contains("p.yaml:2:100001: nested deeper than 1000 columns"));
  // Brackets inside quoted scalars and comments do not count; a normal pipeline passes.
  CHECK(error_of(replace(kGood, "name: t", "name: '" + std::string(500, '[') + "' # " + std::string(500, '{'))) ==
        "(no error)");
}

// Batches in device memory need a GPU pipeline; the stage says so, with its place in the file.
TEST_CASE("frame_memory: device is refused on a CPU pipeline", "[config]") {
  const std::string yaml = "device: cpu\nstages:\n  - kind: decode\n    uri: [testsrc:bars]\n    frame_memory: device\n"
                           "  - kind: sink\n    type: \"null\"\n";
  CHECK_THROWS_WITH(plan_pipeline(parse_pipeline(yaml, "p.yaml")),
                    Contains("p.yaml:") && Contains("'frame_memory: device' needs a pipeline on the GPU"));
  const std::string pinned = replace(yaml, "frame_memory: device", "frame_memory: pinned");
  const auto plan = plan_pipeline(parse_pipeline(pinned, "p.yaml"));  // on the CPU: host memory whatever it says
  CHECK(plan.stages.front().output.memory == MemoryKind::host);
}

TEST_CASE("a choice parameter maps back through the table its choices came from", "[config][params]") {
  enum class Shade { light, dark };
  static constexpr Choice<Shade> kShades[] = {{"light", Shade::light}, {"dark", Shade::dark}};
  const ParamSpec spec{"shade", ParamType::choice, "light", "doc", {}, {}, choice_names(kShades)};
  CHECK(spec.choices == std::vector<std::string>{"light", "dark"});
  std::string error;
  ParamValues values;
  values.set("shade", *parse_param(spec, "dark", error), true);
  CHECK(values.choice("shade", kShades) == Shade::dark);
  CHECK_FALSE(parse_param(spec, "grey", error));
}

TEST_CASE("a stage kind of the media library, in a process without it, says what is missing", "[config]") {
  // This test executable does not link the media library's OpenCV part: its kinds are declared, not registered.
  const std::string yaml = "stages:\n  - kind: decode\n  - kind: annotate\n    path: out\n";
  CHECK_THROWS_WITH(parse_pipeline(yaml, "p.yaml"),
                    Contains("p.yaml:3:11") && Contains("stage kind 'annotate' needs the media library"));
}

TEST_CASE("the stage registry lists sources, transforms, then sinks, each by kind, and refuses a kind twice",
          "[config]") {
  const auto stage = [](std::string kind, StageRole role) {
    StageInfo info;
    info.kind = std::move(kind);
    info.role = role;
    return info;
  };
  StageRegistry registry;
  registry.add(stage("sink", StageRole::sink));
  registry.add(stage("upload", StageRole::transform));
  registry.add(stage("annotate", StageRole::sink));
  registry.add(stage("decode", StageRole::source));
  registry.add(stage("infer", StageRole::transform));
  CHECK(registry.kinds() == "decode, infer, upload, annotate, sink");
  CHECK_THROWS_AS(registry.add(stage("infer", StageRole::sink)), std::logic_error);
}
