// Evaluates a canonical node whose inputs are all constants, so that it never has to run: shape arithmetic
// (Gather/Concat/Cast/ConstantOfShape chains from exporters), weight reshapes and transposes, small
// elementwise and matrix products. Straightforward loops: constants are small and this runs once.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "kernels/half.hpp"
#include "nn/elementwise_math.hpp"
#include "nn/passes/pass_support.hpp"
#include "nn/ranking.hpp"
#include "nn/sampling_math.hpp"
#include "runtime/checked_math.hpp"

namespace sluice::nn::passes {
namespace {

using Ints = std::vector<std::int64_t>;

Ints strides_of(const Shape& shape) {
  Ints strides(shape.size(), 1);
  for (std::size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

// Calls visit(index) for every position of `shape` in C order.
template <typename Visit>
void for_each_index(const Shape& shape, Visit visit) {
  if (element_count(shape) == 0) return;
  Ints index(shape.size(), 0);
  while (true) {
    visit(index);
    std::size_t d = shape.size();
    while (d > 0) {
      if (++index[d - 1] < shape[d - 1]) break;
      index[--d] = 0;
    }
    if (d == 0) return;
  }
}

Tensor empty_like(ElementType type, Shape shape) {
  Tensor t;
  t.type = type;
  t.shape = std::move(shape);
  if (type == ElementType::f32) t.f32.resize(static_cast<std::size_t>(t.elements()));
  else t.i64.resize(static_cast<std::size_t>(t.elements()));
  return t;
}

// Calls f(input values, output values) with the typed vectors of two tensors of the same element type.
template <typename F>
void typed(const Tensor& from, Tensor& to, F f) {
  if (from.type == ElementType::f32) f(from.f32, to.f32);
  else f(from.i64, to.i64);
}

const Tensor& constant(const Graph& g, const Node& n, std::size_t index) { return g.constants.at(n.inputs.at(index)); }

// Output `out` gathers input element at in_offset(output index) for every output position.
template <typename Offset>
Tensor remap(const Tensor& x, Shape out_shape, Offset in_offset) {
  Tensor out = empty_like(x.type, std::move(out_shape));
  typed(x, out, [&](const auto& src, auto& dst) {
    std::size_t next = 0;
    for_each_index(out.shape, [&](const Ints& idx) { dst[next++] = src[static_cast<std::size_t>(in_offset(idx))]; });
  });
  return out;
}

Tensor transpose(const Tensor& x, const Ints& perm) {
  const Ints in_strides = strides_of(x.shape);
  Shape out_shape;
  for (auto p : perm) out_shape.push_back(x.shape[static_cast<std::size_t>(p)]);
  return remap(x, out_shape, [&](const Ints& idx) {
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < idx.size(); ++i) offset += idx[i] * in_strides[static_cast<std::size_t>(perm[i])];
    return offset;
  });
}

Tensor slice(const Tensor& x, const Node& n, const Shape& out_shape) {
  const Ints starts = n.attrs.ints("starts"), steps = n.attrs.ints("steps"), in_strides = strides_of(x.shape);
  return remap(x, out_shape, [&](const Ints& idx) {
    std::int64_t offset = 0;
    for (std::size_t d = 0; d < idx.size(); ++d) offset += (starts[d] + idx[d] * steps[d]) * in_strides[d];
    return offset;
  });
}

Tensor pad(const Tensor& x, const Node& n, const Shape& out_shape) {
  const Ints pads = n.attrs.ints("pads"), in_strides = strides_of(x.shape);
  const std::string mode = n.attrs.s("mode", "constant");
  const float value = n.attrs.f("value", 0.f);
  Tensor out = empty_like(x.type, out_shape);
  typed(x, out, [&](const auto& src, auto& dst) {
    std::size_t next = 0;
    for_each_index(out.shape, [&](const Ints& idx) {
      std::int64_t offset = 0;
      bool outside = false;
      for (std::size_t d = 0; d < idx.size(); ++d) {
        const std::int64_t dim = x.shape[d];
        std::int64_t s = idx[d] - pads[d];
        if (s < 0 || s >= dim) {
          if (mode == "edge") s = std::clamp<std::int64_t>(s, 0, dim - 1);
          else if (mode == "reflect") s = s < 0 ? -s : 2 * (dim - 1) - s;
          else outside = true;
        }
        offset += s * in_strides[d];
      }
      using T = typename std::decay_t<decltype(dst)>::value_type;
      dst[next++] = outside ? static_cast<T>(value) : src[static_cast<std::size_t>(offset)];
    });
  });
  return out;
}

Tensor concat(const Graph& g, const Node& n, const Shape& out_shape) {
  const auto axis = static_cast<std::size_t>(n.attrs.i("axis", 0));
  const ElementType type = constant(g, n, 0).type;
  Tensor out = empty_like(type, out_shape);
  const std::int64_t outer = element_count(Shape(out_shape.begin(), out_shape.begin() + static_cast<std::ptrdiff_t>(axis)));
  const std::int64_t inner = element_count(Shape(out_shape.begin() + static_cast<std::ptrdiff_t>(axis) + 1, out_shape.end()));
  std::int64_t at = 0;  // position along the axis where the next input starts
  for (std::size_t i = 0; i < n.inputs.size(); ++i) {
    const Tensor& part = constant(g, n, i);
    if (part.type != type) fail(g, n, "inputs mix integer and floating point data");
    const std::int64_t block = part.shape[axis] * inner;
    typed(part, out, [&](const auto& src, auto& dst) {
      for (std::int64_t o = 0; o < outer; ++o)
        std::copy_n(src.begin() + o * block, block, dst.begin() + (o * out_shape[axis] + at) * inner);
    });
    at += part.shape[axis];
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, const Node& n, const std::vector<Shape>& shapes) {
  const auto axis = static_cast<std::size_t>(n.attrs.i("axis", 0));
  std::vector<Tensor> parts;
  std::int64_t at = 0;
  for (const Shape& s : shapes) {
    Shape starts(x.shape.size(), 0);
    starts[axis] = at;
    const Ints in_strides = strides_of(x.shape);
    parts.push_back(remap(x, s, [&](const Ints& idx) {
      std::int64_t offset = 0;
      for (std::size_t d = 0; d < idx.size(); ++d) offset += (starts[d] + idx[d]) * in_strides[d];
      return offset;
    }));
    at += s[axis];
  }
  return parts;
}

Tensor gather(const Graph& g, const Node& n, const Shape& out_shape) {
  const Tensor& data = constant(g, n, 0);
  const Ints indices = as_ints(constant(g, n, 1));
  const auto axis = static_cast<std::size_t>(normalize_axis(g, n, n.attrs.i("axis", 0), static_cast<std::int64_t>(data.shape.size())));
  const std::int64_t dim = data.shape[axis];
  const std::int64_t outer = element_count(Shape(data.shape.begin(), data.shape.begin() + static_cast<std::ptrdiff_t>(axis)));
  const std::int64_t inner = element_count(Shape(data.shape.begin() + static_cast<std::ptrdiff_t>(axis) + 1, data.shape.end()));
  Tensor out = empty_like(data.type, out_shape);
  typed(data, out, [&](const auto& src, auto& dst) {
    auto next = dst.begin();
    for (std::int64_t o = 0; o < outer; ++o)
      for (auto index : indices) {
        if (index < -dim || index >= dim) fail(g, n, "index " + std::to_string(index) + " is out of range for " + std::to_string(dim));
        const std::int64_t row = index < 0 ? index + dim : index;
        next = std::copy_n(src.begin() + (o * dim + row) * inner, inner, next);
      }
  });
  return out;
}

// GatherElements: element idx of the output reads data at idx with the axis coordinate taken from indices[idx]
// (canonicalize checked the constant indices against the axis).
Tensor gather_elements(const Graph& g, const Node& n, const Shape& out_shape) {
  const Tensor& data = constant(g, n, 0);
  const Ints indices = as_ints(constant(g, n, 1));
  const auto axis = static_cast<std::size_t>(n.attrs.i("axis", 0));
  const std::int64_t dim = data.shape.at(axis);
  const Ints strides = strides_of(data.shape);
  std::size_t next = 0;
  return remap(data, out_shape, [&](const Ints& idx) {
    const std::int64_t i = indices[next++];
    if (i < -dim || i >= dim) fail(g, n, "index " + std::to_string(i) + " is out of range for " + std::to_string(dim));
    std::int64_t offset = 0;
    for (std::size_t d = 0; d < idx.size(); ++d) offset += (d == axis ? (i < 0 ? i + dim : i) : idx[d]) * strides[d];
    return offset;
  });
}

// GridSample on constants: the backends' formulas (nn/sampling_math.hpp).
Tensor grid_sample(const Graph& g, const Node& n, const Shape& out_shape) {
  const Tensor& x = constant(g, n, 0);
  if (x.type != ElementType::f32 || constant(g, n, 1).type != ElementType::f32) fail(g, n, "needs floating point data");
  const std::vector<float> grid = as_floats(constant(g, n, 1));
  const bool nearest = n.attrs.s("mode", "bilinear") == "nearest", align = n.attrs.i("align_corners", 0) != 0;
  const std::string padding_mode = n.attrs.s("padding_mode", "zeros");
  const GridSamplePadding padding = padding_mode == "border"       ? GridSamplePadding::border
                                    : padding_mode == "reflection" ? GridSamplePadding::reflection
                                                                   : GridSamplePadding::zeros;
  const std::int64_t N = out_shape[0], C = out_shape[1], Ho = out_shape[2], Wo = out_shape[3];
  const int H = static_cast<int>(x.shape[2]), W = static_cast<int>(x.shape[3]);
  Tensor out = empty_like(ElementType::f32, out_shape);
  std::size_t next = 0;
  for (std::int64_t b = 0; b < N; ++b)
    for (std::int64_t c = 0; c < C; ++c) {
      const float* plane = x.f32.data() + (b * C + c) * H * W;
      for (std::int64_t oy = 0; oy < Ho; ++oy)
        for (std::int64_t ox = 0; ox < Wo; ++ox) {
          const float* at = grid.data() + ((b * Ho + oy) * Wo + ox) * 2;
          out.f32[next++] = grid_sample_at(at[0], at[1], H, W, nearest, padding, align,
                                           [&](int iy, int ix) { return plane[iy * W + ix]; });
        }
    }
  return out;
}

Tensor cast(const Graph& g, const Node& n) {
  const Tensor& x = constant(g, n, 0);
  const auto to = n.attrs.i("to", 1);
  Tensor out;
  out.shape = x.shape;
  switch (to) {
    case 1: case 11: out.f32 = as_floats(x); break;  // float, double
    case 10:  // float16: round like the model would
      for (float v : as_floats(x)) out.f32.push_back(kernels::half_bits_to_float(kernels::float_to_half_bits(v)));
      break;
    case 16:
      for (float v : as_floats(x)) out.f32.push_back(kernels::bf16_bits_to_float(kernels::float_to_bf16_bits(v)));
      break;
    case 9:  // bool
      out.type = ElementType::i64;
      if (x.type == ElementType::i64) for (auto v : x.i64) out.i64.push_back(v != 0);
      else for (float v : x.f32) out.i64.push_back(v != 0.f);
      break;
    case 2: case 3: case 4: case 5: case 6: case 7: case 12: case 13:  // integers
      out.type = ElementType::i64;
      out.i64 = as_ints(x);
      break;
    default: fail(g, n, "cast to data type " + std::to_string(to) + " is not supported");
  }
  return out;
}

// A value folded at prepare time is held in memory as a constant: at most kMaxFoldedElements of it.
void check_folded_shape(const Graph& g, const Node& n, const Shape& shape) {
  const auto count = checked_product<std::int64_t>(shape);
  if (!count || *count > kMaxFoldedElements)
    fail(g, n, "folding it would make a constant of shape " + to_string(shape) + ", more than the " +
                   std::to_string(kMaxFoldedElements) + " elements a folded constant may have");
}

// Multiply-adds of a folded Gemm/MatMul: at most kMaxFoldWork, so that prepare cannot be made to run for hours.
void check_fold_work(const Graph& g, const Node& n, const Shape& out_shape, std::int64_t inner) {
  const auto count = checked_product<std::int64_t>(out_shape);
  const auto work = count ? checked_mul(*count, std::max<std::int64_t>(inner, 1)) : std::nullopt;
  if (!work || *work > kMaxFoldWork)
    fail(g, n, "folding it at prepare time would take more than " + std::to_string(kMaxFoldWork) + " multiply-adds");
}

Tensor constant_of_shape(const Graph& g, const Node& n) {
  const Ints dims = as_ints(constant(g, n, 0));
  Tensor fill;
  fill.f32 = {0.f};
  if (const Tensor* v = n.attrs.tensor("value")) fill = *v;
  if (fill.elements() != 1) fail(g, n, "value must hold one element");
  if (std::any_of(dims.begin(), dims.end(), [](auto d) { return d < 0; })) fail(g, n, "negative dimension in [" + join_ints(dims) + "]");
  check_folded_shape(g, n, dims);
  Tensor out = empty_like(fill.type, dims);
  if (fill.type == ElementType::f32) std::fill(out.f32.begin(), out.f32.end(), fill.f32[0]);
  else std::fill(out.i64.begin(), out.i64.end(), fill.i64[0]);
  return out;
}

// Offset into a broadcast operand of shape `s` for an output index (s right-aligned to the output).
std::int64_t broadcast_offset(const Ints& idx, const Shape& s, const Ints& strides) {
  std::int64_t offset = 0;
  const std::size_t lead = idx.size() - s.size();
  for (std::size_t d = 0; d < s.size(); ++d)
    if (s[d] != 1) offset += idx[lead + d] * strides[d];
  return offset;
}

// Mod of integers: the remainder takes the divisor's sign (fmod=0, Python's %) or the dividend's (fmod=1, C's %).
std::int64_t integer_mod(const Graph& g, const Node& n, std::int64_t l, std::int64_t r) {
  if (r == 0) fail(g, n, "integer Mod by zero");
  if (r == -1) return 0;  // also INT64_MIN % -1, which would trap
  std::int64_t m = l % r;
  if (n.attrs.i("fmod", 0) == 0 && m != 0 && ((m < 0) != (r < 0))) m += r;
  return m;
}

Tensor binary(const Graph& g, const Node& n, const Shape& out_shape) {
  const Tensor& a = constant(g, n, 0);
  const Tensor& b = constant(g, n, 1);
  if (a.type != b.type) fail(g, n, "inputs mix integer and floating point data");
  const Ints sa = strides_of(a.shape), sb = strides_of(b.shape);
  Tensor out = empty_like(a.type, out_shape);
  const std::optional<BinaryMath> math = binary_math_of(n.op);  // looked up once, not per element (Mod has none)
  auto compute = [&](const auto& x, const auto& y, auto& z) {
    using T = typename std::decay_t<decltype(z)>::value_type;
    std::size_t next = 0;
    for_each_index(out_shape, [&](const Ints& idx) {
      const T l = x[static_cast<std::size_t>(broadcast_offset(idx, a.shape, sa))];
      const T r = y[static_cast<std::size_t>(broadcast_offset(idx, b.shape, sb))];
      T v{};
      if constexpr (std::is_integral_v<T>) {  // shape arithmetic from the file: overflow is an error
        std::optional<T> result;
        if (n.op == Op::Max || n.op == Op::Min) result = n.op == Op::Max ? std::max(l, r) : std::min(l, r);
        else if (n.op == Op::Mod) result = integer_mod(g, n, l, r);
        else if (n.op == Op::Pow) fail(g, n, "needs floating point data");
        else if (n.op == Op::Add) result = checked_add(l, r);
        else if (n.op == Op::Sub) result = checked_sub(l, r);
        else if (n.op == Op::Mul) result = checked_mul(l, r);
        else if (r == 0) fail(g, n, "integer division by zero");
        else if (!(r == -1 && l == std::numeric_limits<T>::min())) result = l / r;
        if (!result) fail(g, n, "integer " + op_name(n.op) + " of " + std::to_string(l) + " and " + std::to_string(r) + " overflows");
        v = *result;
      } else if (n.op == Op::Mod) {
        v = std::fmod(l, r);  // ONNX requires fmod=1 for floating point: the sign of the dividend
      } else {
        v = apply_binary_math(*math, l, r);
      }
      z[next++] = v;
    });
  };
  if (a.type == ElementType::f32) compute(a.f32, b.f32, out.f32);
  else compute(a.i64, b.i64, out.i64);
  return out;
}

// The activation ops: nn/activation_math.hpp's host formulas, the op table's parameter names and defaults.
Tensor unary(const Graph& g, const Node& n) {
  const ActivationParams act = activation_params(n.op, n.attrs);
  Tensor out = constant(g, n, 0);
  if (out.type == ElementType::i64) {
    if (n.op != Op::Clip && n.op != Op::Relu) fail(g, n, "needs floating point data");
    for (auto& v : out.i64) v = static_cast<std::int64_t>(nn::activate(act, static_cast<float>(v)));
    return out;
  }
  for (auto& v : out.f32) v = nn::activate(act, v);
  return out;
}

const std::vector<float>& floats(const Graph& g, const Node& n, std::size_t index) {
  const Tensor& t = constant(g, n, index);
  if (t.type != ElementType::f32) fail(g, n, "input '" + n.inputs[index] + "' must be floating point");
  return t.f32;
}

// Softmax, or its logarithm (LogSoftmax).
Tensor softmax(const Graph& g, const Node& n, bool log) {
  Tensor out = constant(g, n, 0);
  out.f32 = floats(g, n, 0);
  const auto axis = static_cast<std::size_t>(n.attrs.i("axis", 0));
  const bool coerce = n.attrs.i("coerce_2d", 0) != 0;
  const Shape& s = out.shape;
  const std::int64_t outer = element_count(Shape(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(axis)));
  const std::int64_t dim = coerce ? element_count(Shape(s.begin() + static_cast<std::ptrdiff_t>(axis), s.end())) : s[axis];
  const std::int64_t inner = coerce ? 1 : element_count(Shape(s.begin() + static_cast<std::ptrdiff_t>(axis) + 1, s.end()));
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      auto at = [&](std::int64_t k) -> float& { return out.f32[static_cast<std::size_t>((o * dim + k) * inner + i)]; };
      float top = -INFINITY, sum = 0.f;
      for (std::int64_t k = 0; k < dim; ++k) top = std::max(top, at(k));
      for (std::int64_t k = 0; k < dim; ++k) sum += std::exp(at(k) - top);
      const float log_sum = std::log(sum);  // log softmax = x - max - log(sum): no log of an underflowed 0
      for (std::int64_t k = 0; k < dim; ++k) at(k) = log ? at(k) - top - log_sum : std::exp(at(k) - top) / sum;
    }
  return out;
}

// The rows along `axis` of a constant: outer x length x inner, as Softmax's (without coerce_2d).
struct AxisRows {
  std::int64_t outer, length, inner;
};
AxisRows rows_along(const Shape& s, std::int64_t axis) {
  const auto split = s.begin() + static_cast<std::ptrdiff_t>(axis);
  return {element_count(Shape(s.begin(), split)), *split, element_count(Shape(split + 1, s.end()))};
}

std::vector<double> as_doubles(const Tensor& t);

// ArgMax/ArgMin of a constant (integer data too), as i64 indices (nn/ranking.hpp's order).
Tensor arg_extreme(const Graph& g, const Node& n, const Shape& out_shape) {
  const Tensor& x = constant(g, n, 0);
  const std::vector<double> v = as_doubles(x);
  const RankOrder order = arg_extreme_order(n.op == Op::ArgMax, n.attrs.i("select_last_index", 0) != 0);
  const AxisRows r = rows_along(x.shape, n.attrs.i("axis", 0));
  Tensor out = empty_like(ElementType::i64, out_shape);
  for (std::int64_t o = 0; o < r.outer; ++o)
    for (std::int64_t i = 0; i < r.inner; ++i) {
      auto at = [&](std::int64_t k) { return static_cast<float>(v[static_cast<std::size_t>((o * r.length + k) * r.inner + i)]); };
      std::int64_t best = 0;
      for (std::int64_t k = 1; k < r.length; ++k)
        if (comes_before(at(k), k, at(best), best, order)) best = k;
      out.i64[static_cast<std::size_t>(o * r.inner + i)] = best;
    }
  return out;
}

// TopK of a constant: Values (the input's type) and Indices (i64), sorted.
std::vector<Tensor> top_k(const Graph& g, const Node& n, const Shape& out_shape) {
  const Tensor& x = constant(g, n, 0);
  const RankOrder order = top_k_order(n.attrs.i("largest", 1) != 0);
  const std::int64_t k = n.attrs.i("k", 1);
  const AxisRows r = rows_along(x.shape, n.attrs.i("axis", 0));
  const std::vector<double> v = as_doubles(x);
  Tensor values = empty_like(x.type, out_shape), indices = empty_like(ElementType::i64, out_shape);
  std::vector<std::int64_t> row(static_cast<std::size_t>(r.length));
  for (std::int64_t o = 0; o < r.outer; ++o)
    for (std::int64_t i = 0; i < r.inner; ++i) {
      auto offset = [&](std::int64_t at) { return static_cast<std::size_t>((o * r.length + at) * r.inner + i); };
      std::iota(row.begin(), row.end(), 0);
      std::stable_sort(row.begin(), row.end(), [&](std::int64_t a, std::int64_t b) {
        return comes_before(static_cast<float>(v[offset(a)]), a, static_cast<float>(v[offset(b)]), b, order);
      });
      for (std::int64_t j = 0; j < k; ++j) {
        const auto to = static_cast<std::size_t>((o * k + j) * r.inner + i);
        indices.i64[to] = row[static_cast<std::size_t>(j)];
        if (x.type == ElementType::f32) values.f32[to] = x.f32[offset(row[static_cast<std::size_t>(j)])];
        else values.i64[to] = x.i64[offset(row[static_cast<std::size_t>(j)])];
      }
    }
  return {std::move(values), std::move(indices)};
}

Tensor gemm(const Graph& g, const Node& n, const Shape& out_shape) {
  const auto& a = floats(g, n, 0);
  const auto& b = floats(g, n, 1);
  const Shape& as = constant(g, n, 0).shape;
  const bool ta = n.attrs.i("transA", 0) != 0, tb = n.attrs.i("transB", 0) != 0;
  const float alpha = n.attrs.f("alpha", 1.f), beta = n.attrs.f("beta", 1.f);
  const std::int64_t m = out_shape[0], cols = out_shape[1], k = ta ? as[0] : as[1];
  check_fold_work(g, n, out_shape, k);
  Tensor out = empty_like(ElementType::f32, out_shape);
  std::vector<float> c;
  Shape cs;
  if (!n.inputs[2].empty()) {
    c = floats(g, n, 2);
    cs = constant(g, n, 2).shape;
  }
  const Ints c_strides = strides_of(cs);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < cols; ++j) {
      double sum = 0;
      for (std::int64_t p = 0; p < k; ++p)
        sum += static_cast<double>(a[static_cast<std::size_t>(ta ? p * m + i : i * k + p)]) *
               b[static_cast<std::size_t>(tb ? j * k + p : p * cols + j)];
      float v = alpha * static_cast<float>(sum);
      if (!c.empty()) v += beta * c[static_cast<std::size_t>(broadcast_offset({i, j}, cs, c_strides))];
      out.f32[static_cast<std::size_t>(i * cols + j)] = v;
    }
  return out;
}

Tensor matmul(const Graph& g, const Node& n, const Shape& out_shape) {
  const auto& a = floats(g, n, 0);
  const auto& b = floats(g, n, 1);
  Shape as = constant(g, n, 0).shape, bs = constant(g, n, 1).shape;
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  const std::int64_t m = as[as.size() - 2], k = as.back(), cols = bs.back();
  check_fold_work(g, n, out_shape, k);
  Shape batch_a(as.begin(), as.end() - 2), batch_b(bs.begin(), bs.end() - 2);
  const Ints sa = strides_of(batch_a), sb = strides_of(batch_b);
  Tensor out = empty_like(ElementType::f32, out_shape);
  std::size_t next = 0;
  auto multiply = [&](const Ints& idx) {
    const std::int64_t oa = broadcast_offset(idx, batch_a, sa) * m * k, ob = broadcast_offset(idx, batch_b, sb) * k * cols;
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < cols; ++j) {
        double sum = 0;
        for (std::int64_t p = 0; p < k; ++p)
          sum += static_cast<double>(a[static_cast<std::size_t>(oa + i * k + p)]) * b[static_cast<std::size_t>(ob + p * cols + j)];
        out.f32[next++] = static_cast<float>(sum);
      }
  };
  // Batch dimensions come from the broadcast of both operands' leading dimensions.
  Shape batch(std::max(batch_a.size(), batch_b.size()), 1);
  for (std::size_t d = 0; d < batch.size(); ++d) {
    const std::size_t from_end = batch.size() - d;
    const std::int64_t da = from_end <= batch_a.size() ? batch_a[batch_a.size() - from_end] : 1;
    const std::int64_t db = from_end <= batch_b.size() ? batch_b[batch_b.size() - from_end] : 1;
    batch[d] = std::max(da, db);
  }
  if (batch.empty()) multiply({});
  else for_each_index(batch, multiply);
  return out;
}

Tensor batchnorm(const Graph& g, const Node& n) {
  Tensor out = constant(g, n, 0);
  out.f32 = floats(g, n, 0);
  const auto &scale = floats(g, n, 1), &bias = floats(g, n, 2), &mean = floats(g, n, 3), &var = floats(g, n, 4);
  const float epsilon = n.attrs.f("epsilon", 1e-5f);
  const std::int64_t channels = out.shape[1];
  const std::int64_t inner = element_count(Shape(out.shape.begin() + 2, out.shape.end()));
  for (std::size_t i = 0; i < out.f32.size(); ++i) {
    const auto c = static_cast<std::size_t>((static_cast<std::int64_t>(i) / inner) % channels);
    out.f32[i] = (out.f32[i] - mean[c]) / std::sqrt(var[c] + epsilon) * scale[c] + bias[c];
  }
  return out;
}

Tensor global_average_pool(const Graph& g, const Node& n, const Shape& out_shape) {
  const auto& x = floats(g, n, 0);
  const std::int64_t planes = element_count(out_shape);
  const auto area = static_cast<std::int64_t>(x.size()) / std::max<std::int64_t>(planes, 1);
  Tensor out = empty_like(ElementType::f32, out_shape);
  for (std::int64_t p = 0; p < planes; ++p) {
    double sum = 0;
    for (std::int64_t i = 0; i < area; ++i) sum += x[static_cast<std::size_t>(p * area + i)];
    out.f32[static_cast<std::size_t>(p)] = static_cast<float>(sum / static_cast<double>(area));
  }
  return out;
}

std::vector<double> as_doubles(const Tensor& t) {
  if (t.type == ElementType::f32) return {t.f32.begin(), t.f32.end()};
  return {t.i64.begin(), t.i64.end()};
}

// Equal/Less/Greater/LessOrEqual/GreaterOrEqual/And/Or with broadcasting: booleans as i64 0 and 1.
Tensor compare(const Graph& g, const Node& n, const Shape& out_shape) {
  const Tensor& a = constant(g, n, 0);
  const Tensor& b = constant(g, n, 1);
  const std::vector<double> x = as_doubles(a), y = as_doubles(b);
  const Ints sa = strides_of(a.shape), sb = strides_of(b.shape);
  Tensor out = empty_like(ElementType::i64, out_shape);
  // The comparison chosen once from the op name, not per element.
  const Op op = n.op;
  bool (*holds)(double, double) =
      op == Op::Equal            ? +[](double l, double r) { return l == r; }
      : op == Op::Less           ? +[](double l, double r) { return l < r; }
      : op == Op::Greater        ? +[](double l, double r) { return l > r; }
      : op == Op::LessOrEqual    ? +[](double l, double r) { return l <= r; }
      : op == Op::GreaterOrEqual ? +[](double l, double r) { return l >= r; }
      : op == Op::And            ? +[](double l, double r) { return l != 0 && r != 0; }
                               : +[](double l, double r) { return l != 0 || r != 0; };  // Or
  std::size_t next = 0;
  for_each_index(out_shape, [&](const Ints& idx) {
    const double l = x[static_cast<std::size_t>(broadcast_offset(idx, a.shape, sa))];
    const double r = y[static_cast<std::size_t>(broadcast_offset(idx, b.shape, sb))];
    out.i64[next++] = holds(l, r);
  });
  return out;
}

Tensor logical_not(const Graph& g, const Node& n) {
  Tensor out = empty_like(ElementType::i64, constant(g, n, 0).shape);
  const std::vector<double> x = as_doubles(constant(g, n, 0));
  for (std::size_t i = 0; i < x.size(); ++i) out.i64[i] = x[i] == 0;
  return out;
}

Tensor where(const Graph& g, const Node& n, const Shape& out_shape) {
  const Tensor& c = constant(g, n, 0);
  const Tensor& a = constant(g, n, 1);
  const Tensor& b = constant(g, n, 2);
  if (a.type != b.type) fail(g, n, "inputs mix integer and floating point data");
  const std::vector<double> cond = as_doubles(c);
  const Ints sc = strides_of(c.shape), sa = strides_of(a.shape), sb = strides_of(b.shape);
  Tensor out = empty_like(a.type, out_shape);
  auto choose = [&](const auto& x, const auto& y, auto& z) {
    std::size_t next = 0;
    for_each_index(out_shape, [&](const Ints& idx) {
      const bool take_a = cond[static_cast<std::size_t>(broadcast_offset(idx, c.shape, sc))] != 0;
      z[next++] = take_a ? x[static_cast<std::size_t>(broadcast_offset(idx, a.shape, sa))]
                         : y[static_cast<std::size_t>(broadcast_offset(idx, b.shape, sb))];
    });
  };
  if (a.type == ElementType::f32) choose(a.f32, b.f32, out.f32);
  else choose(a.i64, b.i64, out.i64);
  return out;
}

// ScatterND (Swin's shifted-window mask, built by slice assignment): a copy of data with the slices that
// indices [..., k] name replaced by (or, with reduction add/mul/max/min, combined with) updates.
Tensor scatter_nd(const Graph& g, const Node& n) {
  Tensor out = constant(g, n, 0);
  const Tensor& indices_t = constant(g, n, 1);
  const Tensor& updates = constant(g, n, 2);
  const Ints indices = as_ints(indices_t);
  if (updates.type != out.type) fail(g, n, "data and updates mix integer and floating point");
  if (indices_t.shape.empty()) fail(g, n, "indices need at least one dimension");
  const auto k = static_cast<std::size_t>(indices_t.shape.back());
  if (k == 0 || k > out.shape.size()) fail(g, n, "index tuples of " + std::to_string(k) + " for data of rank " + std::to_string(out.shape.size()));
  const std::int64_t slice = element_count(Shape(out.shape.begin() + static_cast<std::ptrdiff_t>(k), out.shape.end()));
  const std::int64_t tuples = k ? static_cast<std::int64_t>(indices.size() / k) : 0;
  if (updates.elements() != tuples * slice)
    fail(g, n, "updates " + to_string(updates.shape) + " do not match " + std::to_string(tuples) + " slices of " + std::to_string(slice));
  const std::string reduction = n.attrs.s("reduction", "none");
  const bool add = reduction == "add", mul = reduction == "mul", max = reduction == "max", min = reduction == "min";
  if (!add && !mul && !max && !min && reduction != "none")
    fail(g, n, "reduction '" + reduction + "' is not supported (none, add, mul, max, min)");
  const Ints strides = strides_of(out.shape);
  auto apply = [&](auto& dst, const auto& src) {
    for (std::int64_t t = 0; t < tuples; ++t) {
      std::int64_t at = 0;
      for (std::size_t d = 0; d < k; ++d) {
        std::int64_t i = indices[static_cast<std::size_t>(t) * k + d];
        const std::int64_t dim = out.shape[d];
        if (i < -dim || i >= dim) fail(g, n, "index " + std::to_string(i) + " is out of range for " + std::to_string(dim));
        at += (i < 0 ? i + dim : i) * strides[d];
      }
      for (std::int64_t e = 0; e < slice; ++e) {
        auto& v = dst[static_cast<std::size_t>(at + e)];
        const auto u = src[static_cast<std::size_t>(t * slice + e)];
        if (add) v += u;
        else if (mul) v *= u;
        else if (max) v = std::max(v, u);
        else if (min) v = std::min(v, u);
        else v = u;
      }
    }
  };
  if (out.type == ElementType::f32) apply(out.f32, updates.f32);
  else apply(out.i64, updates.i64);
  return out;
}

Tensor range(const Graph& g, const Node& n, const Shape& out_shape) {
  const Tensor& start = constant(g, n, 0);
  Tensor out = empty_like(start.type, out_shape);
  if (start.type == ElementType::i64) {
    const std::int64_t s = start.i64.at(0), d = as_ints(constant(g, n, 2)).at(0);
    for (std::size_t i = 0; i < out.i64.size(); ++i) {
      const auto step = checked_mul(static_cast<std::int64_t>(i), d);
      const auto v = step ? checked_add(s, *step) : std::nullopt;
      if (!v) fail(g, n, "an element of the range overflows 64 bits");
      out.i64[i] = *v;
    }
  } else {
    const float s = start.f32.at(0), d = as_floats(constant(g, n, 2)).at(0);
    for (std::size_t i = 0; i < out.f32.size(); ++i) out.f32[i] = s + static_cast<float>(i) * d;
  }
  return out;
}

Tensor unary_math(const Graph& g, const Node& n) {
  Tensor out = constant(g, n, 0);
  if (out.type != ElementType::f32) {
    if (n.op != Op::Neg && n.op != Op::Abs) fail(g, n, "needs floating point data");
    for (auto& v : out.i64) {
      if (v == std::numeric_limits<std::int64_t>::min()) fail(g, n, "integer " + op_name(n.op) + " overflows");
      v = n.op == Op::Neg ? -v : std::abs(v);
    }
    return out;
  }
  const UnaryMath op = *unary_math_of(n.op);
  for (auto& v : out.f32) v = apply_unary_math(op, v);
  return out;
}

// Integer reductions (shape arithmetic: the product of some dimensions), overflow an error.
Tensor reduce_integers(const Graph& g, const Node& n, const Shape& kept, const Shape& out_shape) {
  const Tensor& t = constant(g, n, 0);
  const ReduceMath op = *reduce_math_of(n.op);
  const Ints ks = strides_of(kept);
  std::vector<std::optional<std::int64_t>> acc(static_cast<std::size_t>(element_count(kept)));
  std::size_t next = 0;
  for_each_index(t.shape, [&](const Ints& idx) {
    auto& slot = acc[static_cast<std::size_t>(broadcast_offset(idx, kept, ks))];
    const std::int64_t v = t.i64[next++];
    std::optional<std::int64_t> result;
    switch (op) {
      case ReduceMath::mean:
      case ReduceMath::sum: result = slot ? checked_add(*slot, v) : v; break;
      case ReduceMath::prod: result = slot ? checked_mul(*slot, v) : v; break;
      case ReduceMath::max: result = slot ? std::max(*slot, v) : v; break;
      case ReduceMath::min: result = slot ? std::min(*slot, v) : v; break;
      default: fail(g, n, "needs floating point data");
    }
    if (!result) fail(g, n, "integer " + op_name(n.op) + " overflows");
    slot = result;
  });
  const std::int64_t count = t.elements() / std::max<std::int64_t>(1, element_count(kept));
  Tensor out = empty_like(ElementType::i64, out_shape);
  for (std::size_t i = 0; i < acc.size(); ++i) out.i64[i] = op == ReduceMath::mean ? *acc[i] / count : *acc[i];
  return out;
}

Tensor reduce(const Graph& g, const Node& n, const Shape& out_shape) {
  const Tensor& t = constant(g, n, 0);
  const ReduceMath op = *reduce_math_of(n.op);
  const Ints axes = n.attrs.ints("axes");
  // Accumulate every input element into its output slot: the output index is the input's with axes at 0.
  Shape kept = t.shape;
  for (auto a : axes) kept[static_cast<std::size_t>(a)] = 1;
  if (t.type == ElementType::i64) return reduce_integers(g, n, kept, out_shape);
  const auto& x = floats(g, n, 0);
  const Ints ks = strides_of(kept);
  std::vector<float> acc(static_cast<std::size_t>(element_count(kept)), reduce_start(op));
  std::size_t next = 0;
  for_each_index(t.shape, [&](const Ints& idx) {
    auto& slot = acc[static_cast<std::size_t>(broadcast_offset(idx, kept, ks))];
    slot = reduce_step(op, slot, x[next++]);
  });
  const float count = static_cast<float>(t.elements() / std::max<std::int64_t>(1, element_count(kept)));
  Tensor out = empty_like(ElementType::f32, out_shape);
  for (std::size_t i = 0; i < acc.size(); ++i) out.f32[i] = reduce_finish(op, acc[i], count);
  return out;
}

Tensor layer_normalization(const Graph& g, const Node& n) {
  Tensor out = constant(g, n, 0);
  out.f32 = floats(g, n, 0);
  const auto axis = static_cast<std::ptrdiff_t>(n.attrs.i("axis", 0));
  const Shape normalized(out.shape.begin() + axis, out.shape.end());
  const std::int64_t len = element_count(normalized), rows = out.elements() / std::max<std::int64_t>(1, len);
  std::vector<float> scale(static_cast<std::size_t>(len), 1.f), bias(static_cast<std::size_t>(len), 0.f);
  for (std::size_t i = 1; i <= 2; ++i)
    if (!n.inputs[i].empty()) (i == 1 ? scale : bias) = broadcast_tensor(constant(g, n, i), normalized).f32;
  const float epsilon = n.attrs.f("epsilon", 1e-5f);
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = out.f32.data() + r * len;
    double sum = 0, square = 0;
    for (std::int64_t k = 0; k < len; ++k) sum += row[k];
    const double mean = sum / static_cast<double>(len);
    for (std::int64_t k = 0; k < len; ++k) square += (row[k] - mean) * (row[k] - mean);
    const double inv = 1.0 / std::sqrt(square / static_cast<double>(len) + epsilon);
    for (std::int64_t k = 0; k < len; ++k)
      row[k] = static_cast<float>((row[k] - mean) * inv) * scale[static_cast<std::size_t>(k)] + bias[static_cast<std::size_t>(k)];
  }
  return out;
}

}  // namespace

