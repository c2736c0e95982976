// The one-liner's options (daemon/pipeline_overrides.hpp) edit a parsed pipeline: which keys they set, which
// ones they put back to their defaults, and that every error names the option (tests/cli_test.sh runs them).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "daemon/pipeline_overrides.hpp"
#include "runtime/errors.hpp"
#include "runtime/utf8.hpp"
#include "tests/pipeline_helpers.hpp"
#include "tests/temp_dir.hpp"

using namespace sluice;
using Catch::Matchers::Contains;

namespace {

PipelineSpec default_pipeline() { return load_pipeline(test::source_dir() + "/config/pipelines/default.yaml"); }
std::string clip() { return test::source_dir() + "/tests/data/nvdec/h264_320x240.mp4"; }

std::string refusal(PipelineSpec& spec, const PipelineOverrides& o) {
  try {
    AppliedOverrides applied(spec, o);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("option --uri replaces the direct test pattern by managed sources", "[overrides]") {
  PipelineSpec spec = default_pipeline();
  REQUIRE(spec.stages.front().params.was_given("source"));
  PipelineOverrides o;
  o.uris = {clip(), "testsrc:bars"};
  AppliedOverrides applied(spec, o);
  const ParamValues& decode = spec.stages.front().params;
  CHECK(decode.strings("uri") == std::vector<std::string>{clip(), "testsrc:bars"});
  CHECK_FALSE(decode.was_given("source"));  // the decode stage refuses `source` beside `uri`
  CHECK(decode.string("source") == "testsrc");
  CHECK(decode.integer("width") == 1280);  // the rest of the stage is the file's
  CHECK(applied.plan(spec).stages.size() == spec.stages.size());
}

TEST_CASE("option --model takes the labels beside it, --labels wins, paths become absolute", "[overrides]") {
  test::TempDir dir;
  const std::string model = (dir.path / "m.onnx").string();
  std::filesystem::copy_file(test::source_dir() + "/models/testsrc-classifier.onnx", model);
  const auto infer_params = [](const PipelineSpec& s) -> const ParamValues& { return s.stages[3].params; };

  PipelineSpec spec = default_pipeline();
  PipelineOverrides o;
  o.model = model;
  (void)AppliedOverrides(spec, o);
  CHECK(infer_params(spec).string("model") == model);
  CHECK(infer_params(spec).string("labels").empty());  // the default's labels name another model's classes

  std::filesystem::copy_file(test::source_dir() + "/models/testsrc-classifier.labels", dir.path / "m.labels");
  spec = default_pipeline();
  (void)AppliedOverrides(spec, o);
  CHECK(infer_params(spec).string("labels") == (dir.path / "m.labels").string());

  spec = default_pipeline();
  o.labels = "relative.labels";
  o.top_k = "3";
  (void)AppliedOverrides(spec, o);
  CHECK(infer_params(spec).string("labels") == (std::filesystem::current_path() / "relative.labels").string());
  CHECK(infer_params(spec).integer("top_k") == 3);
}

TEST_CASE("option --output makes the sink one JSON-lines file, dropping the file's per-source keys", "[overrides]") {
  test::TempDir dir;
  std::string yaml = "device: cpu\nstages:\n  - kind: decode\n    frames: 4\n  - kind: sink\n    type: jsonl\n"
                     "    per: source\n    path: " + dir.path.string() + "\n    rotate_mb: 5\n";
  PipelineSpec spec = parse_pipeline(yaml, "p.yaml");
  PipelineOverrides o;
  o.output = (dir.path / "out.jsonl").string();
  o.batch_size = "2";
  AppliedOverrides applied(spec, o);
  const ParamValues& sink = spec.stages.back().params;
  CHECK(sink.string("type") == "jsonl");
  CHECK(sink.string("per") == "run");
  CHECK(sink.string("path") == (dir.path / "out.jsonl").string());
  CHECK_FALSE(sink.was_given("rotate_mb"));  // the sink refuses rotation for per: run
  CHECK(sink.number("rotate_mb") == 0);
  CHECK(spec.batch_size == 2);
  auto plan = applied.plan(spec);
  CHECK(test::run_to_end(std::move(plan)).delivered == 4);
  CHECK(test::read_jsonl((dir.path / "out.jsonl").string()).size() == 4);
}

TEST_CASE("every refused value names its option, shown as valid UTF-8", "[overrides]") {
  PipelineSpec spec = default_pipeline();
  PipelineOverrides o;
  o.top_k = "33";
  CHECK_THAT(refusal(spec, o), Contains("--top-k '33': 33 is out of range"));

  o = {};
  o.batch_size = "0";
  CHECK_THAT(refusal(spec, o), Contains("--batch-size '0'"));

  o = {};
  o.uris = {std::string("/nonexistent/\xff\x01.mp4")};
  const std::string why = refusal(spec, o);
  CHECK(valid_utf8(why));
  CHECK_THAT(why, Contains("--uri '/nonexistent/\xEF\xBF\xBD\\x01.mp4': No such file or directory"));

  o = {};
  o.output = "/nonexistent/out.jsonl";
  CHECK_THAT(refusal(spec, o), Contains("--output '/nonexistent/out.jsonl': its directory '/nonexistent'"));

  // A pipeline with a tee has a sink per branch: --output would pick one of them.
  PipelineSpec tee = load_pipeline(test::source_dir() + "/config/pipelines/tee.yaml");
  o = {};
  o.output = "out.jsonl";
  CHECK_THAT(refusal(tee, o), Contains("--output 'out.jsonl': the pipeline has a tee with 3 branches, each with its "
                                       "sink: set their paths in the file"));

  // The pipeline without an infer stage: --model has nothing to replace.
  PipelineSpec plain = parse_pipeline("stages:\n  - kind: decode\n  - kind: sink\n", "plain.yaml");
  o = {};
  o.model = "m.onnx";
  CHECK_THAT(refusal(plain, o), Contains("--model 'm.onnx': the pipeline (plain.yaml) has 0 infer stages"));

  // A raw tensor output has no classes for --top-k to count.
  PipelineSpec tensor = default_pipeline();
  tensor.stages[3].params.set("output", std::string("tensor"), true);
  o = {};
  o.top_k = "3";
  CHECK_THAT(refusal(tensor, o), Contains("--top-k '3': the infer stage 'infer' emits its raw tensor"));

  o.model = "m.onnx";
  CHECK_THROWS_WITH(o.take("--model", "other.onnx"), "--model is given twice");
  CHECK_FALSE(o.take("--state-dir", "x"));
}

TEST_CASE("an error building a stage an option changed names the option", "[overrides]") {
  PipelineSpec spec = default_pipeline();
  PipelineOverrides o;
  o.model = test::source_dir() + "/models/testsrc-classifier.labels";  // not a model
  AppliedOverrides applied(spec, o);
  try {
    applied.plan(spec);
    FAIL("a labels file was taken for a model");
  } catch (const ConfigError& e) {
    CHECK_THAT(std::string(e.what()), Contains("stage 'infer' (infer)") && Contains("not a valid ONNX model") &&
                             Contains("(set by --model '" + *o.model + "')"));
  }
}
