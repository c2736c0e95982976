#include "nn/cuda/engine.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <spdlog/spdlog.h>

#include "nn/cuda/algo_cache.hpp"
#include "nn/cuda/check.hpp"
#include "nn/cuda/conv_layer.hpp"
#include "nn/cuda/stream_stopwatch.hpp"
#include "nn/cuda/cudnn_handles.hpp"
#include "nn/cuda/layer.hpp"
#include "nn/exact_indices.hpp"
#include "nn/memory_plan.hpp"

namespace sluice::nn {

using namespace cuda;

std::string_view to_string(Precision p) noexcept {
  switch (p) {
    case Precision::f32: return "f32";
    case Precision::f16: return "f16";
    case Precision::bf16: return "bf16";
  }
  return "?";
}

namespace {

constexpr std::size_t kCublasWorkspace = std::size_t(32) << 20;  // cuBLAS' advice for Hopper
// A capture can be invalidated from outside: another thread's call that synchronises the device (creating or
// destroying an NVDEC session, freeing device or pinned memory) while this thread captures. warm_up() captures
// before sources open and tries again at once; a capture that fails on the way (no warm-up, or a count warm-up
// left out) is tried again after kCaptureBackoff runs layer by layer, and only kCaptureAttempts failures in a row
// turn graphs off.
constexpr int kCaptureAttempts = 4;
constexpr int kCaptureBackoff = 32;
constexpr int kWarmCaptureAttempts = 6;  // per batch size at warm-up, 10, 20, ... ms apart

DType dtype_of(Precision p) { return p == Precision::f32 ? DType::f32 : p == Precision::f16 ? DType::f16 : DType::bf16; }

std::string megabytes(std::size_t bytes) {
  std::ostringstream s;
  s.precision(1);
  s << std::fixed << static_cast<double>(bytes) / (1 << 20) << " MiB";
  return s.str();
}

// A 4-D value that, held NHWC, has the same bytes as NCHW (only size-1 dims move).
bool layouts_agree(const Shape& s) { return s.size() != 4 || s[1] == 1 || s[2] * s[3] == 1; }

// A binding is used in place when it already is what the engine holds.
bool binds_in_place(const TensorBinding& b, const ValueSlot& slot) {
  return b.dtype == slot.dtype && (slot.shape.size() != 4 || (b.layout == Layout::nhwc) == slot.nhwc || layouts_agree(slot.shape));
}

View binding_view(const Shape& shape, Layout layout) {
  View v;
  v.rank = static_cast<int>(shape.size());
  std::int64_t s = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    v.shape[d] = shape[static_cast<std::size_t>(d)];
    v.stride[d] = s;
    s *= shape[static_cast<std::size_t>(d)];
  }
  if (v.rank == 4 && layout == Layout::nhwc) {
    v.stride[1] = 1;
    v.stride[3] = shape[1];
    v.stride[2] = shape[1] * shape[3];
    v.stride[0] = shape[1] * shape[2] * shape[3];
  }
  return v;
}

}  // namespace

struct CudaEngine::State {
  Graph graph;
  CudaEngineOptions options;
  DType type;
  std::int64_t batch = 0;
  ValueTable values;
  std::string device_name;
  Stream stream;          // construction, profiling
  Stream capture_stream;  // graph capture (never executes work)
  CudnnHandle cudnn;
  CublasHandle cublas;
  CublasLtHandle cublas_lt{[] {
    cublasLtHandle_t h = nullptr;
    CUBLAS_CHECK(cublasLtCreate(&h));
    return h;
  }()};
  std::vector<Memory> weights;
  std::size_t weight_bytes = 0;
  Memory arena, workspace, scratch, cublas_workspace;
  std::vector<std::unique_ptr<Layer>> layers;
  std::vector<int> inputs, outputs;
  std::vector<void*> base_ptr, run_ptr;
  std::string partial_problem;
  std::set<int> prepared_counts, eager_counts;
  // One graph per count, of the layers alone on the engine's own buffers (graph_by_count[count], null: none yet):
  // the caller's memory is copied in and out around the launch, so a pool's buffers share one graph.
  std::vector<cudaGraphExec_t> graph_by_count;
  bool graphs_work = true;
  int captures = 0;           // graphs made, in all
  int capture_failures = 0;   // in a row
  int runs_until_capture = 0;  // layer-by-layer runs left before the next capture attempt
  std::string graph_note;
  int convs_measured = 0, convs_cached = 0;

