// infer: runs an ONNX model on each batch (nn/): the CUDA backend on the GPU, the CPU backend otherwise.
// Output: the model's raw output tensor, per item the top-k classes (softmax, labels), or per item the detected
// boxes in source-frame pixels (decode + NMS after the model, stages/infer_detect.*, kernels/detect*).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/detect_cpu.hpp"
#include "kernels/half.hpp"
#include "kernels/topk.hpp"
#include "nn/cpu/engine.hpp"
#include "nn/onnx_loader.hpp"
#include "nn/passes.hpp"
#include "runtime/bounded_file.hpp"
#include "runtime/errors.hpp"
#include "runtime/stage_registrar.hpp"
#include "stages/infer.hpp"
#include "stages/infer_detect.hpp"
#if SLUICE_WITH_CUDA
#include "kernels/detect.cuh"
#include "kernels/topk.cuh"
#include "nn/cuda/engine.hpp"
#endif

namespace sluice {
namespace {

namespace fs = std::filesystem;

// Relative paths in a pipeline file are relative to that file, so a service's working directory does not matter.
std::string resolve_path(const std::string& pipeline_file, const std::string& path) {
  if (path.empty() || fs::path(path).is_absolute()) return path;
  const fs::path base = fs::path(pipeline_file).parent_path();
  return (base.empty() || !fs::is_regular_file(pipeline_file)) ? path : (base / path).string();
}

std::vector<std::string> read_labels(const std::string& path, std::int64_t classes) {
  std::string text;
  try {
    text = read_bounded_file(path, "labels file", kMaxLabelsFileBytes);
  } catch (const FileReadError& e) {
    throw ConfigError(e.what());
  }
  std::istringstream in(text);
  std::vector<std::string> labels;
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    labels.push_back(line);
  }
  while (!labels.empty() && labels.back().empty()) labels.pop_back();
  if (static_cast<std::int64_t>(labels.size()) != classes)
    throw ConfigError("labels file '" + path + "' has " + std::to_string(labels.size()) + " lines but the model has " +
                      std::to_string(classes) + " classes");
  return labels;
}

// Where measured convolution algorithms are kept between runs: systemd's CacheDirectory, else the user's cache.
std::string default_algo_cache() {
  if (const char* d = std::getenv("CACHE_DIRECTORY"); d && *d) return std::string(d) + "/conv-algorithms.tsv";
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/sluice/conv-algorithms.tsv";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/sluice/conv-algorithms.tsv";
  return "";
}

// The model's input as the upstream tensor holds it, as f32 NCHW (the CPU backend's only form).
void to_f32_nchw(const PayloadDesc& d, const std::byte* src, int count, float* dst) {
  const std::size_t plane = static_cast<std::size_t>(d.width) * static_cast<std::size_t>(d.height);
  const std::size_t per_item = plane * static_cast<std::size_t>(d.channels);
  for (std::size_t i = 0; i < per_item * static_cast<std::size_t>(count); ++i) {
    const std::size_t item = i / per_item, rest = i % per_item;
    // rest indexes the stored layout; map it to the NCHW position.
    std::size_t to = rest;
    if (d.layout == Layout::nhwc) {
      const std::size_t pixel = rest / static_cast<std::size_t>(d.channels), c = rest % static_cast<std::size_t>(d.channels);
      to = c * plane + pixel;
    }
    float v = 0.f;
    switch (d.dtype) {
      case DType::f32: v = reinterpret_cast<const float*>(src)[i]; break;
      case DType::f16: v = kernels::half_bits_to_float(reinterpret_cast<const std::uint16_t*>(src)[i]); break;
      case DType::bf16: v = kernels::bf16_bits_to_float(reinterpret_cast<const std::uint16_t*>(src)[i]); break;
      case DType::u8: v = static_cast<float>(reinterpret_cast<const std::uint8_t*>(src)[i]); break;
    }
    dst[item * per_item + to] = v;
  }
}

class InferStage final : public Stage {
 public:
  explicit InferStage(const StageInit& init) : on_gpu_(init.device == Device::cuda), batch_(init.batch_size) {
    const PayloadDesc& in = *init.input;
    if (in.kind != PayloadKind::tensor)
      throw ConfigError("takes a tensor (put a preprocess stage before it), got " + in.describe());
    if (on_gpu_ && in.memory != MemoryKind::device)
      throw ConfigError("runs on the GPU and needs its input on the device (put an upload stage before it), got " +
                        in.describe());
    if (!on_gpu_ && in.memory == MemoryKind::device)
      throw ConfigError("runs on the CPU and needs its input in host memory, got " + in.describe());
    in_ = in;
    const auto& p = init.params;
    model_path_ = resolve_path(init.pipeline_file, p.string("model"));
    nn::Graph model;
    try {
      model = nn::load_onnx(model_path_);
    } catch (const nn::ModelError& e) {
      throw ConfigError(e.what());
    }
    if (model.inputs.size() != 1)
      throw ConfigError("model '" + model_path_ + "' has " + std::to_string(model.inputs.size()) +
                        " inputs; the infer stage feeds one image tensor");
    check_input_shape(model.inputs[0], in);
    fixed_batch_ = model.inputs[0].shape[0] > 0;
    const std::string& output = p.string("output");
    detections_ = output == "detections";
    // Only the chosen outputs are computed: the passes drop what they do not need.
    if (detections_) {
      std::vector<std::string> all;
      for (const auto& o : model.outputs) all.push_back(o.name);
      std::vector<nn::ValueInfo> chosen;
      for (const auto& name : detect_output_names(p, all)) chosen.push_back(model.outputs.at(pick_output(model.outputs, name)));
      model.outputs = std::move(chosen);
    } else {
      model.outputs = {model.outputs.at(pick_output(model.outputs, p.string("output_name")))};
    }
    try {
      prepared_ = nn::prepare(model, batch_);
    } catch (const nn::ModelError& e) {
      throw ConfigError(e.what());
    }
    std::vector<nn::Shape> out_shapes;
    std::vector<std::string> out_names;
    for (const auto& o : prepared_.outputs) {
      out_shapes.push_back(prepared_.shape_of(o.name));
      out_names.push_back(o.name);
      per_item_outputs_.push_back(nn::element_count(out_shapes.back()) / batch_);
    }
    const nn::Shape out_shape = out_shapes[0];
    single_output_model_ = std::move(model);
    plan_warm_up();

    const std::string& precision = p.string("precision");
    precision_ = precision == "auto" ? (on_gpu_ ? "f16" : "f32") : precision;
    if (!on_gpu_ && precision_ != "f32")
      throw ConfigError("precision " + precision_ + " needs the GPU; on the CPU the model runs in f32");
    cuda_graph_ = p.boolean("cuda_graph");
    cpu_options_.threads = static_cast<int>(p.integer("cpu_threads"));
    const std::string& cache = p.string("algo_cache");
    algo_cache_ = cache == "off" ? "" : cache.empty() ? default_algo_cache() : resolve_path(init.pipeline_file, cache);

    out_.batch = in.batch;
    out_.memory = in.memory;
    if (detections_) {
      DetectSetup setup = setup_detect(p, out_names, out_shapes, batch_, in,
                                       resolve_path(init.pipeline_file, p.string("detect.priors")));
      detect_ = setup.params;
      class_thresholds_ = std::move(setup.class_thresholds);
      priors_ = std::move(setup.priors);
      detect_note_ = std::move(setup.summary);
      out_.kind = PayloadKind::detections;
      out_.channels = detect_.max_detections;
      out_.classes = detect_.classes;
      out_.geometry = in.geometry;
      if (const std::string& labels = p.string("labels"); !labels.empty())
        out_.labels = std::make_shared<const std::vector<std::string>>(
            read_labels(resolve_path(init.pipeline_file, labels), detect_.classes));
    } else if (output == "classes") {
      classes_ = true;
      topk_.classes = static_cast<int>(per_item_outputs_[0]);
      topk_.k = static_cast<int>(p.integer("top_k"));
      topk_.softmax = p.boolean("softmax");
      try {
        kernels::validate(topk_);
      } catch (const std::invalid_argument& e) {
        throw ConfigError(e.what());
      }
      out_.kind = PayloadKind::classes;
      out_.channels = topk_.k;
      out_.classes = topk_.classes;
      if (const std::string& labels = p.string("labels"); !labels.empty())
        out_.labels = std::make_shared<const std::vector<std::string>>(
            read_labels(resolve_path(init.pipeline_file, labels), per_item_outputs_[0]));
    } else {
      out_.kind = PayloadKind::tensor;
      out_.dtype = DType::f32;
      out_.layout = Layout::nchw;
      // The item's shape after the batch dimension, as channels x height x width (missing dims are 1).
      std::int64_t dims[3] = {1, 1, 1};
      for (std::size_t d = 1; d < out_shape.size(); ++d) dims[std::min<std::size_t>(d - 1, 2)] *= out_shape[d];
      out_.channels = static_cast<int>(dims[0]);
      out_.height = static_cast<int>(dims[1]);
      out_.width = static_cast<int>(dims[2]);
    }
  }

