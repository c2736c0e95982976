// Ops that move data without arithmetic: Reshape, Transpose, Concat, Split, Slice, Pad. Those whose output is one
// contiguous block of the input (Reshape, a Slice of whole rows, a Pad of nothing) are views (Layer::view_offset).
#include <algorithm>
#include <array>
#include <cstring>

#include "nn/cpu/layer.hpp"
#include "nn/cpu/parallel.hpp"
#include "nn/cpu/strided.hpp"

namespace sluice::nn::cpu {

namespace {

// Copies smaller than this per thread are done before another thread would wake.
constexpr std::int64_t kFloatsPerThread = 16384;

class CopyLayer final : public Layer {
 public:
  explicit CopyLayer(std::int64_t count) : count_(count) {}
  void run(const float* const* in, float* const* out, float*) const override {
    parallel_ranges(count_, kFloatsPerThread, [&](std::int64_t first, std::int64_t end) {
      std::memcpy(out[0] + first, in[0] + first, static_cast<std::size_t>(end - first) * sizeof(float));
    });
  }
  std::optional<std::int64_t> view_offset() const override { return 0; }

 private:
  std::int64_t count_;
};

// Transpose and Slice: the output is a strided view of the input.
class StridedCopyLayer final : public Layer {
 public:
  explicit StridedCopyLayer(StridedView view) : view_(std::move(view)) {}
  void run(const float* const* in, float* const* out, float*) const override { copy_strided(in[0], view_, out[0]); }
  std::optional<std::int64_t> view_offset() const override {
    if (view_.dims.size() == 1 && view_.strides[0] == 1) return view_.offset;  // one contiguous block
    return std::nullopt;
  }

 private:
  StridedView view_;
};

// Concat and Split: along `axis` every part holds a contiguous chunk of each outer slice of the whole.
class ChunkLayer final : public Layer {
 public:
  ChunkLayer(bool concat, std::int64_t outer, std::vector<std::int64_t> chunks)
      : concat_(concat), outer_(outer), chunks_(std::move(chunks)) {
    for (auto c : chunks_) whole_ += c;
  }
  void run(const float* const* in, float* const* out, float*) const override {
    // Threads take ranges of outer slices, each slice all its parts.
    parallel_ranges(outer_, std::max<std::int64_t>(1, kFloatsPerThread / std::max<std::int64_t>(whole_, 1)),
                    [&](std::int64_t first, std::int64_t end) {
                      for (std::int64_t o = first; o < end; ++o) {
                        std::int64_t position = 0;
                        for (std::size_t part = 0; part < chunks_.size(); ++part) {
                          const std::size_t bytes = static_cast<std::size_t>(chunks_[part]) * sizeof(float);
                          if (concat_) {
                            std::memcpy(out[0] + o * whole_ + position, in[part] + o * chunks_[part], bytes);
                          } else {
                            std::memcpy(out[part] + o * chunks_[part], in[0] + o * whole_ + position, bytes);
                          }
                          position += chunks_[part];
                        }
                      }
                    });
  }

 private:
  bool concat_;
  std::int64_t outer_;
  std::vector<std::int64_t> chunks_;
  std::int64_t whole_ = 0;
};

// Pad: per dimension, the input index each output index reads (-1: the constant value).
class PadLayer final : public Layer {
 public:
  PadLayer(Shape out, std::vector<std::int64_t> in_strides, std::vector<std::vector<std::int64_t>> sources, float value)
      : out_(std::move(out)), in_strides_(std::move(in_strides)), sources_(std::move(sources)), value_(value) {}

  void run(const float* const* in, float* const* out, float*) const override {
    if (element_count(out_) == 0) return;
    const std::size_t rank = out_.size();
    if (rank == 0) {
      *out[0] = *in[0];
      return;
    }
    const std::int64_t row = out_.back();
    const auto& last = sources_.back();
    parallel_ranges(element_count(out_) / row, std::max<std::int64_t>(1, kFloatsPerThread / row),
                    [&](std::int64_t first, std::int64_t end) {
                      std::array<std::int64_t, kMaxRank> index{};  // of row `first`, then counted up
                      for (std::int64_t d = static_cast<std::int64_t>(rank) - 1, rest = first; d-- > 0;) {
                        index[static_cast<std::size_t>(d)] = rest % out_[static_cast<std::size_t>(d)];
                        rest /= out_[static_cast<std::size_t>(d)];
                      }
                      float* y = out[0] + first * row;
                      for (std::int64_t r = first; r < end; ++r, y += row) {
                        std::int64_t offset = 0;
                        bool inside = true;
                        for (std::size_t d = 0; d + 1 < rank; ++d) {
                          const std::int64_t s = sources_[d][static_cast<std::size_t>(index[d])];
                          if (s < 0) inside = false;
                          offset += s * in_strides_[d];
                        }
                        if (!inside) {
                          std::fill(y, y + row, value_);
                        } else {
                          const float* x = in[0] + offset;
                          for (std::int64_t i = 0; i < row; ++i) {
                            const std::int64_t s = last[static_cast<std::size_t>(i)];
                            y[i] = s < 0 ? value_ : x[s];
                          }
                        }
                        for (std::size_t d = rank - 1; d-- > 0;) {
                          if (++index[d] < out_[d]) break;
                          index[d] = 0;
                        }
                      }
                    });
  }