  State(Graph g, const CudaEngineOptions& o)
      : graph(std::move(g)), options(o), type(dtype_of(o.precision)), values(type, 0) {}

  ~State() {
    for (cudaGraphExec_t exec : graph_by_count)
      if (exec) cudaGraphExecDestroy(exec);
  }

  void build();
  void prepare(int count);
  void bind(const std::vector<TensorBinding>& in, const std::vector<TensorBinding>& out, bool in_place);
  void copy_in(const std::vector<TensorBinding>& in, int count, cudaStream_t s);
  void run_layers(int count, cudaStream_t s);
  void copy_out(const std::vector<TensorBinding>& out, int count, cudaStream_t s);
  void run_all(const std::vector<TensorBinding>& in, const std::vector<TensorBinding>& out, int count,
               cudaStream_t s);
  void run_after_failed_capture(const std::vector<TensorBinding>& in, const std::vector<TensorBinding>& out, int count,
                                cudaStream_t s);
  RunContext context(int count, cudaStream_t s);
  cudaGraphExec_t capture(int count);
  bool try_capture(int count);
  void renew_library_handles();
};

void CudaEngine::State::build() {
  const std::string& src = graph.source;
  if (graph.inputs.empty()) throw ModelError(src + ": the graph has no inputs");
  for (const auto& in : graph.inputs)
    if (in.shape.empty() || std::any_of(in.shape.begin(), in.shape.end(), [](auto d) { return d < 0; }))
      throw ModelError(src + ": input '" + in.name + "' has no concrete shape " + to_string(in.shape) +
                       " (run prepare() first)");
  batch = graph.inputs[0].shape[0];
  values = ValueTable(type, batch);
  // Index values (nn/exact_indices.hpp) stay f32 in an f16/bf16 engine; their other readers get converted copies.
  std::set<std::string> index_values;
  if (type != DType::f32) {
    ExactIndices exact = hold_indices_exactly(graph);
    graph = std::move(exact.graph);
    index_values = std::move(exact.index_values);
  }
  device_name = gpu::device_name([] {
    int d = 0;
    CUDA_CHECK(cudaGetDevice(&d));
    return d;
  }());
  stream = Stream::create();
  capture_stream = Stream::create();
  graph_by_count.assign(static_cast<std::size_t>(batch) + 1, nullptr);

  // Values: constants first (uploaded when a layer asks), then activations with their lifetimes.
  for (const auto& [name, t] : graph.constants) {
    ValueSlot s;
    s.name = name;
    s.shape = t.shape;
    s.constant = true;
    values.add(std::move(s));
  }
  const int layer_count = static_cast<int>(graph.nodes.size());
  std::vector<BufferRequest> blocks;  // sizes in bytes
  std::vector<int> block_value;
  const std::set<std::string> nhwc = nhwc_values(graph);
  auto add_activation = [&](const std::string& name, const Shape& shape, int first) {
    if (values.has(name)) throw ModelError(src + ": value '" + name + "' is defined twice");
    ValueSlot s;
    s.name = name;
    s.shape = shape;
    s.nhwc = nhwc.count(name) != 0;
    s.batched = !shape.empty() && shape[0] == batch;
    s.dtype = index_values.count(name) ? DType::f32 : type;
    s.bytes = static_cast<std::size_t>(element_count(shape)) * dtype_bytes(s.dtype);
    block_value.push_back(values.add(std::move(s)));
    blocks.push_back({values.slot(block_value.back()).bytes, first, first});
  };
  for (const auto& in : graph.inputs) add_activation(in.name, in.shape, -1);
  for (int i = 0; i < layer_count; ++i)
    for (const auto& out : graph.nodes[static_cast<std::size_t>(i)].outputs) {
      auto it = graph.shapes.find(out);
      if (it == graph.shapes.end())
        throw ModelError(src + ": " + graph.nodes[static_cast<std::size_t>(i)].where() + ": no shape for output '" +
                         out + "' (run prepare() first)");
      add_activation(out, it->second, i);
    }
  // A Reshape between two row-major values changes no byte: its output shares the input's block (whose life
  // then lasts to the output's last use) and the layer does nothing. Values bound to the caller's memory keep
  // their own blocks, so bind() never has to follow an alias.
  std::set<std::string> bound;
  for (const auto& v : graph.inputs) bound.insert(v.name);
  for (const auto& v : graph.outputs) bound.insert(v.name);
  std::vector<bool> aliased(block_value.size(), false);
  for (const auto& node : graph.nodes) {
    if (node.op != Op::Reshape || node.inputs.empty() || node.outputs.size() != 1) continue;
    const std::string &x = node.inputs[0], &y = node.outputs[0];
    if (graph.is_constant(x) || bound.count(x) || bound.count(y) || nhwc.count(x) || nhwc.count(y)) continue;
    const int x_id = values.id(x), y_id = values.id(y);
    if (values.type(x_id) != values.type(y_id)) continue;  // a conversion of an index value
    const int root = values.slot(x_id).alias_of >= 0 ? values.slot(x_id).alias_of : x_id;
    values.slot(y_id).alias_of = root;
  }
  // A Slice whose output only a Concat reads (Swin's torch.roll: two Slices of one value, concatenated): the
  // Concat reads that window of the Slice's input in place and the Slice does nothing, one pass instead of two.
  // The output shares the input's block like a Reshape's (the block then lives to the Concat) and has no bytes.
  std::map<std::string, int> reads;
  std::set<std::string> read_by_concat;
  for (const auto& node : graph.nodes)
    for (const auto& in : node.inputs) {
      if (in.empty()) continue;
      ++reads[in];
      if (node.op == Op::Concat) read_by_concat.insert(in);
    }
  for (const auto& node : graph.nodes) {
    if (node.op != Op::Slice || node.inputs.empty() || node.outputs.size() != 1) continue;
    const std::string &x = node.inputs[0], &y = node.outputs[0];
    if (reads[y] != 1 || !read_by_concat.count(y)) continue;
    if (graph.is_constant(x) || bound.count(x) || bound.count(y) || nhwc.count(x) || nhwc.count(y)) continue;
    const int x_id = values.id(x), y_id = values.id(y);
    if (values.type(x_id) != values.type(y_id)) continue;
    const Shape &xs = values.slot(x_id).shape, &ys = values.slot(y_id).shape;
    const auto starts = node.attrs.ints("starts"), steps = node.attrs.ints("steps");
    if (starts.size() != xs.size() || steps.size() != xs.size() || ys.size() != xs.size() || xs.size() > kMaxRank ||
        values.slot(x_id).window_of >= 0)
      continue;
    if (values.slot(x_id).batched && (starts[0] != 0 || steps[0] != 1 || ys[0] != xs[0])) continue;  // partial runs
    const int root = values.slot(x_id).alias_of >= 0 ? values.slot(x_id).alias_of : x_id;
    ValueSlot& w = values.slot(y_id);
    w.alias_of = root;
    w.window_of = x_id;
    w.window_starts = starts;
    w.window_steps = steps;
  }
  std::vector<int> block_of(values.size(), -1);
  for (std::size_t b = 0; b < block_value.size(); ++b) {
    const int id = block_value[b];
    const int root = values.slot(id).alias_of;
    if (root >= 0) aliased[b] = true;
    block_of[static_cast<std::size_t>(id)] = root >= 0 ? block_of[static_cast<std::size_t>(root)] : static_cast<int>(b);
  }
  for (int i = 0; i < layer_count; ++i)
    for (const auto& in : graph.nodes[static_cast<std::size_t>(i)].inputs) {
      if (in.empty()) continue;
      const int b = block_of[static_cast<std::size_t>(values.id(in))];
      if (b >= 0) blocks[static_cast<std::size_t>(b)].last_step = std::max(blocks[static_cast<std::size_t>(b)].last_step, i);
    }
  for (const auto& in : graph.inputs) inputs.push_back(values.id(in.name));
  for (const auto& out : graph.outputs) {
    const int id = values.id(out.name);
    outputs.push_back(id);
    if (block_of[static_cast<std::size_t>(id)] >= 0) blocks[static_cast<std::size_t>(block_of[static_cast<std::size_t>(id)])].last_step = layer_count;
  }
  for (std::size_t b = 0; b < blocks.size(); ++b)
    if (aliased[b]) blocks[b].size = 0;  // its memory is its root's
  const MemoryPlan plan = plan_memory(blocks, 256);  // 256 bytes: cuDNN's and the vector kernels' alignment
  arena = Memory(MemoryKind::device, std::max<std::size_t>(plan.arena, 256));
  CUDA_CHECK(cudaMemsetAsync(arena.data(), 0, arena.bytes(), stream.get()));  // no NaN garbage in trial runs
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const int root = block_of[static_cast<std::size_t>(block_value[b])];
    values.slot(block_value[b]).base = arena.data() + plan.offsets[static_cast<std::size_t>(root)];
  }

  // Only the layers below read or write index values held f32 (each with its own values' types); any other
  // reader was given a converted copy by hold_indices_exactly.
  for (const auto& node : graph.nodes) {
    static const std::set<Op> typed = {Op::Reshape, Op::Transpose, Op::Slice, Op::Split, Op::Concat, Op::Add,
                                       Op::Sub, Op::Mul, Op::Div, Op::Max, Op::Min, Op::Neg, Op::Abs, Op::Floor, Op::Ceil,
                                       Op::ArgMax, Op::ArgMin, Op::TopK, Op::GatherElements};
    if (typed.count(node.op)) continue;
    for (const auto* list : {&node.inputs, &node.outputs})
      for (const auto& v : *list)
        if (!v.empty() && values.has(v) && values.type(values.id(v)) != type)
          throw ModelError(src + ": " + node.where() + ": reads or writes index value '" + v +
                           "' held as f32 (internal: nn/exact_indices.cpp should have converted it)");
  }

  // Layers (weights are uploaded here).
  BuildContext ctx{graph, values, stream.get(), cudnn.get(), weights};
  ctx.cublas_lt = cublas_lt.get();
  ctx.cublas_workspace_bytes = kCublasWorkspace;
  ctx.attention_mode = options.attention;
  ctx.attention_scores_limit = options.attention_scores_limit;
  std::vector<ConvLayer*> convs;
  for (const auto& node : graph.nodes) {
    if (node.op == Op::Conv) {
      auto conv = std::make_unique<ConvLayer>(node, ctx);
      convs.push_back(conv.get());
      layers.push_back(std::move(conv));
    } else if (node.op == Op::ConvTranspose) {
      layers.push_back(make_conv_transpose(node, ctx, options.workspace_limit));
    } else if (node.op == Op::Gemm || node.op == Op::MatMul || node.op == Op::Linear) {
      layers.push_back(make_gemm(node, ctx));
    } else {
      layers.push_back(make_kernel_layer(node, ctx));
    }
    if (partial_problem.empty() && !layers.back()->partial_batch_problem().empty())
      partial_problem = node.where() + ": " + layers.back()->partial_batch_problem();
  }
  weight_bytes = ctx.weight_bytes;
  base_ptr.resize(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) base_ptr[i] = values.slot(static_cast<int>(i)).base;
  run_ptr = base_ptr;

  std::size_t scratch_bytes = 0;
  for (const auto& l : layers) scratch_bytes = std::max(scratch_bytes, l->scratch_bytes());
  if (scratch_bytes) scratch = Memory(MemoryKind::device, scratch_bytes);

  cublas_workspace = Memory(MemoryKind::device, kCublasWorkspace);
  CUBLAS_CHECK(cublasSetWorkspace(cublas.get(), cublas_workspace.data(), kCublasWorkspace));
  CUBLAS_CHECK(cublasSetMathMode(cublas.get(), CUBLAS_DEFAULT_MATH));  // f32 stays f32 (no TF32)

  // Convolution algorithms: cached or measured with the real buffers, then one workspace for all.
  if (!convs.empty()) {
    AlgoCache cache(options.algo_cache);
    Memory trial_workspace(MemoryKind::device, std::max<std::size_t>(options.workspace_limit, 256));
    ConvSelection sel{cudnn.get(), cublas.get(), stream.get(), trial_workspace.data(), options.workspace_limit, scratch.data(),
                      cache, device_name, &base_ptr, options.conv_fused, options.conv_separate, options.conv_gemm,
                      options.conv_depthwise};
    for (ConvLayer* c : convs) {
      c->select_algorithm(sel);
      (c->from_cache() ? convs_cached : convs_measured)++;
    }
    cache.save();
  }
  std::size_t workspace_bytes = 0;
  for (const auto& l : layers) workspace_bytes = std::max(workspace_bytes, l->workspace_bytes());
  if (workspace_bytes) workspace = Memory(MemoryKind::device, workspace_bytes);

  prepare(static_cast<int>(batch));
  CUDA_CHECK(cudaStreamSynchronize(stream.get()));
}