  PayloadDesc output() const override { return out_; }
  bool uses_gpu() const override { return on_gpu_; }
  std::string plan_note() const override { return detect_note_; }

  void open([[maybe_unused]] StageContext& ctx) override {
#if SLUICE_WITH_CUDA
    if (on_gpu_) {
      nn::CudaEngineOptions options;
      options.precision = precision_ == "f32" ? nn::Precision::f32 : precision_ == "bf16" ? nn::Precision::bf16
                                                                                          : nn::Precision::f16;
      options.algo_cache = algo_cache_;
      options.cuda_graph = cuda_graph_;
      if (!algo_cache_.empty()) {
        std::error_code ignored;  // an unwritable cache only costs a re-measure next time
        fs::create_directories(fs::path(algo_cache_).parent_path(), ignored);
      }
      gpu_engine_ = std::make_unique<nn::CudaEngine>(prepared_, options);
      // The engine holds the weights on the device and runs partial batches itself: the host graphs are done.
      prepared_ = {};
      single_output_model_ = {};
      if (classes_)
        logits_ = Memory(MemoryKind::device, static_cast<std::size_t>(per_item_outputs_[0]) * batch_ * sizeof(float));
      if (detections_) {
        for (const std::int64_t per_item : per_item_outputs_)
          head_device_.emplace_back(MemoryKind::device, static_cast<std::size_t>(per_item) * batch_ * sizeof(float));
        kernels::DetectParams d = detect_;
        d.items = batch_;
        try {
          detect_gpu_ = std::make_unique<kernels::DetectWorkspaceGpu>(d, class_thresholds_, priors_, ctx.stream);
        } catch (const std::invalid_argument& e) {
          throw ConfigError(e.what());
        }
      }
      return;
    }
#endif
    const std::size_t items = static_cast<std::size_t>(batch_);
    if (in_.dtype != DType::f32 || in_.layout != Layout::nchw)
      input_f32_.resize(items * static_cast<std::size_t>(in_.channels) * in_.width * in_.height);
    if (classes_) logits_host_.resize(items * static_cast<std::size_t>(per_item_outputs_[0]));
    if (detections_)
      for (const std::int64_t per_item : per_item_outputs_)
        head_host_.emplace_back(items * static_cast<std::size_t>(per_item));
    // The full-batch engine takes the prepared graph (no second copy of the weights) before the first batch.
    cpu_engines_.emplace(batch_, std::make_unique<nn::CpuEngine>(std::move(prepared_), cpu_options_));
  }

