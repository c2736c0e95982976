// ValueTable (where each value lives and how it is laid out) and BuildContext's uploads.
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>

#include "kernels/half.hpp"
#include "nn/cuda/layer.hpp"
#include "nn/elementwise_math.hpp"
#include "runtime/cuda_check.hpp"

namespace sluice::nn::cuda {

int ValueTable::add(ValueSlot slot) {
  if (slot.constant) slot.dtype = type_;
  const int id = static_cast<int>(slots_.size());
  index_[slot.name] = id;
  slots_.push_back(std::move(slot));
  return id;
}

int ValueTable::id(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw ModelError("nn/cuda: no value named '" + name + "'");
  return it->second;
}

std::set<std::string> nhwc_values(const Graph& graph) {
  auto rank_of = [&](const std::string& v) -> std::size_t {
    if (auto s = graph.shapes.find(v); s != graph.shapes.end()) return s->second.size();
    return 0;  // constants stay in ONNX layout
  };
  std::map<std::string, std::string> parent;  // union-find over 4-D activations
  std::function<std::string(const std::string&)> root = [&](const std::string& v) -> std::string {
    auto it = parent.find(v);
    if (it == parent.end() || it->second == v) return v;
    return it->second = root(it->second);
  };
  auto unite = [&](const std::string& a, const std::string& b) {
    if (rank_of(a) != 4 || rank_of(b) != 4 || graph.is_constant(a) || graph.is_constant(b)) return;
    const std::string ra = root(a), rb = root(b);
    if (ra != rb) parent[ra] = rb;
  };
  std::set<std::string> needs;  // values an NHWC kernel reads or writes
  for (const Node& n : graph.nodes) {
    const Op op = n.op;
    if (op == Op::Conv || op == Op::ConvTranspose || op == Op::MaxPool || op == Op::AveragePool || op == Op::GlobalAveragePool || op == Op::Resize) {
      for (const auto& v : n.inputs)
        if (!v.empty() && !graph.is_constant(v) && rank_of(v) == 4) needs.insert(v);
      for (const auto& v : n.outputs)
        if (rank_of(v) == 4) needs.insert(v);
    } else if (is_activation(op) || op == Op::BatchNormalization || unary_math_of(op) ||
               op == Op::Softmax || op == Op::LogSoftmax) {
      unite(n.inputs.at(0), n.outputs.at(0));  // (Log)Softmax: its kernel writes y at x's offsets
    } else if (op == Op::Linear && n.inputs.size() > 3 && !n.inputs[3].empty()) {
      unite(n.inputs[3], n.outputs.at(0));  // the residual Add it swallowed tied them; the product adds onto R
    } else if (binary_math_of(op)) {
      for (const auto& in : n.inputs)
        if (graph.shapes.count(in) && graph.shapes.count(n.outputs.at(0)) &&
            graph.shapes.at(in) == graph.shapes.at(n.outputs.at(0)))
          unite(in, n.outputs.at(0));
    }
  }
  std::set<std::string> nhwc_roots, out;
  for (const auto& v : needs) nhwc_roots.insert(root(v));
  for (const auto& [value, shape] : graph.shapes)
    if (shape.size() == 4 && !graph.is_constant(value) && nhwc_roots.count(root(value))) out.insert(value);
  return out;
}

Shape ValueTable::shape_at(int id, int count) const {
  Shape s = slot(id).shape;
  if (slot(id).batched) s[0] = count;
  return s;
}

std::vector<std::int64_t> ValueTable::strides(int id, const Shape& shape) const {
  const int rank = static_cast<int>(shape.size());
  std::vector<std::int64_t> stride(shape.size(), 1);
  if (slot(id).nhwc) {  // [N,C,H,W] held as N,H,W,C
    stride[1] = 1;
    stride[3] = shape[1];
    stride[2] = shape[1] * shape[3];
    stride[0] = shape[1] * shape[2] * shape[3];
    return stride;
  }
  for (int d = rank - 2; d >= 0; --d) stride[d] = stride[d + 1] * shape[d + 1];
  return stride;
}

View ValueTable::view(int id, int count) const {
  const Shape s = shape_at(id, count);
  if (const ValueSlot& w = slot(id); w.window_of >= 0) {  // a window of another value (a Slice read in place)
    View v = view(w.window_of, count);
    for (int d = 0; d < v.rank; ++d) {
      v.offset += w.window_starts[static_cast<std::size_t>(d)] * v.stride[d];
      v.stride[d] *= w.window_steps[static_cast<std::size_t>(d)];
      v.shape[d] = s[static_cast<std::size_t>(d)];
    }
    return v;
  }
  const auto st = strides(id, s);
  View v;
  v.rank = static_cast<int>(s.size());
  if (v.rank > kMaxRank) throw ModelError("nn/cuda: value '" + slot(id).name + "' has more than 6 dimensions");
  for (int d = 0; d < v.rank; ++d) {
    v.shape[d] = s[d];
    v.stride[d] = st[d];
  }
  return v;
}

std::vector<int> ValueTable::memory_order(int id) const {
  if (slot(id).nhwc) return {0, 2, 3, 1};
  std::vector<int> order(slot(id).shape.size());
  std::iota(order.begin(), order.end(), 0);
  return order;
}

void order_by_destination(View& dst, View& src) {
  std::vector<int> order(static_cast<std::size_t>(dst.rank));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return dst.stride[a] > dst.stride[b]; });
  View d = dst, s = src;
  for (int i = 0; i < dst.rank; ++i) {
    d.shape[i] = dst.shape[order[static_cast<std::size_t>(i)]];
    d.stride[i] = dst.stride[order[static_cast<std::size_t>(i)]];
    s.shape[i] = src.shape[order[static_cast<std::size_t>(i)]];
    s.stride[i] = src.stride[order[static_cast<std::size_t>(i)]];
  }
  dst = d;
  src = s;
}

