#include "daemon/model_tool.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <limits>
#include <random>
#include <stdexcept>

#include "kernels/half.hpp"
#include "nn/cpu/engine.hpp"
#include "nn/describe.hpp"
#include "nn/npy.hpp"
#include "nn/onnx_loader.hpp"
#include "nn/passes.hpp"
#include "runtime/bounded_file.hpp"
#include "runtime/gpu.hpp"
#include "runtime/gpu_handles.hpp"
#if SLUICE_WITH_CUDA
#include "nn/cuda/engine.hpp"
#endif

namespace sluice {
namespace {

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0, p90_ms = 0;
};

Timing summarise(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  const auto at = [&](double q) { return ms[static_cast<std::size_t>(q * static_cast<double>(ms.size() - 1) + 0.5)]; };
  return {at(0.5), ms.front(), ms.back(), at(0.9)};
}

// The inputs and outputs this tool holds in memory must fit in it (the engine checks its own working memory).
void check_io_fits_in_memory(const nn::Graph& g) {
  std::uint64_t floats = 0;
  for (const auto* values : {&g.inputs, &g.outputs})
    for (const auto& v : *values) floats += static_cast<std::uint64_t>(nn::element_count(g.shape_of(v.name)));
  const std::uint64_t bytes = floats * sizeof(float);  // each value has at most 2^36 elements (prepare)
  const std::uint64_t memory = host_memory_bytes();
  if (memory > 0 && bytes > memory)
    throw nn::ModelError(g.source + ": its inputs and outputs take " + describe_bytes(bytes) +
                         ", more than this machine's " + describe_bytes(memory));
}

std::vector<std::vector<float>> random_inputs(const nn::Graph& g) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<std::vector<float>> data;
  for (const auto& in : g.inputs) {
    std::vector<float> v(static_cast<std::size_t>(nn::element_count(g.shape_of(in.name))));
    for (float& x : v) x = normal(rng);
    data.push_back(std::move(v));
  }
  return data;
}

// The inputs the user gave (.npy), checked against the model; the batch comes from their first dimension.
std::vector<std::vector<float>> read_inputs(const ModelToolOptions& o, const nn::Graph& model, int& batch) {
  if (o.inputs.size() != model.inputs.size())
    throw std::invalid_argument("the model has " + std::to_string(model.inputs.size()) + " inputs but " +
                                std::to_string(o.inputs.size()) + " --input files were given");
  std::vector<std::vector<float>> data;
  for (std::size_t i = 0; i < o.inputs.size(); ++i) {
    nn::NpyArray a = nn::read_npy(o.inputs[i]);
    const nn::Shape& want = model.inputs[i].shape;
    bool fits = a.shape.size() == want.size() && !a.shape.empty();
    for (std::size_t d = 0; fits && d < want.size(); ++d) fits = want[d] < 0 || want[d] == a.shape[d];
    // Errors about the files' contents are model errors (one line), not usage errors (which print the usage).
    if (!fits)
      throw nn::ModelError(o.inputs[i] + ": shape " + nn::to_string(a.shape) + " does not fit input '" +
                           model.inputs[i].name + "': expected " + nn::to_string(want) + ", got " +
                           nn::to_string(a.shape));
    if (a.shape[0] < 1 || a.shape[0] > std::numeric_limits<int>::max())
      throw nn::ModelError(o.inputs[i] + ": batch (dimension 0) " + std::to_string(a.shape[0]) + " is not in [1, " +
                           std::to_string(std::numeric_limits<int>::max()) + "]");
    if (i == 0) batch = static_cast<int>(a.shape[0]);
    if (a.shape[0] != batch)
      throw nn::ModelError(o.inputs[i] + ": batch " + std::to_string(a.shape[0]) + " differs from the first input's " +
                           std::to_string(batch));
    data.push_back(std::move(a.data));
  }
  return data;
}

void write_outputs(const ModelToolOptions& o, const nn::Graph& g, const std::vector<std::vector<float>>& outputs) {
  for (std::size_t i = 0; i < o.outputs.size() && i < outputs.size(); ++i) {
    nn::write_npy(o.outputs[i], g.shape_of(g.outputs[i].name), outputs[i].data());
    std::printf("wrote %s: output '%s' %s\n", o.outputs[i].c_str(), g.outputs[i].name.c_str(),
                nn::to_string(g.shape_of(g.outputs[i].name)).c_str());
  }
}

std::vector<std::vector<float>> output_buffers(const nn::Graph& g) {
  std::vector<std::vector<float>> out;
  for (const auto& o : g.outputs) out.emplace_back(static_cast<std::size_t>(nn::element_count(g.shape_of(o.name))));
  return out;
}

template <typename T>
std::vector<T*> pointers(std::vector<std::vector<float>>& v) {
  std::vector<T*> p;
  for (auto& x : v) p.push_back(x.data());
  return p;
}