  std::string warm_up_plan() const override {
    if (on_gpu_) {
      std::string what = "the CUDA engine";
      what += fixed_batch_ ? " for batches of " + std::to_string(batch_) : " for each batch size 1.." + std::to_string(batch_);
      what += cuda_graph_ ? ": plans, kernels and a CUDA graph per size" : ": plans and kernels per size";
      if (detections_ || classes_) what += ", and the output head";
      return what + " (sizes a layer cannot run fewer items of are left out)";
    }
    if (warm_counts_.empty()) return {};
    std::string what = "the CPU engine";
    if (warm_counts_.size() == 1) what += " for batches of " + std::to_string(warm_counts_.front());
    else what += " for each batch size 1.." + std::to_string(warm_counts_.back());
    what += ", one zero batch through each";
    if (!warm_note_.empty()) what += " (" + warm_note_ + ")";
    return what;
  }

  // Partial batches are common under a latency budget: each size's engine (CPU) or plans and graph (GPU) are
  // made here, not by its first batch.
  void warm_up([[maybe_unused]] StageContext& ctx) override {
#if SLUICE_WITH_CUDA
    if (on_gpu_) {
      warm_up_gpu(ctx);
      return;
    }
#endif
    const std::size_t item = static_cast<std::size_t>(in_.channels) * in_.width * in_.height;
    const std::vector<float> zeros(item * static_cast<std::size_t>(batch_), 0.0f);
    std::vector<std::vector<float>> results;
    std::vector<float*> outputs;
    for (const std::int64_t per_item : per_item_outputs_)
      outputs.push_back(results.emplace_back(static_cast<std::size_t>(per_item) * static_cast<std::size_t>(batch_)).data());
    for (const int count : warm_counts_) cpu_engine(count).run({zeros.data()}, outputs);
  }