void* BuildContext::upload(const std::vector<float>& data, bool as_f32) {
  const DType type = as_f32 ? DType::f32 : values.type();
  const std::size_t bytes = data.size() * dtype_bytes(type);
  std::vector<std::uint16_t> narrow;
  const void* host = data.data();
  if (type != DType::f32) {
    narrow.resize(data.size());
    for (std::size_t i = 0; i < data.size(); ++i)
      narrow[i] = type == DType::f16 ? kernels::float_to_half_bits(data[i]) : kernels::float_to_bf16_bits(data[i]);
    host = narrow.data();
  }
  weights.emplace_back(MemoryKind::device, bytes == 0 ? 1 : bytes);
  void* dst = weights.back().data();
  // Synchronous on purpose: construction may wait, and `narrow` must outlive the copy.
  CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  weight_bytes += bytes;
  return dst;
}

void* BuildContext::constant(const std::string& value) {
  ValueSlot& s = values.slot(values.id(value));
  if (!s.constant) throw ModelError("nn/cuda: value '" + value + "' is not a constant");
  if (!s.base) {
    const Tensor& t = graph.constants.at(value);
    if (t.type == ElementType::f32) {
      s.base = upload(t.f32);
    } else {
      std::vector<float> as_float(t.i64.begin(), t.i64.end());
      s.base = upload(as_float);
    }
  }
  return s.base;
}

const void* BuildContext::constant_as(const std::string& value, DType type) {
  if (type == values.type()) return constant(value);
  if (type != DType::f32) throw ModelError("nn/cuda: constant '" + value + "' asked for in an unexpected type");
  if (auto it = f32_constants.find(value); it != f32_constants.end()) return it->second;
  const Tensor& t = graph.constants.at(value);
  void* p = upload(t.type == ElementType::f32 ? t.f32 : std::vector<float>(t.i64.begin(), t.i64.end()), true);
  f32_constants[value] = p;
  return p;
}

}  // namespace sluice::nn::cuda
