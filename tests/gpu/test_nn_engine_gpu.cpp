// CudaEngine as a whole: bindings in other formats, partial batches, graph replay without allocation or
// synchronisation, the algorithm cache file, and models against PyTorch's outputs.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "kernels/half.hpp"
#include "nn/npy.hpp"
#include "nn/onnx_loader.hpp"
#include "nn/passes.hpp"
#include "nn_gpu_support.hpp"
#include "runtime/gpu.hpp"

using namespace sluice;
using namespace sluice::nn;
using namespace sluice::nn::test;

namespace {

// conv(relu) -> conv(+residual, relu) -> global average pool -> reshape -> gemm -> softmax: a small ResNet tail.
Graph small_net(std::int64_t batch) {
  Graph g;
  g.source = "test:small_net";
  g.opset = 17;
  auto constant = [&](const std::string& name, const Shape& s, std::uint32_t seed) {
    Tensor t;
    t.shape = s;
    t.f32 = random_values(static_cast<std::size_t>(element_count(s)), seed, -0.3f, 0.3f);
    g.constants[name] = t;
  };
  g.inputs.push_back({"image", {batch, 3, 16, 16}, ElementType::f32});
  g.shapes["image"] = {batch, 3, 16, 16};
  constant("w1", {16, 3, 3, 3}, 1);
  constant("b1", {16}, 2);
  constant("w2", {16, 16, 3, 3}, 3);
  constant("b2", {16}, 4);
  constant("fc_w", {10, 16}, 5);
  constant("fc_b", {10}, 6);
  auto ints = [](std::vector<std::int64_t> v) { return AttrValue(v); };
  Node c1{"conv1", Op::Conv, {"image", "w1", "b1", ""}, {"a"}, {}};
  c1.attrs.values = {{"strides", ints({1, 1})}, {"pads", ints({1, 1, 1, 1})}, {"dilations", ints({1, 1})},
                     {"group", std::int64_t{1}}, {"activation", std::string("Relu")}};
  Node c2{"conv2", Op::Conv, {"a", "w2", "b2", "a"}, {"b"}, {}};
  c2.attrs = c1.attrs;
  Node gap{"gap", Op::GlobalAveragePool, {"b"}, {"p"}, {}};
  Node flat{"flatten", Op::Reshape, {"p"}, {"f"}, {}};
  flat.attrs.values["shape"] = ints({batch, 16});
  Node fc{"fc", Op::Gemm, {"f", "fc_w", "fc_b"}, {"logits"}, {}};
  fc.attrs.values = {{"transB", std::int64_t{1}}};
  Node sm{"softmax", Op::Softmax, {"logits"}, {"probs"}, {}};
  sm.attrs.values = {{"axis", std::int64_t{1}}};
  g.nodes = {c1, c2, gap, flat, fc, sm};
  g.shapes["a"] = g.shapes["b"] = {batch, 16, 16, 16};
  g.shapes["p"] = {batch, 16, 1, 1};
  g.shapes["f"] = {batch, 16};
  g.shapes["logits"] = g.shapes["probs"] = {batch, 10};
  g.outputs.push_back({"probs", {batch, 10}, ElementType::f32});
  return g;
}

std::vector<std::uint16_t> to_half_nhwc(const std::vector<float>& nchw, const Shape& s) {
  std::vector<std::uint16_t> out(nchw.size());
  const std::int64_t c = s[1], h = s[2], w = s[3];
  for (std::int64_t n = 0; n < s[0]; ++n)
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t y = 0; y < h; ++y)
        for (std::int64_t x = 0; x < w; ++x)
          out[static_cast<std::size_t>(((n * h + y) * w + x) * c + ch)] =
              kernels::float_to_half_bits(nchw[static_cast<std::size_t>(((n * c + ch) * h + y) * w + x)]);
  return out;
}

}  // namespace