  BatchLease process(Batch* in, StageContext& ctx) override {
    BatchLease out = ctx.acquire();
    if (!out) throw StageError("output pool closed");
    const int count = in->count;
    topk_.items = count;
    // A model exported with a fixed batch runs whole batches: the rows past `count` hold a slot's stale items,
    // computed and ignored (inference treats items independently).
    const int run = fixed_batch_ ? batch_ : count;
#if SLUICE_WITH_CUDA
    if (on_gpu_) {
      enqueue_gpu(in->memory.data(), out->memory.data(), run, count, ctx.stream);
      return out;
    }
#endif
    const float* input = reinterpret_cast<const float*>(in->memory.data());
    if (!input_f32_.empty()) {
      to_f32_nchw(in_, in->memory.data(), run, input_f32_.data());
      input = input_f32_.data();
    }
    if (detections_) {
      std::vector<float*> outputs;
      kernels::DetectInputs head;
      for (std::size_t i = 0; i < head_host_.size(); ++i) {
        outputs.push_back(head_host_[i].data());
        head.outputs[i] = head_host_[i].data();
      }
      cpu_engine(run).run({input}, outputs);
      head.priors = priors_.empty() ? nullptr : priors_.data();
      kernels::DetectParams d = detect_;
      d.items = count;
      d.class_thresholds = class_thresholds_.empty() ? nullptr : class_thresholds_.data();
      kernels::detect_cpu(d, head, out->memory.data(), detect_ws_);
      return out;
    }
    float* result = classes_ ? logits_host_.data() : reinterpret_cast<float*>(out->memory.data());
    cpu_engine(run).run({input}, {result});
    if (classes_) kernels::topk_cpu(topk_, result, reinterpret_cast<kernels::ClassScore*>(out->memory.data()));
    return out;
  }

  void close(StageContext&) override {
#if SLUICE_WITH_CUDA
    gpu_engine_.reset();
    logits_ = Memory();
    detect_gpu_.reset();
    head_device_.clear();
#endif
    cpu_engines_.clear();
  }

