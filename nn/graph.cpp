#include "nn/graph.hpp"

#include <algorithm>

#include "runtime/checked_math.hpp"

namespace sluice::nn {

std::int64_t element_count(const Shape& s) {
  // Shapes come from files: a product that overflows is an error, never a wrapped (small or negative) count.
  std::int64_t n = 1;
  for (auto d : s) {
    const auto next = checked_mul<std::int64_t>(n, d);
    if (!next) throw ModelError("shape " + to_string(s) + " has more elements than fit in 64 bits");
    n = *next;
  }
  return n;
}

std::string to_string(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ',';
    out += s[i] < 0 ? std::string("?") : std::to_string(s[i]);
  }
  out += ']';
  return out;
}

namespace {
template <typename T>
const T* typed(const Attributes& a, const std::string& name, const char* want) {
  auto it = a.values.find(name);
  if (it == a.values.end()) return nullptr;
  if (const T* v = std::get_if<T>(&it->second)) return v;
  throw ModelError("attribute '" + name + "' is not " + want);
}
}  // namespace

std::int64_t Attributes::i(const std::string& name, std::int64_t fallback) const {
  const auto* v = typed<std::int64_t>(*this, name, "an integer");
  return v ? *v : fallback;
}

float Attributes::f(const std::string& name, float fallback) const {
  auto it = values.find(name);
  if (it != values.end())
    if (const auto* n = std::get_if<std::int64_t>(&it->second)) return static_cast<float>(*n);
  const auto* v = typed<float>(*this, name, "a float");
  return v ? *v : fallback;
}

std::string Attributes::s(const std::string& name, const std::string& fallback) const {
  const auto* v = typed<std::string>(*this, name, "a string");
  return v ? *v : fallback;
}

std::vector<std::int64_t> Attributes::ints(const std::string& name, const std::vector<std::int64_t>& fallback) const {
  const auto* v = typed<std::vector<std::int64_t>>(*this, name, "a list of integers");
  return v ? *v : fallback;
}

std::vector<float> Attributes::floats(const std::string& name, const std::vector<float>& fallback) const {
  const auto* v = typed<std::vector<float>>(*this, name, "a list of floats");
  return v ? *v : fallback;
}

const Tensor* Attributes::tensor(const std::string& name) const { return typed<Tensor>(*this, name, "a tensor"); }

const Shape& Graph::shape_of(const std::string& value) const {
  if (auto c = constants.find(value); c != constants.end()) return c->second.shape;
  if (auto s = shapes.find(value); s != shapes.end()) return s->second;
  throw ModelError(source + ": no shape known for value '" + value + "'");
}

Tensor broadcast_tensor(const Tensor& t, const Shape& shape) {
  const std::size_t rank = shape.size(), lead = rank - std::min(rank, t.shape.size());
  if (t.shape.size() > rank) throw ModelError("cannot broadcast " + to_string(t.shape) + " to " + to_string(shape));
  std::vector<std::int64_t> stride(rank, 0);  // t's stride along each output dimension; 0 where it repeats
  std::int64_t step = 1;
  for (std::size_t d = rank; d-- > lead;) {
    const std::int64_t size = t.shape[d - lead];
    if (size != 1 && size != shape[d]) throw ModelError("cannot broadcast " + to_string(t.shape) + " to " + to_string(shape));
    stride[d] = size == 1 ? 0 : step;
    step *= size;
  }
  Tensor out;
  out.type = t.type;
  out.shape = shape;
  const std::int64_t count = element_count(shape);
  std::vector<std::int64_t> index(rank, 0);
  auto copy = [&](const auto& from, auto& to) {
    to.resize(static_cast<std::size_t>(count));
    std::int64_t offset = 0;
    for (std::int64_t i = 0; i < count; ++i) {
      to[static_cast<std::size_t>(i)] = from[static_cast<std::size_t>(offset)];
      for (std::size_t d = rank; d-- > 0;) {  // odometer: next index, offset kept in step
        offset += stride[d];
        if (++index[d] < shape[d]) break;
        offset -= stride[d] * shape[d];
        index[d] = 0;
      }
    }
  };
  if (t.type == ElementType::f32) copy(t.f32, out.f32);
  else copy(t.i64, out.i64);
  return out;
}

const std::vector<std::string>& supported_onnx_ops() {
  static const std::vector<std::string> ops = [] {
    std::vector<std::string> v;
    for (auto i = static_cast<int>(Op::unknown) + 1; i < static_cast<int>(Op::count_); ++i)
      if (has_flag(static_cast<Op>(i), kFromOnnx)) v.emplace_back(op_name(static_cast<Op>(i)));
    std::sort(v.begin(), v.end());
    return v;
  }();
  return ops;
}

}  // namespace sluice::nn