 private:
  Shape out_;
  std::vector<std::int64_t> in_strides_;
  std::vector<std::vector<std::int64_t>> sources_;
  float value_;
};

std::int64_t checked_axis(const LayerContext& ctx, std::int64_t axis, std::size_t rank) {
  if (axis < 0 || axis >= static_cast<std::int64_t>(rank))
    ctx.fail("axis " + std::to_string(axis) + " is outside [0, " + std::to_string(rank) + ") (prepare() makes axes non-negative)");
  return axis;
}

}  // namespace

std::unique_ptr<Layer> make_reshape(const LayerContext& ctx) {
  ctx.expect_inputs(1, 1);
  ctx.expect_outputs(1);
  const Shape target = ctx.required_ints("shape");
  if (element_count(target) != element_count(ctx.input_shape(0)) ||
      std::any_of(target.begin(), target.end(), [](std::int64_t d) { return d < 0; }))
    ctx.fail("cannot reshape " + to_string(ctx.input_shape(0)) + " to " + to_string(target));
  ctx.expect_output_shape(0, target);
  return std::make_unique<CopyLayer>(element_count(target));
}

std::unique_ptr<Layer> make_transpose(const LayerContext& ctx) {
  ctx.expect_inputs(1, 1);
  ctx.expect_outputs(1);
  const Shape& x = ctx.input_shape(0);
  std::vector<std::int64_t> perm = ctx.attrs().ints("perm");
  if (perm.empty())
    for (std::size_t d = x.size(); d-- > 0;) perm.push_back(static_cast<std::int64_t>(d));
  std::vector<std::int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t d = 0; d < sorted.size(); ++d)
    if (sorted[d] != static_cast<std::int64_t>(d) || sorted.size() != x.size())
      ctx.fail("perm is not a permutation of the input's " + std::to_string(x.size()) + " dimensions");
  const auto strides = contiguous_strides(x);
  StridedView view;
  for (auto p : perm) {
    view.dims.push_back(x[static_cast<std::size_t>(p)]);
    view.strides.push_back(strides[static_cast<std::size_t>(p)]);
  }
  ctx.expect_output_shape(0, view.dims);
  return std::make_unique<StridedCopyLayer>(collapse(view));
}

std::unique_ptr<Layer> make_concat(const LayerContext& ctx) {
  ctx.expect_inputs(1, ctx.node().inputs.size());
  ctx.expect_outputs(1);
  const Shape& first = ctx.input_shape(0);
  const auto axis = static_cast<std::size_t>(checked_axis(ctx, ctx.attrs().i("axis", -1), first.size()));
  Shape y = first;
  y[axis] = 0;
  std::vector<std::int64_t> chunks;
  for (std::size_t i = 0; i < ctx.node().inputs.size(); ++i) {
    const Shape& s = ctx.input_shape(i);
    bool fits = s.size() == first.size();
    for (std::size_t d = 0; fits && d < s.size(); ++d) fits = d == axis || s[d] == first[d];
    if (!fits) ctx.fail("input shapes " + to_string(first) + " and " + to_string(s) + " differ outside the axis");
    y[axis] += s[axis];
    chunks.push_back(element_count(Shape(s.begin() + static_cast<std::ptrdiff_t>(axis), s.end())));
  }
  ctx.expect_output_shape(0, y);
  return std::make_unique<ChunkLayer>(true, element_count(Shape(first.begin(), first.begin() + static_cast<std::ptrdiff_t>(axis))),
                                      std::move(chunks));
}

