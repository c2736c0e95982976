// ReduceMean/Sum/Max/Min/L1/L2/SumSquare/Prod over any set of axes: the kept and the reduced dimensions each
// walked as a collapsed strided view, so the common cases (a mean over H and W, a reduction over the last axis)
// become one contiguous inner loop per output element.
#include <stdexcept>

#include "nn/cpu/layer.hpp"
#include "nn/cpu/strided.hpp"
#include "nn/elementwise_math.hpp"

namespace sluice::nn::cpu {
namespace {

// Calls f(offset) for every index of `view` (rank >= 1, as collapse() gives), in row-major order.
template <typename F>
void for_each_offset(const StridedView& view, F f) {
  const std::int64_t inner = view.dims.back(), inner_stride = view.strides.back();
  for_each_row(view, [&](std::int64_t base) {
    for (std::int64_t i = 0; i < inner; ++i) f(base + i * inner_stride);
  });
}

class ReduceLayer final : public Layer {
 public:
  ReduceLayer(ReduceMath op, StridedView kept, StridedView reduced, std::int64_t count)
      : op_(op), kept_(std::move(kept)), reduced_(std::move(reduced)), count_(static_cast<float>(count)) {}

  void run(const float* const* in, float* const* out, float*) const override {
    const float* x = in[0];
    float* y = out[0];
    for_each_offset(kept_, [&](std::int64_t base) {
      float acc = reduce_start(op_);
      if (reduced_.dims.size() == 1 && reduced_.strides[0] == 1) {  // contiguous: a loop the compiler vectorises
        const float* row = x + base;
        for (std::int64_t i = 0; i < reduced_.dims[0]; ++i) acc = reduce_step(op_, acc, row[i]);
      } else {
        for_each_offset(reduced_, [&](std::int64_t offset) { acc = reduce_step(op_, acc, x[base + offset]); });
      }
      *y++ = reduce_finish(op_, acc, count_);
    });
  }

 private:
  ReduceMath op_;
  StridedView kept_, reduced_;
  float count_;
};

}  // namespace

std::unique_ptr<Layer> make_reduce(const LayerContext& ctx) {
  ctx.expect_inputs(1, 1);
  ctx.expect_outputs(1);
  const auto op = reduce_math_of(ctx.node().op);
  if (!op) ctx.fail("is not a reduction");
  const Shape& x = ctx.input_shape(0);
  const auto axes = ctx.required_ints("axes");
  const bool keepdims = ctx.attrs().i("keepdims", 1) != 0;
  std::vector<bool> is_reduced(x.size(), false);
  for (auto a : axes) {
    if (a < 0 || a >= static_cast<std::int64_t>(x.size()) || is_reduced[static_cast<std::size_t>(a)])
      ctx.fail("axes are not canonical (the graph is not prepared)");
    is_reduced[static_cast<std::size_t>(a)] = true;
  }
  const auto strides = contiguous_strides(x);
  StridedView kept, reduced;
  Shape out;
  for (std::size_t d = 0; d < x.size(); ++d) {
    StridedView& part = is_reduced[d] ? reduced : kept;
    part.dims.push_back(x[d]);
    part.strides.push_back(strides[d]);
    if (!is_reduced[d]) out.push_back(x[d]);
    else if (keepdims) out.push_back(1);
  }
  ctx.expect_output_shape(0, out);
  const std::int64_t count = element_count(reduced.dims);
  if (count == 0) ctx.fail("reduces an empty axis");
  try {
    return std::make_unique<ReduceLayer>(*op, collapse(std::move(kept)), collapse(std::move(reduced)), count);
  } catch (const std::invalid_argument& e) {
    ctx.fail(e.what());
  }
}

}  // namespace sluice::nn::cpu
