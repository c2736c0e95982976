// ArgMax, ArgMin and TopK along one axis (nn/ranking.hpp's order). Index outputs are f32 data like every value of
// the CPU backend, exact for axes up to kExactIndexAxisF32 elements; longer axes are refused when the layer is made.
#include <algorithm>
#include <numeric>

#include "nn/cpu/layer.hpp"
#include "nn/ranking.hpp"

namespace sluice::nn::cpu {
namespace {

// x viewed as outer x length x inner: the row (o, i) has `length` elements at distance `inner`.
struct Rows {
  std::int64_t outer = 1, length = 1, inner = 1;
};

Rows rows_along(const LayerContext& ctx, const Shape& x, std::int64_t axis) {
  if (axis < 0 || axis >= static_cast<std::int64_t>(x.size())) ctx.fail("axis is not canonical (the graph is not prepared)");
  const auto split = x.begin() + axis;
  Rows r{element_count(Shape(x.begin(), split)), *split, element_count(Shape(split + 1, x.end()))};
  if (r.length == 0) ctx.fail("the axis is empty");
  if (r.length > kExactIndexAxisF32)
    ctx.fail("the axis has " + std::to_string(r.length) + " elements; indices are f32 data, exact only for axes of up to " +
             std::to_string(kExactIndexAxisF32) + " elements");
  return r;
}

class ArgExtremeLayer final : public Layer {
 public:
  ArgExtremeLayer(Rows rows, RankOrder order) : rows_(rows), order_(order) {}

  void run(const float* const* in, float* const* out, float*) const override {
    for (std::int64_t o = 0; o < rows_.outer; ++o)
      for (std::int64_t i = 0; i < rows_.inner; ++i) {
        const float* x = in[0] + o * rows_.length * rows_.inner + i;
        std::int64_t best = 0;
        for (std::int64_t k = 1; k < rows_.length; ++k)
          if (comes_before(x[k * rows_.inner], k, x[best * rows_.inner], best, order_)) best = k;
        out[0][o * rows_.inner + i] = static_cast<float>(best);
      }
  }

 private:
  Rows rows_;
  RankOrder order_;
};

class TopKLayer final : public Layer {
 public:
  TopKLayer(Rows rows, std::int64_t k, RankOrder order) : rows_(rows), k_(k), order_(order) {}
  // One row's positions, to partially sort.
  std::size_t scratch_floats() const override {
    return static_cast<std::size_t>(rows_.length) * sizeof(std::int64_t) / sizeof(float);
  }

  void run(const float* const* in, float* const* out, float* scratch) const override {
    auto* order = reinterpret_cast<std::int64_t*>(scratch);  // 64-byte aligned
    for (std::int64_t o = 0; o < rows_.outer; ++o)
      for (std::int64_t i = 0; i < rows_.inner; ++i) {
        const float* x = in[0] + o * rows_.length * rows_.inner + i;
        std::iota(order, order + rows_.length, std::int64_t{0});
        // comes_before is a total order, so the first k after a partial sort are the top k in order.
        std::partial_sort(order, order + k_, order + rows_.length, [&](std::int64_t a, std::int64_t b) {
          return comes_before(x[a * rows_.inner], a, x[b * rows_.inner], b, order_);
        });
        const std::int64_t base = o * k_ * rows_.inner + i;
        for (std::int64_t j = 0; j < k_; ++j) {
          out[0][base + j * rows_.inner] = x[order[j] * rows_.inner];
          out[1][base + j * rows_.inner] = static_cast<float>(order[j]);
        }
      }
  }

 private:
  Rows rows_;
  std::int64_t k_;
  RankOrder order_;
};

}  // namespace

std::unique_ptr<Layer> make_arg_extreme(const LayerContext& ctx) {
  ctx.expect_inputs(1, 1);
  ctx.expect_outputs(1);
  const Shape& x = ctx.input_shape(0);
  const std::int64_t axis = ctx.attrs().i("axis", -1);
  const Rows rows = rows_along(ctx, x, axis);
  Shape y = x;
  if (ctx.attrs().i("keepdims", 1) != 0) y[static_cast<std::size_t>(axis)] = 1;
  else y.erase(y.begin() + axis);
  ctx.expect_output_shape(0, y);
  return std::make_unique<ArgExtremeLayer>(
      rows, arg_extreme_order(ctx.node().op == Op::ArgMax, ctx.attrs().i("select_last_index", 0) != 0));
}

std::unique_ptr<Layer> make_top_k(const LayerContext& ctx) {
  ctx.expect_inputs(1, 1);
  ctx.expect_outputs(2);
  const Shape& x = ctx.input_shape(0);
  const std::int64_t axis = ctx.attrs().i("axis", -1);
  const Rows rows = rows_along(ctx, x, axis);
  const std::int64_t k = ctx.attrs().i("k", 0);
  if (k < 1 || k > rows.length) ctx.fail("k " + std::to_string(k) + " is outside [1, " + std::to_string(rows.length) + "]");
  Shape y = x;
  y[static_cast<std::size_t>(axis)] = k;
  ctx.expect_output_shape(0, y);
  ctx.expect_output_shape(1, y);
  return std::make_unique<TopKLayer>(rows, k, top_k_order(ctx.attrs().i("largest", 1) != 0));
}

}  // namespace sluice::nn::cpu