std::unique_ptr<Layer> make_split(const LayerContext& ctx) {
  ctx.expect_inputs(1, 1);
  const Shape& x = ctx.input_shape(0);
  const auto axis = static_cast<std::size_t>(checked_axis(ctx, ctx.attrs().i("axis", 0), x.size()));
  const auto sizes = ctx.required_ints("split");
  ctx.expect_outputs(sizes.size());
  std::int64_t total = 0;
  for (auto s : sizes) total += s;
  if (total != x[axis] || std::any_of(sizes.begin(), sizes.end(), [](std::int64_t s) { return s < 0; }))
    ctx.fail("split sizes do not add up to the axis length " + std::to_string(x[axis]));
  const std::int64_t inner = element_count(Shape(x.begin() + static_cast<std::ptrdiff_t>(axis) + 1, x.end()));
  std::vector<std::int64_t> chunks;
  for (std::size_t o = 0; o < sizes.size(); ++o) {
    Shape y = x;
    y[axis] = sizes[o];
    ctx.expect_output_shape(o, y);
    chunks.push_back(sizes[o] * inner);
  }
  return std::make_unique<ChunkLayer>(false, element_count(Shape(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(axis))),
                                      std::move(chunks));
}

std::unique_ptr<Layer> make_slice(const LayerContext& ctx) {
  ctx.expect_inputs(1, 1);
  ctx.expect_outputs(1);
  const Shape& x = ctx.input_shape(0);
  const auto starts = ctx.required_ints("starts"), ends = ctx.required_ints("ends");
  const auto steps = ctx.attrs().ints("steps", std::vector<std::int64_t>(x.size(), 1));
  if (starts.size() != x.size() || ends.size() != x.size() || steps.size() != x.size())
    ctx.fail("starts, ends and steps need one value per input dimension (" + std::to_string(x.size()) + ")");
  const auto strides = contiguous_strides(x);
  StridedView view;
  for (std::size_t d = 0; d < x.size(); ++d) {
    const std::int64_t step = steps[d];
    if (step == 0) ctx.fail("steps must not be 0");
    // ONNX's clamping (idempotent on what prepare() already clamped).
    const std::int64_t start = step > 0 ? std::clamp<std::int64_t>(starts[d], 0, x[d]) : std::clamp<std::int64_t>(starts[d], 0, x[d] - 1);
    const std::int64_t end = step > 0 ? std::clamp<std::int64_t>(ends[d], 0, x[d]) : std::clamp<std::int64_t>(ends[d], -1, x[d] - 1);
    const std::int64_t span = step > 0 ? end - start : start - end;
    const std::int64_t magnitude = step > 0 ? step : -step;
    view.dims.push_back(std::max<std::int64_t>(0, (span + magnitude - 1) / magnitude));
    view.strides.push_back(step * strides[d]);
    if (view.dims.back() > 0) view.offset += start * strides[d];
  }
  ctx.expect_output_shape(0, view.dims);
  return std::make_unique<StridedCopyLayer>(collapse(view));
}

std::unique_ptr<Layer> make_pad(const LayerContext& ctx) {
  ctx.expect_inputs(1, 1);
  ctx.expect_outputs(1);
  const Shape& x = ctx.input_shape(0);
  const auto pads = ctx.required_ints("pads");
  if (pads.size() != 2 * x.size()) ctx.fail("pads needs " + std::to_string(2 * x.size()) + " values (begins, then ends)");
  if (x.size() > kMaxRank) ctx.fail("more than " + std::to_string(kMaxRank) + " dimensions are not supported");
  const std::string mode = ctx.attrs().s("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    ctx.fail("mode '" + mode + "' is not supported (constant, reflect, edge)");
  Shape y(x.size());
  std::vector<std::vector<std::int64_t>> sources(x.size());
  for (std::size_t d = 0; d < x.size(); ++d) {
    const std::int64_t begin = pads[d], n = x[d];
    y[d] = n + begin + pads[d + x.size()];
    if (y[d] < 0) ctx.fail("negative pads remove more than dimension " + std::to_string(d) + " holds");
    if (mode != "constant" && n == 0 && y[d] > 0) ctx.fail("cannot " + mode + "-pad an empty dimension");
    for (std::int64_t o = 0; o < y[d]; ++o) {
      std::int64_t i = o - begin;
      if (i < 0 || i >= n) {
        if (mode == "constant") {
          i = -1;
        } else if (mode == "edge") {
          i = std::clamp<std::int64_t>(i, 0, n - 1);
        } else if (n == 1) {
          i = 0;
        } else {  // reflect without repeating the edge, as often as the padding needs (numpy)
          const std::int64_t period = 2 * (n - 1);
          i = ((i % period) + period) % period;
          if (i >= n) i = period - i;
        }
      }
      sources[d].push_back(i);
    }
  }
  ctx.expect_output_shape(0, y);
  if (std::all_of(pads.begin(), pads.end(), [](std::int64_t p) { return p == 0; }))
    return std::make_unique<CopyLayer>(element_count(y));  // nothing padded (Swin's windows that fit)
  return std::make_unique<PadLayer>(y, contiguous_strides(x), std::move(sources), ctx.attrs().f("value", 0.0f));
}

}  // namespace sluice::nn::cpu