void CudaEngine::State::prepare(int count) {
  if (prepared_counts.count(count)) return;
  for (auto& l : layers) l->prepare(count, cudnn.get());
  prepared_counts.insert(count);
}

RunContext CudaEngine::State::context(int count, cudaStream_t s) {
  CUDNN_CHECK(cudnnSetStream(cudnn.get(), s));
  CUBLAS_CHECK(cublasSetStream(cublas.get(), s));
  RunContext ctx;
  ctx.stream = s;
  ctx.count = count;
  ctx.ptr = &run_ptr;
  ctx.cudnn = cudnn.get();
  ctx.cublas = cublas.get();
  ctx.cublas_lt = cublas_lt.get();
  ctx.cublas_workspace = cublas_workspace.data();
  ctx.cublas_workspace_bytes = cublas_workspace.bytes();
  ctx.workspace = workspace.data();
  ctx.workspace_bytes = workspace.bytes();
  ctx.scratch = scratch.data();
  ctx.scratch_bytes = scratch.bytes();
  return ctx;
}

// Points every value at the engine's own memory, then (`in_place`) the bound inputs/outputs that need no
// conversion at the caller's memory.
void CudaEngine::State::bind(const std::vector<TensorBinding>& in, const std::vector<TensorBinding>& out, bool in_place) {
  std::copy(base_ptr.begin(), base_ptr.end(), run_ptr.begin());
  if (!in_place) return;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (binds_in_place(in[i], values.slot(inputs[i]))) run_ptr[static_cast<std::size_t>(inputs[i])] = in[i].data;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const int id = outputs[i];
    const bool is_input = std::find(inputs.begin(), inputs.end(), id) != inputs.end();
    const bool bound_twice = std::find(outputs.begin(), outputs.begin() + static_cast<std::ptrdiff_t>(i), id) !=
                             outputs.begin() + static_cast<std::ptrdiff_t>(i);
    if (!is_input && !bound_twice && binds_in_place(out[i], values.slot(id)))
      run_ptr[static_cast<std::size_t>(id)] = out[i].data;
  }
}

