#pragma once
// Helpers for the CUDA backend's tests: one-node prepared graphs built by hand, device buffers, and running a
// graph on CpuEngine (the oracle) and CudaEngine with f32 NCHW bindings.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "nn/cpu/engine.hpp"
#include "nn/cuda/engine.hpp"
#include "runtime/cuda_check.hpp"
#include "tests/gpu/device_memory.hpp"

namespace sluice::nn::test {

inline std::vector<float> random_values(std::size_t n, std::uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// A prepared one-node graph: inputs (non-constant), constants, one node, outputs with their shapes.
struct OneNode {
  Graph g;
  explicit OneNode(const std::string& op, const std::string& what = "") {
    g.source = "test:" + op + (what.empty() ? "" : " " + what);
    g.opset = 17;
    g.nodes.push_back(Node{op + "_0", op_from_name(op), {}, {}, {}});
  }
  Node& node() { return g.nodes.back(); }
  OneNode& input(const std::string& name, const Shape& shape) {
    g.inputs.push_back({name, shape, ElementType::f32});
    g.shapes[name] = shape;
    node().inputs.push_back(name);
    return *this;
  }
  OneNode& constant(const std::string& name, const Shape& shape, std::uint32_t seed) {
    Tensor t;
    t.shape = shape;
    t.f32 = random_values(static_cast<std::size_t>(element_count(shape)), seed);
    g.constants[name] = t;
    node().inputs.push_back(name);
    return *this;
  }
  OneNode& absent() {
    node().inputs.push_back("");
    return *this;
  }
  OneNode& output(const std::string& name, const Shape& shape) {
    g.outputs.push_back({name, shape, ElementType::f32});
    g.shapes[name] = shape;
    node().outputs.push_back(name);
    return *this;
  }
  template <typename T>
  OneNode& attr(const std::string& name, T value) {
    node().attrs.values[name] = value;
    return *this;
  }
};

using sluice::test::DeviceBuffer;
using sluice::test::TestStream;

inline std::vector<std::vector<float>> random_inputs(const Graph& g, std::uint32_t seed) {
  std::vector<std::vector<float>> in;
  for (const auto& i : g.inputs) in.push_back(random_values(static_cast<std::size_t>(element_count(i.shape)), seed++));
  return in;
}

inline std::vector<std::vector<float>> run_cpu(const Graph& g, const std::vector<std::vector<float>>& inputs) {
  CpuEngine engine(g);
  std::vector<std::vector<float>> out;
  std::vector<const float*> in_ptrs;
  std::vector<float*> out_ptrs;
  for (const auto& i : inputs) in_ptrs.push_back(i.data());
  for (const auto& o : g.outputs) out.emplace_back(static_cast<std::size_t>(element_count(o.shape)));
  for (auto& o : out) out_ptrs.push_back(o.data());
  engine.run(in_ptrs, out_ptrs);
  return out;
}

// Runs `count` items (default: the batch) with f32 NCHW bindings; the outputs hold `count` items.
inline std::vector<std::vector<float>> run_gpu(CudaEngine& engine, const std::vector<std::vector<float>>& inputs,
                                               int count = 0) {
  const Graph& g = engine.graph();
  const std::int64_t batch = g.inputs[0].shape[0];
  if (count == 0) count = static_cast<int>(batch);
  TestStream stream;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::vector<TensorBinding> in_b, out_b;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::size_t bytes = inputs[i].size() * sizeof(float);
    buffers.push_back(std::make_unique<DeviceBuffer>(bytes));
    sluice::test::copy_to_device(buffers.back()->get(), inputs[i].data(), bytes);
    in_b.push_back({buffers.back()->get(), DType::f32, Layout::nchw});
  }
  std::vector<std::vector<float>> out;
  for (const auto& o : g.outputs) {
    // Outputs whose dim 0 is the batch hold `count` items; others (rare) are whole.
    const bool batched = !o.shape.empty() && o.shape[0] == batch;
    out.emplace_back(static_cast<std::size_t>(batched ? element_count(o.shape) / batch * count : element_count(o.shape)));
    buffers.push_back(std::make_unique<DeviceBuffer>(out.back().size() * sizeof(float)));
    out_b.push_back({buffers.back()->get(), DType::f32, Layout::nchw});
  }
  engine.enqueue(in_b, out_b, count, stream.get());
  CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  for (std::size_t i = 0; i < out.size(); ++i)
    CUDA_CHECK(cudaMemcpy(out[i].data(), out_b[i].data, out[i].size() * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

// max |got - want| / max(max |want|, 1e-3): the error relative to the output's scale.
inline double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, scale = 1e-3;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) return INFINITY;
    diff = std::max(diff, static_cast<double>(std::fabs(got[i] - want[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
  }
  return diff / scale;
}

inline double tolerance(Precision p) { return p == Precision::f32 ? 1e-3 : p == Precision::f16 ? 1e-2 : 3e-2; }

}  // namespace sluice::nn::test
