// Activations and the elementwise math ops (Erf, Sqrt, ...) as nodes of their own, and Add/Sub/Mul/Div/Pow/Max/Min
// with numpy broadcasting.
#include <algorithm>
#include <array>
#include <stdexcept>

#include "nn/cpu/activation.hpp"
#include "nn/cpu/layer.hpp"
#include "nn/cpu/parallel.hpp"
#include "nn/cpu/strided.hpp"
#include "nn/elementwise_math.hpp"

namespace sluice::nn::cpu {

namespace {

// Less than this many elements per thread are not worth waking another thread for.
constexpr std::int64_t kElementsPerThread = 16384;

class UnaryLayer final : public Layer {
 public:
  UnaryLayer(Activation act, std::int64_t count) : act_(act), count_(static_cast<std::size_t>(count)) {}
  void run(const float* const* in, float* const* out, float*) const override {
    parallel_ranges(static_cast<std::int64_t>(count_), kElementsPerThread, [&](std::int64_t first, std::int64_t end) {
      apply_activation(act_, in[0] + first, 0.0f, nullptr, out[0] + first, static_cast<std::size_t>(end - first));
    });
  }

 private:
  Activation act_;
  std::size_t count_;
};

template <UnaryMath Op>
class UnaryMathLayer final : public Layer {
 public:
  explicit UnaryMathLayer(std::int64_t count) : count_(count) {}
  void run(const float* const* in, float* const* out, float*) const override {
    const float* x = in[0];
    float* y = out[0];
    parallel_ranges(count_, kElementsPerThread, [&](std::int64_t first, std::int64_t end) {
      for (std::int64_t i = first; i < end; ++i) y[i] = apply_unary_math(Op, x[i]);  // Op is a constant
    });
  }

 private:
  std::int64_t count_;
};

template <BinaryMath Op>
inline float combine(float a, float b) {
  return apply_binary_math(Op, a, b);  // Op is a constant: the switch folds away
}

// y[i] = a[i * sa] op b[i * sb] for i < n; the common stride pairs get loops the compiler vectorises.
template <BinaryMath Op>
void combine_row(const float* a, std::int64_t sa, const float* b, std::int64_t sb, float* y, std::int64_t n) {
  if (sa == 1 && sb == 1) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = combine<Op>(a[i], b[i]);
  } else if (sa == 1 && sb == 0) {
    const float bv = *b;
    for (std::int64_t i = 0; i < n; ++i) y[i] = combine<Op>(a[i], bv);
  } else if (sa == 0 && sb == 1) {
    const float av = *a;
    for (std::int64_t i = 0; i < n; ++i) y[i] = combine<Op>(av, b[i]);
  } else {
    for (std::int64_t i = 0; i < n; ++i) y[i] = combine<Op>(a[i * sa], b[i * sb]);
  }
}

// The output's dimensions with both inputs' strides, size-1 dimensions dropped and neighbours merged wherever
// both inputs allow it: [N,C,H,W] * [1,C,1,1] becomes [N, C, H*W] with strides (CHW, HW, 1) and (0, 1, 0).
struct BroadcastLoop {
  std::vector<std::int64_t> dims, a_strides, b_strides;
};

BroadcastLoop plan_broadcast(const Shape& a, const Shape& b, const Shape& out) {
  const auto sa = broadcast_strides(a, out), sb = broadcast_strides(b, out);
  BroadcastLoop loop;
  if (element_count(out) == 0) return {{0}, {0}, {0}};
  for (std::size_t k = 0; k < out.size(); ++k) {
    if (out[k] == 1) continue;
    if (!loop.dims.empty() && loop.a_strides.back() == sa[k] * out[k] && loop.b_strides.back() == sb[k] * out[k]) {
      loop.dims.back() *= out[k];
      loop.a_strides.back() = sa[k];
      loop.b_strides.back() = sb[k];
    } else {
      loop.dims.push_back(out[k]);
      loop.a_strides.push_back(sa[k]);
      loop.b_strides.push_back(sb[k]);
    }
  }
  if (loop.dims.empty()) loop = {{1}, {1}, {1}};
  if (loop.dims.size() > kMaxRank) throw std::invalid_argument("too many dimensions after broadcasting");
  return loop;
}

template <BinaryMath Op>
class BinaryLayer final : public Layer {
 public:
  explicit BinaryLayer(BroadcastLoop loop) : loop_(std::move(loop)) {}

  void run(const float* const* in, float* const* out, float*) const override {
    const std::size_t outer = loop_.dims.size() - 1;
    const std::int64_t n = loop_.dims.back();
    std::int64_t rows = 1;
    for (std::size_t k = 0; k < outer; ++k) rows *= loop_.dims[k];
    parallel_ranges(rows, std::max<std::int64_t>(1, kElementsPerThread / n), [&](std::int64_t first, std::int64_t end) {
      // The index of row `first`, then the rows in order.
      std::array<std::int64_t, kMaxRank> index{};
      std::int64_t ao = 0, bo = 0, rest = first;
      for (std::size_t k = outer; k-- > 0;) {
        index[k] = rest % loop_.dims[k];
        rest /= loop_.dims[k];
        ao += index[k] * loop_.a_strides[k];
        bo += index[k] * loop_.b_strides[k];
      }
      float* y = out[0] + first * n;
      for (std::int64_t r = first; r < end; ++r, y += n) {
        combine_row<Op>(in[0] + ao, loop_.a_strides.back(), in[1] + bo, loop_.b_strides.back(), y, n);
        for (std::size_t k = outer; k-- > 0;) {
          ao += loop_.a_strides[k];
          bo += loop_.b_strides[k];
          if (++index[k] < loop_.dims[k]) break;
          ao -= loop_.a_strides[k] * loop_.dims[k];
          bo -= loop_.b_strides[k] * loop_.dims[k];
          index[k] = 0;
        }
      }
    });
  }