void CudaEngine::State::copy_in(const std::vector<TensorBinding>& in, int count, cudaStream_t s) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const int id = inputs[i];
    if (run_ptr[static_cast<std::size_t>(id)] == in[i].data) continue;
    View dst = values.view(id, count), src = binding_view(values.shape_at(id, count), in[i].layout);
    order_by_destination(dst, src);
    remap_copy(values.type(id), run_ptr[static_cast<std::size_t>(id)], dst, in[i].dtype, in[i].data, src, s);
  }
}

void CudaEngine::State::run_layers(int count, cudaStream_t s) {
  const RunContext ctx = context(count, s);
  for (auto& l : layers) l->run(ctx);
}

void CudaEngine::State::copy_out(const std::vector<TensorBinding>& out, int count, cudaStream_t s) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const int id = outputs[i];
    if (run_ptr[static_cast<std::size_t>(id)] == out[i].data) continue;
    View dst = binding_view(values.shape_at(id, count), out[i].layout), src = values.view(id, count);
    order_by_destination(dst, src);
    remap_copy(out[i].dtype, out[i].data, dst, values.type(id), run_ptr[static_cast<std::size_t>(id)], src, s);
  }
}

void CudaEngine::State::run_all(const std::vector<TensorBinding>& in, const std::vector<TensorBinding>& out, int count,
                                cudaStream_t s) {
  copy_in(in, count, s);
  run_layers(count, s);
  copy_out(out, count, s);
}

