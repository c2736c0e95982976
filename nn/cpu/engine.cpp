#include "nn/cpu/engine.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <map>

#include "nn/cpu/layer.hpp"
#include "nn/cpu/onednn.hpp"
#include "nn/memory_plan.hpp"
#include "runtime/bounded_file.hpp"
#include "runtime/checked_math.hpp"

namespace sluice::nn {

namespace {

// Where a value's data is during a run; a view lies in another value's memory.
enum class Home { graph_input, graph_output, arena, constant, view };

struct Value {
  Home home = Home::arena;
  std::size_t index = 0;  // graph input/output position, arena request, or (a view) the value whose memory it shares
  std::int64_t floats = 0;
  std::int64_t offset = 0;  // a view's start in that value, in floats
};

struct Step {
  std::unique_ptr<cpu::Layer> layer;
  std::string label;  // "name (Op)", for profiles
  std::vector<int> inputs;  // value ids; -1 for an absent optional input
  std::vector<int> outputs;
  // Gathered pointers, sized once so that a run allocates nothing.
  std::vector<const float*> input_ptrs;
  std::vector<float*> output_ptrs;
};

// A graph output that no node writes (it is a graph input or a constant) or that repeats another output.
struct OutputCopy {
  int value;
  std::size_t output;
};

}  // namespace

// Floats on a 64-byte boundary (oneDNN's kernels and AVX-512 loads want whole cache lines).
class AlignedFloats {
 public:
  void assign(std::size_t floats) {
    const std::size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    data_.reset(bytes ? static_cast<float*>(std::aligned_alloc(64, bytes)) : nullptr);
    if (bytes && !data_) throw std::bad_alloc();
    std::fill(data_.get(), data_.get() + floats, 0.0f);
  }
  float* data() const { return data_.get(); }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> data_;
};

struct CpuEngine::State {
  Graph graph;
  std::map<std::string, std::vector<float>> integer_constants_as_f32;
  std::vector<Value> values;
  std::vector<float*> value_ptrs;  // per value id, refreshed for graph inputs/outputs on every run
  std::vector<Step> steps;
  std::vector<OutputCopy> output_copies;
  AlignedFloats arena;
  AlignedFloats scratch;
  int threads = 0;

  // A view's pointer from its holder's (a holder is never a view, and comes first).
  void point_views() {
    for (std::size_t v = 0; v < values.size(); ++v)
      if (values[v].home == Home::view) value_ptrs[v] = value_ptrs[values[v].index] + values[v].offset;
  }
};

CpuEngine::CpuEngine(Graph prepared, CpuOptions options) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.graph = std::move(prepared);
  const Graph& g = s.graph;
  const cpu::LayoutPlan layouts = cpu::plan_layouts(g, options.channels_last);
  s.threads = options.threads;
  auto fail = [&](const std::string& what) { throw ModelError(g.source + ": " + what); };

  std::map<std::string, int> ids;
  auto add_value = [&](const std::string& name, Value v) {
    ids[name] = static_cast<int>(s.values.size());
    s.values.push_back(v);
    s.value_ptrs.push_back(nullptr);
    return ids[name];
  };
  auto add_constant = [&](const std::string& name, const Tensor& c) {
    const int id = add_value(name, {Home::constant, 0, c.elements()});
    if (c.type == ElementType::f32) {
      s.value_ptrs[static_cast<std::size_t>(id)] = const_cast<float*>(c.f32.data());
    } else {  // integer data used as data: the prepared form keeps it as i64 constants only
      auto& converted = s.integer_constants_as_f32[name];
      converted.assign(c.i64.begin(), c.i64.end());
      s.value_ptrs[static_cast<std::size_t>(id)] = converted.data();
    }
    return id;
  };

  for (std::size_t i = 0; i < g.inputs.size(); ++i) {
    const auto& in = g.inputs[i];
    if (ids.count(in.name)) fail("graph input '" + in.name + "' is listed twice");
    for (auto d : in.shape)
      if (d < 0) fail("graph input '" + in.name + "' has shape " + to_string(in.shape) + " (the graph is not prepared)");
    add_value(in.name, {Home::graph_input, i, element_count(in.shape)});
  }

