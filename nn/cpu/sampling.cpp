// GatherElements and GridSample (nn/graph.hpp), with nn/sampling_math.hpp's index and coordinate formulas.
#include <cmath>
#include <limits>

#include "nn/cpu/layer.hpp"
#include "nn/cpu/parallel.hpp"
#include "nn/ranking.hpp"
#include "nn/sampling_math.hpp"

namespace sluice::nn::cpu {
namespace {

constexpr std::int64_t kGrain = 1 << 14;  // output elements per thread at least (nn/README.md)

std::vector<std::int64_t> row_major_strides(const Shape& s) {
  std::vector<std::int64_t> st(s.size(), 1);
  for (std::size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

class GatherElementsLayer final : public Layer {
 public:
  GatherElementsLayer(Shape out, std::vector<std::int64_t> data_strides, std::size_t axis, std::int64_t dim)
      : out_(std::move(out)), data_strides_(std::move(data_strides)), axis_(axis), dim_(dim) {}

  void run(const float* const* in, float* const* out, float*) const override {
    const float* data = in[0];
    const float* indices = in[1];
    float* y = out[0];
    const std::size_t rank = out_.size();
    parallel_ranges(element_count(out_), kGrain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        const std::int64_t at = gather_position(indices[i], dim_);
        if (at < 0) {
          y[i] = std::numeric_limits<float>::quiet_NaN();
          continue;
        }
        std::int64_t offset = 0, rest = i;
        for (std::size_t d = rank; d-- > 0;) {
          const std::int64_t coord = rest % out_[d];
          rest /= out_[d];
          offset += (d == axis_ ? at : coord) * data_strides_[d];
        }
        y[i] = data[offset];
      }
    });
  }

 private:
  Shape out_;
  std::vector<std::int64_t> data_strides_;
  std::size_t axis_;
  std::int64_t dim_;
};

class GridSampleLayer final : public Layer {
 public:
  GridSampleLayer(Shape x, Shape y, bool nearest, GridSamplePadding padding, bool align_corners)
      : x_(std::move(x)), y_(std::move(y)), nearest_(nearest), padding_(padding), align_corners_(align_corners) {}

  void run(const float* const* in, float* const* out, float*) const override {
    const std::int64_t C = x_[1], H = x_[2], W = x_[3], Ho = y_[2], Wo = y_[3];
    const float* x = in[0];
    const float* grid = in[1];
    float* y = out[0];
    // One piece: one output plane (n, c), all its positions.
    parallel_ranges(y_[0] * C, std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, Ho * Wo)),
                    [&](std::int64_t begin, std::int64_t end) {
                      for (std::int64_t p = begin; p < end; ++p) {
                        const std::int64_t b = p / C;
                        const float* plane = x + p * H * W;
                        const float* g = grid + b * Ho * Wo * 2;
                        float* row = y + p * Ho * Wo;
                        auto at = [&](int iy, int ix) { return plane[static_cast<std::int64_t>(iy) * W + ix]; };
                        for (std::int64_t k = 0; k < Ho * Wo; ++k)
                          row[k] = grid_sample_at(g[2 * k], g[2 * k + 1], static_cast<int>(H), static_cast<int>(W),
                                                  nearest_, padding_, align_corners_, at);
                      }
                    });
  }

 private:
  Shape x_, y_;
  bool nearest_;
  GridSamplePadding padding_;
  bool align_corners_;
};

}  // namespace

std::unique_ptr<Layer> make_gather_elements(const LayerContext& ctx) {
  ctx.expect_inputs(2, 2);
  ctx.expect_outputs(1);
  const Shape& data = ctx.input_shape(0);
  const Shape& indices = ctx.input_shape(1);
  const std::int64_t axis = ctx.attrs().i("axis", -1);
  if (axis < 0 || axis >= static_cast<std::int64_t>(data.size()))
    ctx.fail("axis is not canonical (the graph is not prepared)");
  if (indices.size() != data.size())
    ctx.fail("indices " + to_string(indices) + " and data " + to_string(data) + " differ in rank");
  for (std::size_t d = 0; d < data.size(); ++d)
    if (static_cast<std::int64_t>(d) != axis && indices[d] > data[d])
      ctx.fail("indices " + to_string(indices) + " are longer than data " + to_string(data) + " in dimension " +
               std::to_string(d));
  const std::int64_t dim = data[static_cast<std::size_t>(axis)];
  if (dim > kExactIndexAxisF32)
    ctx.fail("the axis has " + std::to_string(dim) + " elements; indices are f32 data, exact only for axes of up to " +
             std::to_string(kExactIndexAxisF32) + " elements");
  ctx.expect_output_shape(0, indices);
  return std::make_unique<GatherElementsLayer>(indices, row_major_strides(data), static_cast<std::size_t>(axis), dim);
}

std::unique_ptr<Layer> make_grid_sample(const LayerContext& ctx) {
  ctx.expect_inputs(2, 2);
  ctx.expect_outputs(1);
  const Shape& x = ctx.input_shape(0);
  const Shape& grid = ctx.input_shape(1);
  if (x.size() != 4 || grid.size() != 4 || grid[0] != x[0] || grid[3] != 2)
    ctx.fail("input " + to_string(x) + " and grid " + to_string(grid) + " are not [N, C, H, W] and [N, Ho, Wo, 2]");
  if (x[2] > std::numeric_limits<int>::max() || x[3] > std::numeric_limits<int>::max())
    ctx.fail("the input " + to_string(x) + " is too large to sample");
  const std::string mode = ctx.attrs().s("mode", "bilinear"), padding = ctx.attrs().s("padding_mode", "zeros");
  if (mode != "bilinear" && mode != "nearest") ctx.fail("mode '" + mode + "' is not bilinear or nearest");
  GridSamplePadding p = GridSamplePadding::zeros;
  if (padding == "border") p = GridSamplePadding::border;
  else if (padding == "reflection") p = GridSamplePadding::reflection;
  else if (padding != "zeros") ctx.fail("padding_mode '" + padding + "' is not zeros, border or reflection");
  const Shape y{x[0], x[1], grid[1], grid[2]};
  ctx.expect_output_shape(0, y);
  return std::make_unique<GridSampleLayer>(x, y, mode == "nearest", p, ctx.attrs().i("align_corners", 0) != 0);
}

}  // namespace sluice::nn::cpu