void report(const char* what, const Timing& t, int batch, nlohmann::json& json) {
  std::printf("%s: %.3f ms per batch of %d (median; min %.3f, p90 %.3f, max %.3f) = %.0f items/s\n", what,
              t.median_ms, batch, t.min_ms, t.p90_ms, t.max_ms, batch * 1000.0 / t.median_ms);
  json["median_ms"] = t.median_ms;
  json["min_ms"] = t.min_ms;
  json["p90_ms"] = t.p90_ms;
  json["max_ms"] = t.max_ms;
  json["items_per_s"] = batch * 1000.0 / t.median_ms;
}

void print_profile(const char* what, const std::vector<std::pair<std::string, double>>& layers, int iterations,
                   nlohmann::json& json) {
  std::printf("%s (median of %d):\n", what, iterations);
  double total = 0;
  for (const auto& [layer, ms] : layers) {
    std::printf("  %-48s %8.3f ms\n", layer.c_str(), ms);
    json["layers"][layer] = ms;
    total += ms;
  }
  std::printf("  %-48s %8.3f ms\n", "sum", total);
}

int run_cpu(const ModelToolOptions& o, const nn::Graph& prepared, std::vector<std::vector<float>> inputs,
            nlohmann::json& json) {
  nn::CpuEngine engine(prepared);
  auto outputs = output_buffers(prepared);
  const auto in_ptrs = pointers<const float>(inputs);
  const auto out_ptrs = pointers<float>(outputs);
  engine.run(in_ptrs, out_ptrs);
  write_outputs(o, prepared, outputs);
  if (o.bench) {
    for (int i = 0; i < o.warmup; ++i) engine.run(in_ptrs, out_ptrs);
    std::vector<double> ms;
    for (int i = 0; i < o.iterations; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      engine.run(in_ptrs, out_ptrs);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    report("cpu f32", summarise(ms), static_cast<int>(prepared.shape_of(prepared.inputs[0].name)[0]), json);
  }
  if (o.profile) print_profile("per-layer CPU time", engine.profile_layers(in_ptrs, out_ptrs, o.iterations), o.iterations, json);
  return 0;
}

#if SLUICE_WITH_CUDA
// f32 NCHW data as `dtype` NHWC bytes (4-D values; others keep their order).
std::vector<std::byte> as_nhwc(const std::vector<float>& v, const nn::Shape& shape, DType dtype) {
  const std::size_t n = v.size(), esize = dtype_bytes(dtype);
  std::vector<std::byte> out(n * esize);
  const bool image = shape.size() == 4;
  const std::size_t C = image ? static_cast<std::size_t>(shape[1]) : 1,
                    HW = image ? static_cast<std::size_t>(shape[2] * shape[3]) : 1;
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t to = i;
    if (image) {
      const std::size_t item = i / (C * HW), c = (i / HW) % C, p = i % HW;
      to = item * C * HW + p * C + c;
    }
    if (dtype == DType::f32) {
      std::memcpy(&out[to * esize], &v[i], esize);
    } else {
      const std::uint16_t bits =
          dtype == DType::bf16 ? kernels::float_to_bf16_bits(v[i]) : kernels::float_to_half_bits(v[i]);
      std::memcpy(&out[to * esize], &bits, esize);
    }
  }
  return out;
}