 private:
  std::size_t pick_output(const std::vector<nn::ValueInfo>& outputs, const std::string& name) const {
    if (name.empty()) return 0;
    std::string names;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].name == name) return i;
      names += (i ? ", " : "") + outputs[i].name;
    }
    throw ConfigError("model '" + model_path_ + "' has no output named '" + name + "' (it has: " + names + ")");
  }

  void check_input_shape(const nn::ValueInfo& input, const PayloadDesc& in) const {
    const nn::Shape& s = input.shape;
    const bool fits = s.size() == 4 && (s[1] < 0 || s[1] == in.channels) && (s[2] < 0 || s[2] == in.height) &&
                      (s[3] < 0 || s[3] == in.width);
    if (!fits)
      throw ConfigError("model '" + model_path_ + "' input '" + input.name + "' is " + nn::to_string(s) +
                        " (N,C,H,W) but the upstream tensor is " + std::to_string(in.channels) + "x" +
                        std::to_string(in.height) + "x" + std::to_string(in.width) +
                        " (set the preprocess stage's width/height/order to match)");
    if (s[0] > 0 && s[0] != batch_)
      throw ConfigError("model '" + model_path_ + "' has a fixed batch of " + std::to_string(s[0]) +
                        " but the pipeline's batch_size is " + std::to_string(batch_));
  }

  // Which batch sizes warm_up() prepares: every size a batch can have, unless a model exported with a fixed batch
  // runs whole batches only, or an engine per size would copy too much of the weights (then the full size only).
  void plan_warm_up() {
    if (on_gpu_) return;
    std::size_t weight_bytes = 0;
    for (const auto& [name, t] : single_output_model_.constants)
      weight_bytes += t.f32.size() * sizeof(float) + t.i64.size() * sizeof(std::int64_t);
    constexpr std::size_t kWarmAllBytes = 512u << 20;  // the weights' copies the partial engines may take
    const bool all = !fixed_batch_ && weight_bytes * static_cast<std::size_t>(batch_ - 1) <= kWarmAllBytes;
    if (!all && !fixed_batch_) warm_note_ = "partial sizes are prepared by their first batch: one engine per size would copy the weights " + std::to_string(batch_ - 1) + " more times";
    for (int count = all ? 1 : batch_; count <= batch_; ++count) warm_counts_.push_back(count);
  }

#if SLUICE_WITH_CUDA
  // The model on `run` items of `input` and the output head (detections, top-k, or the raw output) on the first
  // `count` of them into `output`, enqueued on `stream`.
  void enqueue_gpu(void* input, void* output, int run, int count, gpu::StreamHandle stream) {
    const nn::TensorBinding in{input, in_.dtype, in_.layout};
    if (detections_) {
      std::vector<nn::TensorBinding> outputs;
      kernels::DetectInputs head;
      for (std::size_t i = 0; i < head_device_.size(); ++i) {
        outputs.push_back({head_device_[i].data(), DType::f32, Layout::nchw});
        head.outputs[i] = reinterpret_cast<const float*>(head_device_[i].data());
      }
      gpu_engine_->enqueue({in}, outputs, run, stream);
      kernels::DetectParams d = detect_;
      d.items = count;
      kernels::detect_gpu(d, head, static_cast<std::byte*>(output), *detect_gpu_, stream);
      return;
    }
    void* result = classes_ ? static_cast<void*>(logits_.data()) : output;
    gpu_engine_->enqueue({in}, {{result, DType::f32, Layout::nchw}}, run, stream);
    if (!classes_) return;
    kernels::TopKParams t = topk_;
    t.items = count;
    kernels::topk_gpu(t, static_cast<const float*>(result), reinterpret_cast<kernels::ClassScore*>(output), stream);
  }

  // The engine at every count a batch can have, then the output head once on a zero batch (its kernels load
  // lazily), into scratch memory: the stage's pool buffers belong to the runner's event protocol.
  void warm_up_gpu(StageContext& ctx) {
    std::vector<int> counts = gpu_engine_->run_counts();
    if (fixed_batch_) counts = {batch_};
    gpu_engine_->warm_up(counts);
    if (!detections_ && !classes_) return;
    const Memory input(MemoryKind::device, in_.batch_bytes());
    const Memory output(MemoryKind::device, out_.batch_bytes());
    gpu::zero_async(input.data(), input.bytes(), ctx.stream);
    enqueue_gpu(input.data(), output.data(), batch_, batch_, ctx.stream);
    gpu::stream_synchronize(ctx.stream);  // before the scratch memory goes
  }