  // Which graph output each value is written to directly (its first mention); the rest are copied.
  std::map<std::string, std::size_t> output_slot;
  for (std::size_t o = 0; o < g.outputs.size(); ++o) output_slot.emplace(g.outputs[o].name, o);

  std::vector<BufferRequest> requests;  // sizes in floats
  std::vector<int> request_value;
  for (std::size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    Step step;
    step.layer = cpu::make_layer(g, node, layouts);
    step.label = node.name + " (" + std::string(op_name(node.op)) + ")";
    for (const std::string& name : node.inputs) {
      if (name.empty()) {
        step.inputs.push_back(-1);
        continue;
      }
      auto known = ids.find(name);
      if (known == ids.end()) {
        auto c = g.constants.find(name);
        if (c == g.constants.end())
          fail(node.where() + ": input '" + name + "' is neither a graph input, a constant nor made by an earlier node");
        step.inputs.push_back(add_constant(name, c->second));
        continue;
      }
      const Value& v = s.values[static_cast<std::size_t>(known->second)];
      const Value& holder = v.home == Home::view ? s.values[v.index] : v;  // a view keeps its holder's memory alive
      if (holder.home == Home::arena) requests[holder.index].last_step = static_cast<int>(n);
      step.inputs.push_back(known->second);
    }
    // A layer whose output is a block of its input's memory (Reshape, ...): the output is a view of the input's
    // holder, unless it must be written to a graph output.
    const auto view = step.layer->view_offset();
    if (view && !step.inputs.empty() && step.inputs[0] >= 0 && !output_slot.count(node.outputs[0]) &&
        !ids.count(node.outputs[0]) && !g.is_constant(node.outputs[0])) {
      const Value& source = s.values[static_cast<std::size_t>(step.inputs[0])];
      const bool nested = source.home == Home::view;
      add_value(node.outputs[0], {Home::view, nested ? source.index : static_cast<std::size_t>(step.inputs[0]),
                                  element_count(g.shape_of(node.outputs[0])), (nested ? source.offset : 0) + *view});
      continue;
    }
    for (const std::string& name : node.outputs) {
      if (ids.count(name) || g.is_constant(name)) fail(node.where() + ": output '" + name + "' is written twice");
      const std::int64_t floats = element_count(g.shape_of(name));
      auto slot = output_slot.find(name);
      int id;
      if (slot != output_slot.end()) {
        id = add_value(name, {Home::graph_output, slot->second, floats});
      } else {
        id = add_value(name, {Home::arena, requests.size(), floats});
        requests.push_back({static_cast<std::size_t>(floats), static_cast<int>(n), static_cast<int>(n)});
        request_value.push_back(id);
      }
      step.outputs.push_back(id);
    }
    step.input_ptrs.resize(step.inputs.size());
    step.output_ptrs.resize(step.outputs.size());
    s.steps.push_back(std::move(step));
  }

  for (std::size_t o = 0; o < g.outputs.size(); ++o) {
    const std::string& name = g.outputs[o].name;
    auto id = ids.find(name);
    if (id == ids.end()) {
      auto c = g.constants.find(name);
      if (c == g.constants.end()) fail("graph output '" + name + "' is not made by any node");
      s.output_copies.push_back({add_constant(name, c->second), o});
      continue;
    }
    const Value& v = s.values[static_cast<std::size_t>(id->second)];
    if (!(v.home == Home::graph_output && v.index == o)) s.output_copies.push_back({id->second, o});
  }