// Captures the layers at `count` on the engine's own buffers (run_ptr == base_ptr).
cudaGraphExec_t CudaEngine::State::capture(int count) {
  cudaStream_t s = capture_stream.get();
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t g = nullptr;
  try {
    run_layers(count, s);
    CUDA_CHECK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t exec = nullptr;
    CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    cudaGraphDestroy(g);
    return exec;
  } catch (...) {
    // Whatever failed (a layer, the end of the capture, the instantiation), the stream leaves capture mode and
    // the error is cleared, so the caller's run layer by layer starts clean.
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
      cudaGraph_t partial = nullptr;
      cudaStreamEndCapture(s, &partial);
      if (partial) cudaGraphDestroy(partial);
    }
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    throw;
  }
}

// A capture that failed inside cuDNN can leave its handle failing later calls (seen on the H100: cudnnSetStream
// INTERNAL_ERROR after one, a crash after two): the libraries' handles are made again, as at construction.
void CudaEngine::State::renew_library_handles() {
  cudnn = CudnnHandle();
  cublas = CublasHandle();
  CUBLAS_CHECK(cublasSetWorkspace(cublas.get(), cublas_workspace.data(), kCublasWorkspace));
  CUBLAS_CHECK(cublasSetMathMode(cublas.get(), CUBLAS_DEFAULT_MATH));  // f32 stays f32 (no TF32)
  for (auto& l : layers)
    for (const int count : prepared_counts) l->prepare(count, cudnn.get());
}