int run_cuda(const ModelToolOptions& o, const nn::Graph& prepared, const std::vector<std::vector<float>>& inputs,
             nlohmann::json& json) {
  nn::CudaEngineOptions options;
  const std::string precision = o.precision == "auto" ? "f16" : o.precision;
  options.precision = precision == "f32" ? nn::Precision::f32 : precision == "bf16" ? nn::Precision::bf16
                                                                                    : nn::Precision::f16;
  options.algo_cache = o.algo_cache;
  options.cuda_graph = o.cuda_graph;
  if (!o.conv_modes.empty()) {
    const auto allowed = [&](const char* m) { return std::find(o.conv_modes.begin(), o.conv_modes.end(), m) != o.conv_modes.end(); };
    options.conv_fused = allowed("fused");
    options.conv_separate = allowed("separate");
    options.conv_gemm = allowed("gemm");
    options.conv_depthwise = allowed("depthwise");
  }
  const auto t_build = std::chrono::steady_clock::now();
  nn::CudaEngine engine(prepared, options);
  const double build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_build).count();
  std::printf("cuda engine (%s): built in %.0f ms\n%s", precision.c_str(), build_ms, engine.describe().c_str());
  json["precision"] = precision;
  json["build_ms"] = build_ms;

  // Inputs travel as f32 NCHW (what .npy files hold); outputs come back as f32 NCHW.
  Stream stream = Stream::create();
  std::vector<Memory> in_dev, out_dev;
  std::vector<nn::TensorBinding> in_bind, out_bind;
  for (const auto& v : inputs) {
    in_dev.emplace_back(MemoryKind::device, v.size() * sizeof(float));
    gpu::copy_async(in_dev.back().data(), v.data(), v.size() * sizeof(float), stream.get());
    in_bind.push_back({in_dev.back().data(), DType::f32, Layout::nchw});
  }
  auto outputs = output_buffers(prepared);
  for (const auto& v : outputs) {
    out_dev.emplace_back(MemoryKind::device, v.size() * sizeof(float));
    out_bind.push_back({out_dev.back().data(), DType::f32, Layout::nchw});
  }
  const int batch = static_cast<int>(prepared.shape_of(prepared.inputs[0].name)[0]);
  engine.enqueue(in_bind, out_bind, batch, stream.get());
  for (std::size_t i = 0; i < outputs.size(); ++i)
    gpu::copy_async(outputs[i].data(), out_dev[i].data(), outputs[i].size() * sizeof(float), stream.get());
  gpu::stream_synchronize(stream.get());
  write_outputs(o, prepared, outputs);

  if (o.bench) {
    // The pipeline's form of the input: the engine's precision, NHWC, straight from the preprocess stage.
    const DType fast = precision == "f32" ? DType::f32 : precision == "bf16" ? DType::bf16 : DType::f16;
    std::vector<Memory> fast_in;
    std::vector<nn::TensorBinding> fast_bind;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const std::vector<std::byte> bytes = as_nhwc(inputs[i], prepared.shape_of(prepared.inputs[i].name), fast);
      fast_in.emplace_back(MemoryKind::device, bytes.size());
      gpu::copy_async(fast_in.back().data(), bytes.data(), bytes.size(), stream.get());
      fast_bind.push_back({fast_in.back().data(), fast, Layout::nhwc});
    }
    gpu::stream_synchronize(stream.get());
    Event start = Event::create(true), stop = Event::create(true);
    for (int i = 0; i < o.warmup; ++i) engine.enqueue(fast_bind, out_bind, batch, stream.get());
    std::vector<double> ms;
    for (int i = 0; i < o.iterations; ++i) {
      gpu::event_record(start.get(), stream.get());
      engine.enqueue(fast_bind, out_bind, batch, stream.get());
      gpu::event_record(stop.get(), stream.get());
      gpu::event_synchronize(stop.get());
      ms.push_back(gpu::event_elapsed_ms(start.get(), stop.get()));
    }
    // Back to back, as a pipeline keeps the stream fed: throughput without a host round trip per batch.
    const int streak = std::max(1, o.iterations);
    gpu::event_record(start.get(), stream.get());
    for (int i = 0; i < streak; ++i) engine.enqueue(fast_bind, out_bind, batch, stream.get());
    gpu::event_record(stop.get(), stream.get());
    gpu::event_synchronize(stop.get());
    const double streak_ms = gpu::event_elapsed_ms(start.get(), stop.get()) / streak;
    report(("cuda " + precision + (o.cuda_graph ? " graph" : " eager") + ", one at a time").c_str(), summarise(ms),
           batch, json["single"]);
    std::printf("cuda %s back to back: %.3f ms per batch = %.0f items/s\n", precision.c_str(), streak_ms,
                batch * 1000.0 / streak_ms);
    json["back_to_back_ms"] = streak_ms;
    json["items_per_s"] = batch * 1000.0 / streak_ms;
  }
  if (o.profile) print_profile("per-layer GPU time", engine.profile_layers(o.iterations), o.iterations, json);
  return 0;
}
#endif

}  // namespace

int run_model_tool(const ModelToolOptions& o) {
  const nn::Graph model = nn::load_onnx(o.file);
  std::printf("model %s: opset %lld, %zu nodes\n", o.file.c_str(), static_cast<long long>(model.opset),
              model.nodes.size());
  int batch = o.batch > 0 ? o.batch : 1;
  std::vector<std::vector<float>> inputs;
  if (!o.inputs.empty()) {
    int given = 0;
    inputs = read_inputs(o, model, given);
    if (o.batch > 0 && o.batch != given)
      throw std::invalid_argument("--batch " + std::to_string(o.batch) + " differs from the inputs' batch " +
                                  std::to_string(given));
    batch = given;
  }
  if (o.outputs.size() > model.outputs.size())
    throw std::invalid_argument("the model has " + std::to_string(model.outputs.size()) + " outputs but " +
                                std::to_string(o.outputs.size()) + " --output files were given");
  const nn::Graph prepared = nn::prepare(model, batch);
  std::printf("%s", nn::describe_graph(prepared).c_str());
  check_io_fits_in_memory(prepared);
  if (inputs.empty()) inputs = random_inputs(prepared);

  std::string device = o.device;
  if (device == "auto") device = gpu::device_count() > 0 ? "cuda" : "cpu";
  nlohmann::json json{{"model", o.file}, {"batch", batch}, {"device", device}};
  int status = 0;
  if (device == "cpu") {
    if (o.precision != "auto" && o.precision != "f32") throw std::invalid_argument("the CPU backend runs f32 only");
    json["precision"] = "f32";
    status = run_cpu(o, prepared, std::move(inputs), json);
  } else {
#if SLUICE_WITH_CUDA
    if (gpu::device_count() == 0) throw std::invalid_argument("--device cuda: no CUDA device is usable here");
    status = run_cuda(o, prepared, inputs, json);
#else
    throw std::invalid_argument("--device cuda: this sluiced was built without CUDA");
#endif
  }
  if (!o.json_path.empty()) {
    std::ofstream f(o.json_path);
    f << json.dump(2) << '\n';
    if (!f) throw std::runtime_error("cannot write " + o.json_path);
  }
  return status;
}

}  // namespace sluice