std::vector<Tensor> evaluate(const Node& n, const Graph& g) {
  const Op op = n.op;
  if (op == Op::Cast) return {cast(g, n)};
  if (op == Op::ConstantOfShape) return {constant_of_shape(g, n)};
  if (op == Op::Conv || op == Op::ConvTranspose || op == Op::MaxPool || op == Op::AveragePool || op == Op::Resize)
    fail(g, n, "all inputs are constants, and folding " + op_name(op) + " at prepare time is not supported");
  const std::vector<Shape> shapes = infer_shapes(n, g);
  for (std::size_t i = 0; i < shapes.size(); ++i) check_folded_shape(g, n, shapes[i]);
  const Tensor& x = constant(g, n, 0);
  if (op == Op::Reshape) {
    Tensor out = x;
    out.shape = shapes[0];
    return {out};
  }
  if (op == Op::Transpose) return {transpose(x, n.attrs.ints("perm"))};
  if (op == Op::Slice) return {slice(x, n, shapes[0])};
  if (op == Op::Pad) return {pad(x, n, shapes[0])};
  if (op == Op::Concat) return {concat(g, n, shapes[0])};
  if (op == Op::Split) return split(x, n, shapes);
  if (op == Op::Gather) return {gather(g, n, shapes[0])};
  if (op == Op::GatherElements) return {gather_elements(g, n, shapes[0])};
  if (op == Op::GridSample) return {grid_sample(g, n, shapes[0])};
  if (binary_math_of(op) || op == Op::Mod) return {binary(g, n, shapes[0])};
  if (unary_math_of(op)) return {unary_math(g, n)};
  if (reduce_math_of(op)) return {reduce(g, n, shapes[0])};
  if (op == Op::LayerNormalization) return {layer_normalization(g, n)};
  if (op == Op::Equal || op == Op::Less || op == Op::Greater || op == Op::LessOrEqual || op == Op::GreaterOrEqual ||
      op == Op::And || op == Op::Or)
    return {compare(g, n, shapes[0])};
  if (op == Op::Not) return {logical_not(g, n)};
  if (op == Op::Where) return {where(g, n, shapes[0])};
  if (op == Op::Expand) return {broadcast_tensor(x, shapes[0])};
  if (op == Op::Range) return {range(g, n, shapes[0])};
  if (op == Op::ScatterND) return {scatter_nd(g, n)};
  if (is_activation(op))
    return {unary(g, n)};
  if (op == Op::Softmax || op == Op::LogSoftmax) return {softmax(g, n, op == Op::LogSoftmax)};
  if (op == Op::ArgMax || op == Op::ArgMin) return {arg_extreme(g, n, shapes[0])};
  if (op == Op::TopK) return top_k(g, n, shapes[0]);
  if (op == Op::Gemm) return {gemm(g, n, shapes[0])};
  if (op == Op::MatMul) return {matmul(g, n, shapes[0])};
  if (op == Op::BatchNormalization) return {batchnorm(g, n)};
  if (op == Op::GlobalAveragePool) return {global_average_pool(g, n, shapes[0])};
  fail(g, n, "cannot fold operator " + op_name(op) + " at prepare time");
}

}  // namespace sluice::nn::passes