 private:
  BroadcastLoop loop_;
};

}  // namespace

std::unique_ptr<Layer> make_unary(const LayerContext& ctx) {
  ctx.expect_inputs(1, 1);
  ctx.expect_outputs(1);
  ctx.expect_output_shape(0, ctx.input_shape(0));
  if (ctx.input_layout(0) != ctx.output_layout(0)) ctx.fail("input and output layouts differ (internal error)");
  return std::make_unique<UnaryLayer>(unary_activation(ctx), element_count(ctx.input_shape(0)));
}

std::unique_ptr<Layer> make_binary(const LayerContext& ctx) {
  ctx.expect_inputs(2, 2);
  ctx.expect_outputs(1);
  const Shape& a = ctx.input_shape(0);
  const Shape& b = ctx.input_shape(1);
  Shape out;
  if (!broadcast_shape(a, b, out)) ctx.fail("input shapes " + to_string(a) + " and " + to_string(b) + " do not broadcast");
  ctx.expect_output_shape(0, out);
  // Channels-last values are only ever added to their own shape: element order is then irrelevant.
  const bool same_layout = ctx.input_layout(0) == ctx.output_layout(0) && ctx.input_layout(1) == ctx.output_layout(0);
  if (!same_layout || (ctx.output_layout(0) != Layout::nchw && (a != out || b != out)))
    ctx.fail("inputs " + to_string(a) + " and " + to_string(b) + " are in layouts the layer cannot combine (internal error)");
  BroadcastLoop loop = plan_broadcast(a, b, out);
  const auto op = binary_math_of(ctx.node().op);
  if (!op) ctx.fail("is not a binary arithmetic op");
  switch (*op) {
    case BinaryMath::add: return std::make_unique<BinaryLayer<BinaryMath::add>>(std::move(loop));
    case BinaryMath::sub: return std::make_unique<BinaryLayer<BinaryMath::sub>>(std::move(loop));
    case BinaryMath::mul: return std::make_unique<BinaryLayer<BinaryMath::mul>>(std::move(loop));
    case BinaryMath::div: return std::make_unique<BinaryLayer<BinaryMath::div>>(std::move(loop));
    case BinaryMath::pow: return std::make_unique<BinaryLayer<BinaryMath::pow>>(std::move(loop));
    case BinaryMath::max: return std::make_unique<BinaryLayer<BinaryMath::max>>(std::move(loop));
    case BinaryMath::min: return std::make_unique<BinaryLayer<BinaryMath::min>>(std::move(loop));
  }
  ctx.fail("is not a binary arithmetic op");
}

std::unique_ptr<Layer> make_unary_math(const LayerContext& ctx) {
  ctx.expect_inputs(1, 1);
  ctx.expect_outputs(1);
  ctx.expect_output_shape(0, ctx.input_shape(0));
  const auto op = unary_math_of(ctx.node().op);
  if (!op) ctx.fail("is not an elementwise math op");
  const std::int64_t count = element_count(ctx.input_shape(0));
  switch (*op) {
    case UnaryMath::erf: return std::make_unique<UnaryMathLayer<UnaryMath::erf>>(count);
    case UnaryMath::sqrt: return std::make_unique<UnaryMathLayer<UnaryMath::sqrt>>(count);
    case UnaryMath::exp: return std::make_unique<UnaryMathLayer<UnaryMath::exp>>(count);
    case UnaryMath::log: return std::make_unique<UnaryMathLayer<UnaryMath::log>>(count);
    case UnaryMath::neg: return std::make_unique<UnaryMathLayer<UnaryMath::neg>>(count);
    case UnaryMath::abs: return std::make_unique<UnaryMathLayer<UnaryMath::abs>>(count);
    case UnaryMath::reciprocal: return std::make_unique<UnaryMathLayer<UnaryMath::reciprocal>>(count);
    case UnaryMath::floor: return std::make_unique<UnaryMathLayer<UnaryMath::floor>>(count);
    case UnaryMath::ceil: return std::make_unique<UnaryMathLayer<UnaryMath::ceil>>(count);
    case UnaryMath::sin: return std::make_unique<UnaryMathLayer<UnaryMath::sin>>(count);
    case UnaryMath::cos: return std::make_unique<UnaryMathLayer<UnaryMath::cos>>(count);
    case UnaryMath::gelu: return std::make_unique<UnaryMathLayer<UnaryMath::gelu>>(count);
  }
  ctx.fail("is not an elementwise math op");
}

}  // namespace sluice::nn::cpu
