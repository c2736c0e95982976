// Whole models on the CPU backend against PyTorch's outputs: the files tests/nn/export_reference.py writes to
// SLUICE_BINARY_DIR/nn-reference (the CTest fixture nn_reference runs it first).
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "nn/cpu/engine.hpp"
#include "nn/npy.hpp"
#include "nn/onnx_loader.hpp"
#include "nn/passes.hpp"

namespace {

using namespace sluice::nn;

// max |a - b| / max |b|
double relative_error(const float* got, const float* want, std::size_t n) {
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return diff / scale;
}

// Runs `items` items of the reference input, starting at `first`, through the model prepared for that batch.
std::vector<float> run_cpu(const Graph& model, const NpyArray& input, std::int64_t first, std::int64_t items) {
  CpuEngine engine(prepare(model, items));
  REQUIRE(engine.graph().inputs.size() == 1);
  REQUIRE(engine.graph().outputs.size() == 1);
  const std::int64_t item_size = element_count(input.shape) / input.shape[0];
  std::vector<float> output(static_cast<std::size_t>(element_count(engine.graph().outputs[0].shape)));
  engine.run({input.data.data() + first * item_size}, {output.data()});
  return output;
}

void check_model(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(SLUICE_BINARY_DIR) / "nn-reference";
  const std::string onnx_path = (dir / (name + ".onnx")).string();
  INFO(onnx_path << " (written by the nn_reference test: /usr/bin/python3 tests/nn/export_reference.py " << dir.string() << ")");
  REQUIRE(std::filesystem::exists(onnx_path));
  const NpyArray input = read_npy((dir / (name + ".input.npy")).string());
  const NpyArray want = read_npy((dir / (name + ".output.npy")).string());
  const Graph model = load_onnx(onnx_path);
  const std::int64_t batch = input.shape[0];
  REQUIRE(batch >= 2);

  const std::vector<float> got = run_cpu(model, input, 0, batch);
  REQUIRE(got.size() == want.data.size());
  const double error = relative_error(got.data(), want.data.data(), got.size());
  INFO(name << " batch " << batch << ": relative error " << error);
  CHECK(error <= 1e-4);

  // The last item alone, through the model prepared for batch 1: the batch binding must not change results.
  const std::size_t item_out = want.data.size() / static_cast<std::size_t>(batch);
  const std::vector<float> single = run_cpu(model, input, batch - 1, 1);
  REQUIRE(single.size() == item_out);
  const double single_error = relative_error(single.data(), want.data.data() + (batch - 1) * item_out, item_out);
  INFO(name << " batch 1: relative error " << single_error);
  CHECK(single_error <= 1e-4);
}

TEST_CASE("CPU resnet18 matches PyTorch", "[cpu_models]") { check_model("resnet18"); }
TEST_CASE("CPU mobilenet_v2 matches PyTorch", "[cpu_models]") { check_model("mobilenet_v2"); }
TEST_CASE("CPU mixnet matches PyTorch", "[cpu_models]") { check_model("mixnet"); }
TEST_CASE("CPU mixnet exported at opset 11 matches PyTorch", "[cpu_models]") { check_model("mixnet_op11"); }
TEST_CASE("CPU mixnet exported at opset 17 matches PyTorch", "[cpu_models]") { check_model("mixnet_op17"); }
TEST_CASE("CPU shufflenet_v2_x0_5 matches PyTorch", "[cpu_models]") { check_model("shufflenet_v2_x0_5"); }
TEST_CASE("CPU mnasnet0_5 matches PyTorch", "[cpu_models]") { check_model("mnasnet0_5"); }
TEST_CASE("CPU mathnet (math ops, reductions, LayerNormalization) matches PyTorch", "[cpu_models]") { check_model("mathnet"); }
TEST_CASE("CPU mathnet exported at opset 13 matches PyTorch", "[cpu_models]") { check_model("mathnet_op13"); }
TEST_CASE("CPU ranknet (InstanceNorm, GroupNorm, pixel shuffles, Tile, LogSoftmax, ArgMax, TopK) matches PyTorch",
          "[cpu_models]") {
  check_model("ranknet");
}
TEST_CASE("CPU ranknet exported at opset 11 matches PyTorch", "[cpu_models]") { check_model("ranknet_op11"); }
TEST_CASE("CPU small ConvNeXt matches PyTorch", "[cpu_models]") { check_model("convnext_small"); }
TEST_CASE("CPU small ConvNeXt exported at opset 13 matches PyTorch", "[cpu_models]") { check_model("convnext_small_op13"); }
TEST_CASE("CPU small Vision Transformer matches PyTorch", "[cpu_models]") { check_model("vit_small"); }
TEST_CASE("CPU small Swin Transformer matches PyTorch", "[cpu_models]") { check_model("swin_small"); }
TEST_CASE("CPU small decoder (ConvTranspose) matches PyTorch", "[cpu_models]") { check_model("decoder_small"); }
TEST_CASE("CPU mixnet in opset 18's spellings (Pad axes, Resize axes) matches PyTorch", "[cpu_models]") {
  check_model("mixnet_op18");
}
TEST_CASE("CPU mathnet in opset 18's spellings (Reduce* axes inputs) matches PyTorch", "[cpu_models]") {
  check_model("mathnet_op18");
}
TEST_CASE("CPU GroupNormalization at opset 18 (per-group scale, bias) matches NumPy", "[cpu_models]") {
  check_model("groupnorm_op18");
}
TEST_CASE("CPU GroupNormalization at opset 21 (per-channel scale, bias) matches NumPy", "[cpu_models]") {
  check_model("groupnorm_op21");
}
TEST_CASE("CPU detrnet (Einsum, GridSample, TopK into GatherElements) matches PyTorch", "[cpu_models]") {
  check_model("detrnet");
}

}  // namespace
