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

const std::vector<std::string>& supported_onnx_ops() {
  static const std::vector<std::string> ops = [] {
    std::vector<std::string> v{
        // run by the backends (see the prepared form in graph.hpp)
        "Conv", "BatchNormalization", "Relu", "LeakyRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh",
        "Add", "Sub", "Mul", "Div", "MaxPool", "AveragePool", "GlobalAveragePool", "Flatten", "Reshape",
        "Transpose", "Squeeze", "Unsqueeze", "Gemm", "MatMul", "Concat", "Split", "Slice", "Softmax", "Resize",
        "Upsample", "Pad",
        // removed or folded by prepare()
        "Identity", "Dropout", "Constant", "Shape", "Gather", "Cast", "ConstantOfShape"};
    std::sort(v.begin(), v.end());
    return v;
  }();
  return ops;
}

}  // namespace sluice::nn