// Captures `count`'s graph; on failure, counts it, renews the handles and says so (describe(), the log).
bool CudaEngine::State::try_capture(int count) {
  try {
    graph_by_count[static_cast<std::size_t>(count)] = capture(count);
    ++captures;
    capture_failures = 0;
    return true;
  } catch (const std::exception& e) {
    graphs_work = ++capture_failures < kCaptureAttempts;
    runs_until_capture = kCaptureBackoff;
    graph_note = std::string("CUDA graph capture failed ") + std::to_string(capture_failures) +
                 (graphs_work ? " time(s), trying again after " + std::to_string(kCaptureBackoff) + " runs: "
                              : " times in a row, running layer by layer: ") +
                 e.what();
    spdlog::warn("{}: {}", graph.source, graph_note);
    renew_library_handles();
    return false;
  }
}

void CudaEngine::State::run_after_failed_capture(const std::vector<TensorBinding>& in,
                                                 const std::vector<TensorBinding>& out, int count, cudaStream_t s) {
  try {
    run_all(in, out, count, s);
  } catch (const std::exception&) {
    // Seen on the H200 with cuDNN 9 while NVDEC sessions run: a capture that failed inside cuDNN leaves the next
    // launch on this thread failing once (EXECUTION_FAILED_CUDART). The inputs are untouched, so the batch runs
    // once more from them; a second failure is real and goes to the caller.
    cudaGetLastError();
    CUDA_CHECK(cudaStreamSynchronize(s));
    run_all(in, out, count, s);
  }
}

CudaEngine::CudaEngine(const Graph& prepared, const CudaEngineOptions& options)
    : state_(std::make_unique<State>(prepared, options)) {
  state_->build();
}