TEST_CASE("CUDA engine runs a small net like the CPU", "[nn][nn_cuda][engine]") {
  const Graph g = small_net(4);
  const auto inputs = random_inputs(g, 3);
  const auto want = run_cpu(g, inputs);
  for (Precision p : {Precision::f32, Precision::f16, Precision::bf16}) {
    for (bool graph : {true, false}) {
      CudaEngineOptions o;
      o.precision = p;
      o.cuda_graph = graph;
      CudaEngine engine(g, o);
      INFO(to_string(p) << (graph ? " with" : " without") << " CUDA graph\n" << engine.describe());
      for (int run = 0; run < 3; ++run)  // eager first run, then capture, then replay
        CHECK(relative_error(run_gpu(engine, inputs)[0], want[0]) <= tolerance(p));
    }
  }
}

// x -> Relu r -> Reshape s -> Reshape t -> Mul(t, t) m;  Add(r, Reshape(m)) y: two Reshapes in a chain share
// r's memory, r is read again after them, and the reshaped product flows back: if the alias let the memory plan
// hand r's block to another value too early, y would differ from the CPU's.
Graph reshape_chain(std::int64_t batch) {
  Graph g;
  g.source = "test:reshape_chain";
  g.opset = 17;
  g.inputs.push_back({"x", {batch, 6, 16}, ElementType::f32});
  auto shape_attr = [](std::vector<std::int64_t> v) { return AttrValue(v); };
  Node relu{"relu", Op::Relu, {"x"}, {"r"}, {}};
  Node s1{"to_4d", Op::Reshape, {"r"}, {"s"}, {}};
  s1.attrs.values["shape"] = shape_attr({batch, 6, 2, 8});
  Node s2{"to_2d", Op::Reshape, {"s"}, {"t"}, {}};
  s2.attrs.values["shape"] = shape_attr({batch, 96});
  Node mul{"square", Op::Mul, {"t", "t"}, {"m"}, {}};
  Node back{"back", Op::Reshape, {"m"}, {"m3"}, {}};
  back.attrs.values["shape"] = shape_attr({batch, 6, 16});
  Node add{"add", Op::Add, {"r", "m3"}, {"y"}, {}};
  g.nodes = {relu, s1, s2, mul, back, add};
  g.shapes["x"] = g.shapes["r"] = g.shapes["m3"] = g.shapes["y"] = {batch, 6, 16};
  g.shapes["s"] = {batch, 6, 2, 8};
  g.shapes["t"] = g.shapes["m"] = {batch, 96};
  g.outputs.push_back({"y", {batch, 6, 16}, ElementType::f32});
  return g;
}

TEST_CASE("CUDA engine runs Reshape without copying and keeps the reshaped values intact", "[nn][nn_cuda][engine]") {
  const Graph g = reshape_chain(4);
  const auto inputs = random_inputs(g, 11);
  const auto want = run_cpu(g, inputs);
  for (Precision p : {Precision::f32, Precision::f16}) {
    CudaEngineOptions o;
    o.precision = p;
    CudaEngine engine(g, o);
    INFO(to_string(p) << "\n" << engine.describe());
    CHECK(engine.describe().find("shares its input's memory") != std::string::npos);
    for (int run = 0; run < 3; ++run) CHECK(relative_error(run_gpu(engine, inputs)[0], want[0]) <= tolerance(p));
    // A partial batch of 3: the aliases hold the first 3 items in place as well.
    const auto part = run_gpu(engine, inputs, 3);
    const std::vector<float> want3(want[0].begin(), want[0].begin() + 3 * 96);
    CHECK(relative_error(part[0], want3) <= tolerance(p));
  }
}

// GELU spelled out in five nodes (as PyTorch exports it) after a LayerNormalization, as loaded: prepare() fuses
// it into one Gelu node, which must compute what the CPU does.
Graph spelled_gelu(std::int64_t tokens, std::int64_t width) {
  Graph g;
  g.source = "test:spelled_gelu";
  g.opset = 17;
  g.inputs.push_back({"x", {-1, tokens, width}, ElementType::f32});
  g.outputs.push_back({"y", {-1, tokens, width}, ElementType::f32});
  auto scalar = [&](const std::string& name, float v) {
    Tensor t;
    t.f32 = {v};
    g.constants[name] = t;
  };
  scalar("sqrt2", 1.41421356f);
  scalar("one", 1.f);
  scalar("half", 0.5f);
  Tensor scale, bias;
  scale.shape = bias.shape = {width};
  scale.f32 = random_values(static_cast<std::size_t>(width), 5, 0.5f, 1.5f);
  bias.f32 = random_values(static_cast<std::size_t>(width), 6);
  g.constants["scale"] = scale;
  g.constants["bias"] = bias;
  Node norm{"norm", Op::LayerNormalization, {"x", "scale", "bias"}, {"n"}, {}};
  norm.attrs.values["axis"] = std::int64_t{-1};
  g.nodes = {norm,
             Node{"div", Op::Div, {"n", "sqrt2"}, {"s"}, {}},
             Node{"erf", Op::Erf, {"s"}, {"e"}, {}},
             Node{"plus_one", Op::Add, {"e", "one"}, {"a"}, {}},
             Node{"times_x", Op::Mul, {"n", "a"}, {"xa"}, {}},
             Node{"half", Op::Mul, {"xa", "half"}, {"y"}, {}}};
  return g;
}