  constexpr std::size_t kAlignFloats = 16;  // 64 bytes: a cache line, and full AVX-512 vectors
  const MemoryPlan plan = plan_memory(requests, kAlignFloats);
  std::size_t scratch = 0;
  for (const Step& step : s.steps) scratch = std::max(scratch, step.layer->scratch_floats());
  // Refuse a model this machine cannot hold with a message, instead of a bare std::bad_alloc (or the OOM killer).
  const auto floats = checked_add(plan.arena, scratch);
  const auto bytes = floats ? checked_mul(*floats, sizeof(float)) : std::nullopt;
  const std::uint64_t memory = host_memory_bytes();
  if (!bytes || (memory > 0 && *bytes > memory))
    fail("running it needs " + (bytes ? describe_bytes(*bytes) : std::string("more than 2^64 bytes")) +
         " of working memory (arena and scratch), more than this machine's " + describe_bytes(memory));
  s.arena.assign(plan.arena);
  for (std::size_t r = 0; r < requests.size(); ++r)
    s.value_ptrs[static_cast<std::size_t>(request_value[r])] = s.arena.data() + plan.offsets[r];
  s.scratch.assign(scratch);
  s.point_views();
}

CpuEngine::~CpuEngine() = default;
CpuEngine::CpuEngine(CpuEngine&&) noexcept = default;
CpuEngine& CpuEngine::operator=(CpuEngine&&) noexcept = default;

const Graph& CpuEngine::graph() const { return state_->graph; }

void CpuEngine::run(const std::vector<const float*>& inputs, const std::vector<float*>& outputs) {
  State& s = *state_;
  const Graph& g = s.graph;
  if (inputs.size() != g.inputs.size() || outputs.size() != g.outputs.size())
    throw ModelError(g.source + ": run() got " + std::to_string(inputs.size()) + " inputs and " +
                     std::to_string(outputs.size()) + " outputs, the graph has " + std::to_string(g.inputs.size()) +
                     " and " + std::to_string(g.outputs.size()));
  if (s.threads > 0) cpu::set_openmp_threads(s.threads);
  for (std::size_t v = 0; v < s.values.size(); ++v) {
    const Value& value = s.values[v];
    if (value.home == Home::graph_input) s.value_ptrs[v] = const_cast<float*>(inputs[value.index]);
    if (value.home == Home::graph_output) s.value_ptrs[v] = outputs[value.index];
  }
  s.point_views();  // views of graph inputs and outputs move with them
  for (Step& step : s.steps) {
    for (std::size_t i = 0; i < step.inputs.size(); ++i)
      step.input_ptrs[i] = step.inputs[i] < 0 ? nullptr : s.value_ptrs[static_cast<std::size_t>(step.inputs[i])];
    for (std::size_t o = 0; o < step.outputs.size(); ++o)
      step.output_ptrs[o] = s.value_ptrs[static_cast<std::size_t>(step.outputs[o])];
    step.layer->run(step.input_ptrs.data(), step.output_ptrs.data(), s.scratch.data());
  }
  for (const OutputCopy& copy : s.output_copies) {
    const float* src = s.value_ptrs[static_cast<std::size_t>(copy.value)];
    std::memcpy(outputs[copy.output], src,
                static_cast<std::size_t>(s.values[static_cast<std::size_t>(copy.value)].floats) * sizeof(float));
  }
}

std::vector<std::pair<std::string, double>> CpuEngine::profile_layers(const std::vector<const float*>& inputs,
                                                                      const std::vector<float*>& outputs,
                                                                      int iterations) {
  run(inputs, outputs);  // every value filled, and each step's pointers gathered
  iterations = std::max(iterations, 1);
  State& s = *state_;
  std::vector<std::pair<std::string, double>> result;
  std::vector<double> times(static_cast<std::size_t>(iterations));
  // A layer's inputs are still intact when it runs again: the memory plan reuses a value's memory only after
  // its last reader, and the layers run again in their order.
  for (Step& step : s.steps) {
    for (double& t : times) {
      const auto start = std::chrono::steady_clock::now();
      step.layer->run(step.input_ptrs.data(), step.output_ptrs.data(), s.scratch.data());
      t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    }
    std::nth_element(times.begin(), times.begin() + iterations / 2, times.end());
    result.emplace_back(step.label, times[static_cast<std::size_t>(iterations / 2)]);
  }
  return result;
}

}  // namespace sluice::nn