CudaEngine::~CudaEngine() = default;

const Graph& CudaEngine::graph() const { return state_->graph; }

std::vector<int> CudaEngine::run_counts() const {
  std::vector<int> counts;
  const int batch = static_cast<int>(state_->batch);
  for (int count = state_->partial_problem.empty() ? 1 : batch; count <= batch; ++count) counts.push_back(count);
  return counts;
}

void CudaEngine::warm_up(const std::vector<int>& counts) {
  State& st = *state_;
  const bool graphs = st.options.cuda_graph;
  for (const int count : counts) {
    if (count < 1 || count > st.batch)
      throw ModelError(st.graph.source + ": warm-up count " + std::to_string(count) + " is outside 1.." +
                       std::to_string(st.batch));
    if (count < st.batch && !st.partial_problem.empty()) continue;
    // Layer by layer first: the libraries load their kernels and make their plans outside any capture.
    st.prepare(count);
    st.bind({}, {}, false);
    st.run_layers(count, st.stream.get());
    st.eager_counts.insert(count);
  }
  CUDA_CHECK(cudaStreamSynchronize(st.stream.get()));
  if (!graphs) return;
  for (const int count : counts) {
    if (count < st.batch && !st.partial_problem.empty()) continue;
    // Nothing interferes before the sources open, but a reload warms up while the old pipeline's sources run:
    // a failed capture is tried again after a pause; one that keeps failing is left to the runs (see enqueue).
    for (int attempt = 1; !st.graph_by_count[static_cast<std::size_t>(count)]; ++attempt) {
      try {
        st.graph_by_count[static_cast<std::size_t>(count)] = st.capture(count);
        ++st.captures;
      } catch (const std::exception& e) {
        st.renew_library_handles();
        if (attempt == kWarmCaptureAttempts) {
          spdlog::warn("{}: no CUDA graph for batches of {} at warm-up ({} attempts; the last: {}): its runs capture "
                       "it later",
                       st.graph.source, count, attempt, e.what());
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10 * attempt));
      }
    }
  }
  st.runs_until_capture = 0;
  // A replay of each graph, so that nothing about a first launch is left to the first batch.
  for (const int count : counts)
    if (cudaGraphExec_t exec = st.graph_by_count[static_cast<std::size_t>(count)])
      CUDA_CHECK(cudaGraphLaunch(exec, st.stream.get()));
  CUDA_CHECK(cudaStreamSynchronize(st.stream.get()));
}

void CudaEngine::enqueue(const std::vector<TensorBinding>& inputs, const std::vector<TensorBinding>& outputs,
                         int count, gpu::StreamHandle stream) {
  State& st = *state_;
  const std::string& src = st.graph.source;
  if (inputs.size() != st.inputs.size() || outputs.size() != st.outputs.size())
    throw ModelError(src + ": enqueue got " + std::to_string(inputs.size()) + " inputs and " +
                     std::to_string(outputs.size()) + " outputs; the graph has " + std::to_string(st.inputs.size()) +
                     " and " + std::to_string(st.outputs.size()));
  if (count < 1 || count > st.batch)
    throw ModelError(src + ": count " + std::to_string(count) + " is outside 1.." + std::to_string(st.batch));
  if (count < st.batch && !st.partial_problem.empty())
    throw ModelError(src + ": runs of fewer than " + std::to_string(st.batch) + " items are not supported: " +
                     st.partial_problem);
  for (const auto* list : {&inputs, &outputs})
    for (const auto& b : *list)
      if (b.dtype == DType::u8 || b.data == nullptr)
        throw ModelError(src + ": bindings need device memory of f32, f16 or bf16");
  if (!stream) throw GpuError("CudaEngine::enqueue: the legacy default stream is not used; pass a stream");
  st.prepare(count);

  const bool use_graph = st.options.cuda_graph && st.graphs_work;
  // A graph runs on the engine's own buffers; layer by layer, bindings that need no conversion are used in place.
  st.bind(inputs, outputs, !use_graph);
  cudaGraphExec_t exec = use_graph ? st.graph_by_count[static_cast<std::size_t>(count)] : nullptr;
  if (use_graph && !exec) {
    if (st.runs_until_capture > 0) {
      --st.runs_until_capture;
    } else if (!st.eager_counts.count(count)) {
      st.eager_counts.insert(count);  // the first run at a count goes layer by layer, outside any capture
    } else if (st.try_capture(count)) {
      exec = st.graph_by_count[static_cast<std::size_t>(count)];
    } else {
      st.run_after_failed_capture(inputs, outputs, count, stream);
      return;
    }
  }
  if (!exec) {
    st.run_all(inputs, outputs, count, stream);
    return;
  }
  st.copy_in(inputs, count, stream);
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  st.copy_out(outputs, count, stream);
}