TEST_CASE("CUDA engine runs the fused Gelu like the CPU", "[nn][nn_cuda][engine]") {
  for (const auto& [tokens, width] : std::vector<std::pair<std::int64_t, std::int64_t>>{{5, 16}, {197, 768}}) {
    const Graph g = prepare(spelled_gelu(tokens, width), 2);
    REQUIRE(std::count_if(g.nodes.begin(), g.nodes.end(), [](const Node& n) { return n.op == Op::Gelu; }) == 1);
    const auto inputs = random_inputs(g, 21);
    const auto want = run_cpu(g, inputs);
    for (Precision p : {Precision::f32, Precision::f16}) {
      CudaEngineOptions o;
      o.precision = p;
      CudaEngine engine(g, o);
      INFO(tokens << "x" << width << " " << to_string(p) << "\n" << engine.describe());
      CHECK(relative_error(run_gpu(engine, inputs)[0], want[0]) <= tolerance(p));
    }
  }
}

TEST_CASE("CUDA engine takes an f16 NHWC input and runs partial batches", "[nn][nn_cuda][engine]") {
  const Graph g = small_net(4);
  const auto inputs = random_inputs(g, 5);
  const auto want = run_cpu(g, inputs);
  CudaEngineOptions o;
  o.precision = Precision::f16;
  CudaEngine engine(g, o);
  const auto half = to_half_nhwc(inputs[0], g.inputs[0].shape);
  DeviceBuffer in(half.size() * 2), out(40 * sizeof(float));
  sluice::test::copy_to_device(in.get(), half.data(), half.size() * 2);
  TestStream stream;
  for (int count : {4, 3, 1, 4, 3, 1}) {
    CUDA_CHECK(cudaMemset(out.get(), 0, 40 * sizeof(float)));
    engine.enqueue({{in.get(), DType::f16, Layout::nhwc}}, {{out.get(), DType::f32, Layout::nchw}}, count,
                   stream.get());
    CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    std::vector<float> got(40);
    CUDA_CHECK(cudaMemcpy(got.data(), out.get(), got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    const std::vector<float> first(want[0].begin(), want[0].begin() + count * 10);
    INFO("count " << count);
    CHECK(relative_error(std::vector<float>(got.begin(), got.begin() + count * 10), first) <= 1e-2);
    for (int i = count * 10; i < 40; ++i) CHECK(got[static_cast<std::size_t>(i)] == 0.f);  // untouched
  }
}

TEST_CASE("CUDA engine replays without allocating or synchronising", "[nn][nn_cuda][engine]") {
  const Graph g = small_net(8);
  CudaEngine engine(g, CudaEngineOptions{});
  DeviceBuffer in(8 * 3 * 16 * 16 * 2), out(8 * 10 * 4);
  CUDA_CHECK(cudaMemset(in.get(), 0, 8 * 3 * 16 * 16 * 2));
  TestStream stream;
  const std::vector<TensorBinding> ins{{in.get(), DType::f16, Layout::nhwc}}, outs{{out.get(), DType::f32, Layout::nchw}};
  for (int i = 0; i < 3; ++i) engine.enqueue(ins, outs, 8, stream.get());  // eager, capture, replay
  CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  const gpu::CallCounts before = gpu::call_counts();
  for (int i = 0; i < 50; ++i) engine.enqueue(ins, outs, 8, stream.get());
  const gpu::CallCounts after = gpu::call_counts();
  CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  CHECK(after.device_allocs == before.device_allocs);
  CHECK(after.device_frees == before.device_frees);
  CHECK(after.pinned_allocs == before.pinned_allocs);
  CHECK(after.stream_syncs == before.stream_syncs);
  CHECK(after.event_syncs == before.event_syncs);
  CHECK(after.async_copies == before.async_copies);
  CHECK(engine.describe().find("CUDA graph: on") != std::string::npos);
}

// warm_up() makes every count's graph ahead; later runs capture nothing, whichever buffers they bind (a pool's),
// and each buffer's own contents are what is computed (a graph that kept the first buffer's address would not).
TEST_CASE("CUDA engine warmed up runs one graph per count for every buffer", "[nn][nn_cuda][engine]") {
  const Graph g = small_net(4);
  CudaEngine engine(g, CudaEngineOptions{});
  REQUIRE(engine.run_counts() == std::vector<int>{1, 2, 3, 4});
  CHECK_THROWS_AS(engine.warm_up({0}), ModelError);
  CHECK_THROWS_AS(engine.warm_up({5}), ModelError);
  engine.warm_up(engine.run_counts());
  INFO(engine.describe());
  REQUIRE(engine.describe().find("CUDA graph: on (4 captured") != std::string::npos);

  constexpr int kBuffers = 3;
  std::vector<std::vector<float>> inputs, want;
  std::vector<std::unique_ptr<sluice::test::DeviceBuffer>> in, out;
  for (int b = 0; b < kBuffers; ++b) {
    inputs.push_back(random_inputs(g, 20 + static_cast<std::uint32_t>(b))[0]);
    want.push_back(run_cpu(g, {inputs.back()})[0]);
    in.push_back(std::make_unique<sluice::test::DeviceBuffer>(inputs.back().size() * sizeof(float)));
    sluice::test::copy_to_device(in.back()->get(), inputs.back().data(), inputs.back().size() * sizeof(float));
    out.push_back(std::make_unique<sluice::test::DeviceBuffer>(40 * sizeof(float)));
  }
  TestStream stream;
  const gpu::CallCounts before = gpu::call_counts();
  for (int count : {4, 3, 1, 2, 4, 1})
    for (int b = 0; b < kBuffers; ++b) {
      engine.enqueue({{in[static_cast<std::size_t>(b)]->get(), DType::f32, Layout::nchw}},
                     {{out[static_cast<std::size_t>(b)]->get(), DType::f32, Layout::nchw}}, count, stream.get());
      CUDA_CHECK(cudaStreamSynchronize(stream.get()));
      std::vector<float> got(static_cast<std::size_t>(count) * 10);
      CUDA_CHECK(cudaMemcpy(got.data(), out[static_cast<std::size_t>(b)]->get(), got.size() * sizeof(float),
                            cudaMemcpyDeviceToHost));
      INFO("count " << count << ", buffer " << b);
      const auto& w = want[static_cast<std::size_t>(b)];
      CHECK(relative_error(got, std::vector<float>(w.begin(), w.begin() + count * 10)) <= tolerance(Precision::f16));
    }
  const gpu::CallCounts after = gpu::call_counts();
  CHECK(after.device_allocs == before.device_allocs);
  CHECK(engine.describe().find("CUDA graph: on (4 captured") != std::string::npos);
}

// Another thread that synchronises the device (NVDEC sessions opening, memory freed) can invalidate a capture in
// progress. The run whose capture failed still gives the right result, and graphs come back once it stops.
TEST_CASE("CUDA engine survives captures invalidated by another thread", "[nn][nn_cuda][engine]") {
  const Graph g = small_net(4);
  const auto inputs = random_inputs(g, 7);
  const auto want = run_cpu(g, inputs);
  CudaEngine engine(g, CudaEngineOptions{});
  std::atomic<bool> stop{false};
  std::thread interferer([&] {
    while (!stop.load()) {
      void* p = nullptr;
      if (cudaMalloc(&p, 1 << 20) == cudaSuccess) cudaFree(p);
      cudaDeviceSynchronize();
      cudaGetLastError();  // an illegal call during a capture fails here: not this test's concern
    }
  });
  for (int run = 0; run < 60; ++run) {
    INFO("run " << run << " with the interferer");
    REQUIRE(relative_error(run_gpu(engine, inputs)[0], want[0]) <= tolerance(CudaEngineOptions{}.precision));
  }
  stop = true;
  interferer.join();
  for (int run = 0; run < 80; ++run) {
    INFO("run " << run << " after it");
    REQUIRE(relative_error(run_gpu(engine, inputs)[0], want[0]) <= tolerance(CudaEngineOptions{}.precision));
  }
  INFO(engine.describe());
  CHECK(engine.describe().find("CUDA graph: on") != std::string::npos);
}

// The file itself is tested without a GPU (tests/nn/test_algo_cache.cpp); here an engine writes it, another reads it.
TEST_CASE("A second engine reads the algorithm cache and measures nothing", "[nn][nn_cuda][engine]") {
  const std::string path = (std::filesystem::temp_directory_path() / "sluice_algo_cache_test.txt").string();
  std::filesystem::remove(path);
  const Graph g = small_net(2);
  CudaEngineOptions o;
  o.algo_cache = path;
  const auto inputs = random_inputs(g, 9);
  std::vector<float> first;
  {
    CudaEngine engine(g, o);
    CHECK(engine.describe().find("2 measured, 0 from the cache") != std::string::npos);
    first = run_gpu(engine, inputs)[0];
  }
  REQUIRE(std::filesystem::exists(path));
  CudaEngine again(g, o);
  CHECK(again.describe().find("0 measured, 2 from the cache") != std::string::npos);
  CHECK(relative_error(run_gpu(again, inputs)[0], first) <= 1e-2);
  std::filesystem::remove(path);
}

TEST_CASE("CUDA engine matches PyTorch on the reference models", "[nn][nn_cuda][models]") {
  const char* dir = std::getenv("SLUICE_NN_REFERENCE_DIR");
  if (!dir) {
    WARN("SLUICE_NN_REFERENCE_DIR is not set: no reference models compared");
    return;
  }
  int compared = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".onnx") continue;
    const std::string base = (entry.path().parent_path() / entry.path().stem()).string();
    if (!std::filesystem::exists(base + ".input.npy") || !std::filesystem::exists(base + ".output.npy")) continue;
    const NpyArray input = read_npy(base + ".input.npy");
    const NpyArray output = read_npy(base + ".output.npy");
    const Graph prepared = prepare(load_onnx(entry.path().string()), input.shape[0]);
    for (Precision p : {Precision::f32, Precision::f16}) {
      CudaEngineOptions o;
      o.precision = p;
      CudaEngine engine(prepared, o);
      const auto got = run_gpu(engine, {input.data});
      INFO(entry.path().filename().string() << " at " << to_string(p));
      // The bounds: f32 (no TF32) 1e-3, f16 1e-2, relative to the output's scale.
      CHECK(relative_error(got[0], output.data) <= (p == Precision::f32 ? 1e-3 : 1e-2));
    }
    // Every intermediate value against the CPU backend at f32: names the first layer that goes wrong.
    Graph all = prepared;
    all.outputs.clear();
    for (const auto& node : all.nodes)
      for (const auto& out : node.outputs) all.outputs.push_back({out, all.shapes.at(out), ElementType::f32});
    const auto want = run_cpu(all, {input.data});
    CudaEngineOptions o;
    o.precision = Precision::f32;
    CudaEngine engine(all, o);
    const auto got = run_gpu(engine, {input.data});
    for (std::size_t i = 0; i < want.size(); ++i) {
      const double err = relative_error(got[i], want[i]);
      if (err <= 1e-3) continue;
      const Node* producer = nullptr;
      for (const auto& node : all.nodes)
        for (const auto& out : node.outputs)
          if (out == all.outputs[i].name) producer = &node;
      FAIL_CHECK(entry.path().filename().string() << ": first value off at f32: '" << all.outputs[i].name << "' of "
                 << (producer ? producer->where() : std::string("?")) << ", relative error " << err);
      break;
    }
    ++compared;
  }
  CHECK(compared > 0);
}
