// GatherElements (nn/graph.hpp), with nn/sampling_math.hpp's index.
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

}  // namespace sluice::nn::cpu