std::string CudaEngine::describe() const {
  const State& st = *state_;
  std::ostringstream s;
  int cudnn_version = static_cast<int>(cudnnGetVersion());
  s << "CUDA engine: " << st.graph.source << " on " << st.device_name << ", cuDNN " << cudnn_version << ", precision "
    << to_string(st.options.precision) << ", batch " << st.batch << ", activations NHWC\n";
  s << "  #  layer                                   op                  output              kernel\n";
  for (std::size_t i = 0; i < st.layers.size(); ++i) {
    const auto& l = *st.layers[i];
    const auto& node = st.graph.nodes[i];
    std::string line(120, ' ');
    auto put = [&](std::size_t col, const std::string& text) { line.replace(col, std::min(text.size(), line.size() - col), text); };
    put(0, std::to_string(i));
    put(5, l.name());
    put(45, l.op());
    put(65, to_string(st.graph.shape_of(node.outputs[0])));
    line.resize(85);
    s << line << l.kernel();
    if (l.workspace_bytes()) s << ", workspace " << megabytes(l.workspace_bytes());
    s << "\n";
  }
  s << "memory: weights " << megabytes(st.weight_bytes) << ", activations " << megabytes(st.arena.bytes())
    << " (one arena, shared by liveness), convolution workspace " << megabytes(st.workspace.bytes()) << ", scratch "
    << megabytes(st.scratch.bytes()) << ", cuBLAS workspace " << megabytes(st.cublas_workspace.bytes()) << "\n";
  s << "convolution algorithms: " << st.convs_measured << " measured, " << st.convs_cached << " from the cache"
    << (st.options.algo_cache.empty() ? " (no cache file)" : " (" + st.options.algo_cache + ")") << "\n";
  s << "CUDA graph: "
    << (!st.options.cuda_graph ? "off"
        : st.graphs_work       ? "on (" + std::to_string(st.captures) + " captured, one per batch size)"
                               : st.graph_note)
    << "\n";
  s << "partial batches: " << (st.partial_problem.empty() ? "yes" : "no (" + st.partial_problem + ")") << "\n";
  return s.str();
}

std::vector<std::pair<std::string, double>> CudaEngine::profile_layers(int iterations) {
  State& st = *state_;
  const int count = static_cast<int>(st.batch);
  iterations = std::max(iterations, 1);
  std::copy(st.base_ptr.begin(), st.base_ptr.end(), st.run_ptr.begin());
  const RunContext ctx = st.context(count, st.stream.get());
  for (auto& l : st.layers) l->run(ctx);  // warm
  cuda::StreamStopwatch stopwatch;
  std::vector<std::pair<std::string, double>> result;
  std::vector<double> times(static_cast<std::size_t>(iterations));
  for (auto& l : st.layers) {
    for (int it = 0; it < iterations; ++it)
      times[static_cast<std::size_t>(it)] = stopwatch.time_ms(st.stream.get(), [&] { l->run(ctx); });
    std::nth_element(times.begin(), times.begin() + iterations / 2, times.end());
    result.emplace_back(l->name() + " (" + l->op() + ")", times[static_cast<std::size_t>(iterations / 2)]);
  }
  return result;
}

}  // namespace sluice::nn
