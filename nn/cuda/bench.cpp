// sluice_nn_cuda_bench: CudaEngine throughput and latency on one ONNX model, timed like bench/torch_infer.py
// (device-resident input, CUDA events): img/s median and min-max over --repeats runs of --iters enqueues at
// --batch; batch-1 latency median and p90 over --latency-iters runs each timed alone; then describe() and the
// slowest layers from profile_layers().
//
//   sluice_nn_cuda_bench MODEL.onnx [--batch 256] [--precision f16|bf16|f32] [--iters 50] [--repeats 5]
//                        [--latency-iters 200] [--algo-cache FILE] [--no-graph] [--profile N]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "nn/cuda/engine.hpp"
#include "nn/onnx_loader.hpp"
#include "nn/passes.hpp"
#include "runtime/cuda_check.hpp"

using namespace sluice;
using namespace sluice::nn;

namespace {

struct Args {
  std::string model, algo_cache;
  int batch = 256, iters = 50, repeats = 5, latency_iters = 200, profile = 15;
  Precision precision = Precision::f16;
  bool graph = true;
};

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

// Input f16/bf16/f32 NHWC as the preprocess stage makes it (f32 stays NCHW), output f32.
struct Bound {
  std::vector<void*> memory;
  std::vector<TensorBinding> in, out;
  Bound(const Graph& g, DType type) {
    for (const auto& i : g.inputs) {
      void* p = nullptr;
      const std::size_t bytes = static_cast<std::size_t>(element_count(i.shape)) * dtype_bytes(type);
      CUDA_CHECK(cudaMalloc(&p, bytes));
      CUDA_CHECK(cudaMemset(p, 0, bytes));
      memory.push_back(p);
      in.push_back({p, type, Layout::nhwc});
    }
    for (const auto& o : g.outputs) {
      void* p = nullptr;
      CUDA_CHECK(cudaMalloc(&p, static_cast<std::size_t>(element_count(o.shape)) * sizeof(float)));
      memory.push_back(p);
      out.push_back({p, DType::f32, Layout::nchw});
    }
  }
  ~Bound() {
    for (void* p : memory) cudaFree(p);
  }
};

std::vector<double> time_runs(CudaEngine& engine, const Bound& b, int count, int runs, int per_run, cudaStream_t s) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> ms;
  for (int r = 0; r < runs; ++r) {
    CUDA_CHECK(cudaEventRecord(start, s));
    for (int i = 0; i < per_run; ++i) engine.enqueue(b.in, b.out, count, s);
    CUDA_CHECK(cudaEventRecord(stop, s));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(k + " needs a value");
      return argv[++i];
    };
    if (k == "--batch") a.batch = std::stoi(next());
    else if (k == "--iters") a.iters = std::stoi(next());
    else if (k == "--repeats") a.repeats = std::stoi(next());
    else if (k == "--latency-iters") a.latency_iters = std::stoi(next());
    else if (k == "--profile") a.profile = std::stoi(next());
    else if (k == "--algo-cache") a.algo_cache = next();
    else if (k == "--no-graph") a.graph = false;
    else if (k == "--precision") {
      const std::string p = next();
      a.precision = p == "f32" ? Precision::f32 : p == "bf16" ? Precision::bf16 : Precision::f16;
    } else if (a.model.empty() && k[0] != '-') a.model = k;
    else {
      std::fprintf(stderr, "usage: %s MODEL.onnx [--batch N] [--precision f16|bf16|f32] [--iters N] [--repeats N] "
                           "[--latency-iters N] [--algo-cache FILE] [--no-graph] [--profile N]\n", argv[0]);
      return 2;
    }
  }
  if (a.model.empty()) {
    std::fprintf(stderr, "%s: no model given\n", argv[0]);
    return 2;
  }
  const DType in_type = a.precision == Precision::f32 ? DType::f32 : a.precision == Precision::f16 ? DType::f16 : DType::bf16;
  const Graph model = load_onnx(a.model);
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CudaEngineOptions o;
  o.precision = a.precision;
  o.algo_cache = a.algo_cache;
  o.cuda_graph = a.graph;

  {
    CudaEngine engine(prepare(model, a.batch), o);
    Bound b(engine.graph(), in_type);
    time_runs(engine, b, a.batch, 1, 20, s);  // eager run, capture, warm clocks
    const auto ms = time_runs(engine, b, a.batch, a.repeats, a.iters, s);
    std::vector<double> rate;
    for (double t : ms) rate.push_back(a.batch * a.iters / (t / 1000.0));
    std::printf("throughput %s batch %d: %.0f img/s median (min %.0f, max %.0f) over %d runs of %d\n",
                std::string(to_string(a.precision)).c_str(), a.batch, percentile(rate, 0.5),
                *std::min_element(rate.begin(), rate.end()), *std::max_element(rate.begin(), rate.end()), a.repeats,
                a.iters);
    std::printf("%s", engine.describe().c_str());
    if (a.profile > 0) {
      auto layers = engine.profile_layers(10);
      double total = 0;
      for (const auto& [n, t] : layers) total += t;
      std::sort(layers.begin(), layers.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
      std::printf("profile (median of 10, layer by layer): sum %.3f ms\n", total);
      for (int i = 0; i < a.profile && i < static_cast<int>(layers.size()); ++i)
        std::printf("  %8.3f ms  %s\n", layers[static_cast<std::size_t>(i)].second,
                    layers[static_cast<std::size_t>(i)].first.c_str());
    }
  }
  {
    CudaEngine engine(prepare(model, 1), o);
    Bound b(engine.graph(), in_type);
    time_runs(engine, b, 1, 1, 20, s);
    const auto ms = time_runs(engine, b, 1, a.latency_iters, 1, s);
    std::printf("latency %s batch 1: %.3f ms median, p90 %.3f ms over %d runs\n",
                std::string(to_string(a.precision)).c_str(), percentile(ms, 0.5), percentile(ms, 0.9),
                a.latency_iters);
    if (a.profile > 0) {
      std::printf("%s", engine.describe().c_str());
      auto layers = engine.profile_layers(10);
      double total = 0;
      for (const auto& [n, t] : layers) total += t;
      std::sort(layers.begin(), layers.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
      std::printf("profile batch 1 (median of 10, layer by layer): sum %.3f ms\n", total);
      for (int i = 0; i < a.profile && i < static_cast<int>(layers.size()); ++i)
        std::printf("  %8.3f ms  %s\n", layers[static_cast<std::size_t>(i)].second,
                    layers[static_cast<std::size_t>(i)].first.c_str());
    }
  }
  cudaStreamDestroy(s);
  return 0;
}