#endif

  // Partial batches (stream end, batch timeout) run an engine prepared for exactly that count (made on first use;
  // the full batch's is made in open()).
  nn::CpuEngine& cpu_engine(int count) {
    auto it = cpu_engines_.find(count);
    if (it == cpu_engines_.end())
      it = cpu_engines_.emplace(count, std::make_unique<nn::CpuEngine>(nn::prepare(single_output_model_, count), cpu_options_)).first;
    return *it->second;
  }

  bool on_gpu_;
  int batch_;
  PayloadDesc in_, out_;
  std::string model_path_, precision_, algo_cache_;
  bool cuda_graph_ = true, classes_ = false, detections_ = false, fixed_batch_ = false;
  std::vector<std::int64_t> per_item_outputs_;  // elements per item of each computed output
  kernels::DetectParams detect_;                // output: detections (items and class_thresholds set per batch)
  std::vector<float> class_thresholds_, priors_;
  std::string detect_note_;
  kernels::DetectWorkspaceCpu detect_ws_;
  std::vector<std::vector<float>> head_host_;   // CPU: the model's outputs the head reads, a batch each
  nn::Graph single_output_model_, prepared_;
  kernels::TopKParams topk_;
  nn::CpuOptions cpu_options_;
  std::map<int, std::unique_ptr<nn::CpuEngine>> cpu_engines_;
  std::vector<int> warm_counts_;  // batch sizes warm_up() prepares (CPU)
  std::string warm_note_;
  std::vector<float> input_f32_, logits_host_;
#if SLUICE_WITH_CUDA
  std::unique_ptr<nn::CudaEngine> gpu_engine_;
  Memory logits_;
  std::vector<Memory> head_device_;  // output: detections: the model's outputs the head reads, a batch each
  std::unique_ptr<kernels::DetectWorkspaceGpu> detect_gpu_;
#endif
};

}  // namespace

StageInfo infer_stage() {
  StageInfo info{"infer",
          StageRole::transform,
          "runs an ONNX model (cuDNN/cuBLAS on the GPU, oneDNN on the CPU): tensor in, the model's output, the "
          "top-k classes or the detected boxes out",
          {
              {"model", ParamType::string, "", "ONNX file (relative paths are relative to the pipeline file)", {}, {},
               {}, 0, true},
              {"precision", ParamType::choice, "auto", "GPU arithmetic (auto: f16 on the GPU, f32 on the CPU)", {},
               {}, {"auto", "f32", "f16", "bf16"}},
              {"output_name", ParamType::string, "", "the model output to emit (default: its first)"},
              {"output", ParamType::choice, "tensor",
               "tensor: the raw output (f32); classes: top-k per item; detections: boxes per item in frame pixels "
               "(the detect block)", {}, {}, {"tensor", "classes", "detections"}},
              {"top_k", ParamType::integer, "5", "classes: how many best classes per item", 1.0, 32.0},
              {"softmax", ParamType::boolean, "true", "classes: scores are softmax probabilities (else raw logits)"},
              {"labels", ParamType::string, "", "classes, detections: file with one class name per line, in output order"},
              {"algo_cache", ParamType::string, "",
               "GPU: file of measured convolution algorithms (empty: $CACHE_DIRECTORY or ~/.cache/sluice; off: none)"},
              {"cuda_graph", ParamType::boolean, "true", "GPU: replay the network as one CUDA graph"},
              {"cpu_threads", ParamType::integer, "0",
               "CPU: threads each layer runs on (0: OMP_NUM_THREADS if set, else every core)", 0.0, 1024.0},
          },
          [](const StageInit& init) -> std::unique_ptr<Stage> { return std::make_unique<InferStage>(init); }};
  for (ParamSpec& spec : detect_param_specs()) info.params.push_back(std::move(spec));
  return info;
}

SLUICE_REGISTER_STAGE(infer_stage);

}  // namespace sluice
