// Attention (nn/graph.hpp): Y = softmax(scale * Q K^T + M) V over the keys with f32 accumulation: the twin the
// CUDA kernels are tested against. Per batch two sgemm products around an f32 softmax; batches run in parallel
// (OpenMP where the compiler offers it, as oneDNN's primitives do). Operands are read and written through a batch
// offset and a row stride, so one held with its sequence axis elsewhere ("seq_axis", see graph.hpp) or one part
// of a packed input ("packed_axis") needs no copy.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include "nn/cpu/layer.hpp"
#include "nn/cpu/softmax_exp.hpp"

namespace sluice::nn::cpu {
namespace {

// Where row r of flat batch b of an operand starts: batch[b] + r * row.
struct OperandStrides {
  std::vector<std::int64_t> batch;
  std::int64_t row = 0;
};

class AttentionLayer final : public Layer {
 public:
  AttentionLayer(std::int64_t batches, std::int64_t rows, std::int64_t keys, std::int64_t depth,
                 std::int64_t value_depth, float scale, std::vector<std::int64_t> mask_batch_offset,
                 std::int64_t mask_row_stride, std::int64_t mask_key_stride, OperandStrides (&strides)[4])
      : batches_(batches), rows_(rows), keys_(keys), depth_(depth), value_depth_(value_depth), scale_(scale),
        mask_batch_offset_(std::move(mask_batch_offset)), mask_row_stride_(mask_row_stride),
        mask_key_stride_(mask_key_stride), q_(std::move(strides[0])), k_(std::move(strides[1])), v_(std::move(strides[2])),
        y_(std::move(strides[3])) {}

  std::size_t scratch_floats() const override { return static_cast<std::size_t>(batches_ * rows_ * keys_); }

  void run(const float* const* in, float* const* out, float* scratch) const override {
    const float *q = in[0], *k = in[1], *v = in[2], *mask = in[3];
    float* y = out[0];
    // Each batch: its scores on oneDNN's sgemm, the softmax row by row in f32, the weighted sum of V on sgemm.
    // Batches run in parallel where OpenMP is on (each sgemm then on one thread), else each sgemm on all cores.
    // A failed sgemm (oneDNN's packing buffers) is thrown after the loop: never out of a parallel region.
    std::atomic<dnnl_status_t> failure{dnnl_success};
#if defined(_OPENMP)
#pragma omp parallel for schedule(static)
#endif
    for (std::int64_t b = 0; b < batches_; ++b) {
      float* scores = scratch + b * rows_ * keys_;
      dnnl_status_t status = dnnl_sgemm('N', 'T', rows_, keys_, depth_, scale_, q + q_.batch[static_cast<std::size_t>(b)], q_.row,
                                        k + k_.batch[static_cast<std::size_t>(b)], k_.row, 0.f, scores, keys_);
      if (status != dnnl_success) {
        failure = status;
        continue;
      }
      for (std::int64_t t = 0; t < rows_; ++t) {
        float* row = scores + t * keys_;
        if (mask) {
          const float* m = mask + mask_batch_offset_[static_cast<std::size_t>(b)] + t * mask_row_stride_;
          for (std::int64_t j = 0; j < keys_; ++j) row[j] += m[j * mask_key_stride_];
        }
        const float max = *std::max_element(row, row + keys_);
        // A row masked out entirely (every score -inf) gives NaN, as softmax over it does in ONNX Runtime.
        const float inverse = 1.0f / exp_shifted_row(row, row, keys_, max);
        for (std::int64_t j = 0; j < keys_; ++j) row[j] *= inverse;
      }
      status = dnnl_sgemm('N', 'N', rows_, value_depth_, keys_, 1.f, scores, keys_, v + v_.batch[static_cast<std::size_t>(b)], v_.row, 0.f,
                          y + y_.batch[static_cast<std::size_t>(b)], y_.row);
      if (status != dnnl_success) failure = status;
    }
    if (failure != dnnl_success) throw ModelError(std::string("oneDNN sgemm failed in attention: ") + dnnl_status2str(failure));
  }

 private:
  std::int64_t batches_, rows_, keys_, depth_, value_depth_;
  float scale_;
  std::vector<std::int64_t> mask_batch_offset_;  // where each batch's [rows, keys] block of M starts
  std::int64_t mask_row_stride_, mask_key_stride_;
  OperandStrides q_, k_, v_, y_;
};

}  // namespace

std::unique_ptr<Layer> make_attention(const LayerContext& ctx) {
  ctx.expect_inputs(3, 4);
  ctx.expect_outputs(1);
  // Where each operand holds its sequence axis (graph.hpp "seq_axis"); absent: every one at rank - 2.
  const std::vector<std::int64_t> seq_axis = ctx.attrs().ints("seq_axis", {});
  if (!seq_axis.empty() && seq_axis.size() != 4) ctx.fail("seq_axis must be four dim indices (Q, K, V, Y)");
  const auto sequence_axis = [&](std::size_t which, std::size_t held_rank) {
    if (held_rank < 3) ctx.fail("Q, K, V and Y must have at least 3 dims");
    const std::int64_t axis = seq_axis.empty() ? static_cast<std::int64_t>(held_rank) - 2 : seq_axis[which];
    if (axis < 0 || axis > static_cast<std::int64_t>(held_rank) - 2)
      ctx.fail("seq_axis " + std::to_string(axis) + " out of range for a held operand of rank " + std::to_string(held_rank));
    return static_cast<std::size_t>(axis);
  };
  // Each operand as logical [B.., L, w] (the held dims with the sequence axis moved to rank - 2) with its element
  // strides in its input: a packed input [.., parts, .., w] holds Q, K and V as parts of the "packed_axis"
  // (graph.hpp).
  const std::int64_t packed_axis = ctx.attrs().i("packed_axis", -1);
  const std::vector<std::int64_t> packed_part = ctx.attrs().ints("packed_part", {});
  if (packed_axis >= 0 && packed_part.size() != 3) ctx.fail("packed_part must be three part indices (Q, K, V)");
  struct Held {
    Shape shape, stride;
    std::int64_t offset = 0;
  };
  auto held = [&](const Shape& s, std::size_t which) {
    Held h{s, Shape(s.size()), 0};
    for (std::size_t d = s.size(), step = 1; d-- > 0;) {
      h.stride[d] = static_cast<std::int64_t>(step);
      step *= static_cast<std::size_t>(s[d]);
    }
    if (which < 3 && packed_axis >= 0) {
      const auto axis = static_cast<std::size_t>(packed_axis);
      const std::int64_t part = packed_part[which];
      if (axis + 2 >= s.size() || part < 0 || part >= s[axis]) ctx.fail("packed_axis or packed_part out of range");
      h.offset = part * h.stride[axis];
      h.shape.erase(h.shape.begin() + packed_axis);
      h.stride.erase(h.stride.begin() + packed_axis);
    }
    const auto axis = static_cast<std::ptrdiff_t>(sequence_axis(which, h.shape.size()));
    std::rotate(h.shape.begin() + axis, h.shape.begin() + axis + 1, h.shape.end() - 1);
    std::rotate(h.stride.begin() + axis, h.stride.begin() + axis + 1, h.stride.end() - 1);
    return h;
  };
  const Held held_q = held(ctx.input_shape(0), 0), held_k = held(ctx.input_shape(1), 1),
             held_v = held(ctx.input_shape(2), 2);
  const Shape &q = held_q.shape, &k = held_k.shape, &v = held_v.shape;
  const std::size_t rank = q.size();
  if (rank < 3 || k.size() != rank || v.size() != rank) ctx.fail("Q, K and V must have the same rank, at least 3");
  if (!std::equal(q.begin(), q.end() - 2, k.begin()) || !std::equal(q.begin(), q.end() - 2, v.begin()))
    ctx.fail("Q, K and V must have the same leading dims");
  const std::int64_t rows = q[rank - 2], depth = q[rank - 1], keys = k[rank - 2], value_depth = v[rank - 1];
  if (k[rank - 1] != depth || v[rank - 2] != keys) ctx.fail("K must be [.., keys, " + std::to_string(depth) +
                                                            "] and V [.., keys, dv]");
  Shape y(q.begin(), q.end() - 1);
  y.push_back(value_depth);
  Shape y_held = y;  // Y [B.., T, dv] held with T at its sequence axis
  const auto y_axis = static_cast<std::ptrdiff_t>(sequence_axis(3, y.size()));
  std::rotate(y_held.begin() + y_axis, y_held.end() - 2, y_held.end() - 1);
  ctx.expect_output_shape(0, y_held);
  const Shape batch_dims(q.begin(), q.end() - 2);
  const std::int64_t batches = element_count(batch_dims);
  OperandStrides strides[4];
  const Held operands[4] = {held_q, held_k, held_v, held(y_held, 3)};
  for (std::size_t i = 0; i < 4; ++i) {
    const Held& h = operands[i];
    strides[i].row = h.stride[rank - 2];
    strides[i].batch.resize(static_cast<std::size_t>(batches));
    for (std::int64_t b = 0; b < batches; ++b) {
      std::int64_t rest = b, offset = h.offset;
      for (std::size_t d = rank - 2; d-- > 0;) {
        offset += (rest % h.shape[d]) * h.stride[d];
        rest /= h.shape[d];
      }
      strides[i].batch[static_cast<std::size_t>(b)] = offset;
    }
  }
  // M broadcast to [batch dims, rows, keys] (numpy rules): a stride per dim, 0 where it repeats.
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(batches), 0);
  std::int64_t row_stride = 0, key_stride = 0;
  if (ctx.has_input(3)) {
    const Shape& m = ctx.input_shape(3);
    Shape scores = batch_dims;
    scores.push_back(rows);
    scores.push_back(keys);
    if (m.size() > scores.size()) ctx.fail("the bias has more dims than the scores");
    std::vector<std::int64_t> stride(scores.size(), 0);
    std::int64_t step = 1;
    for (std::size_t i = m.size(); i-- > 0;) {
      const std::size_t d = scores.size() - m.size() + i;
      if (m[i] != 1 && m[i] != scores[d]) ctx.fail("the bias " + to_string(m) + " does not broadcast to " + to_string(scores));
      stride[d] = m[i] == 1 ? 0 : step;
      step *= m[i];
    }
    row_stride = stride[rank - 2];
    key_stride = stride[rank - 1];
    for (std::int64_t b = 0; b < batches; ++b) {
      std::int64_t rest = b, offset = 0;
      for (std::size_t d = batch_dims.size(); d-- > 0;) {
        offset += (rest % batch_dims[d]) * stride[d];
        rest /= batch_dims[d];
      }
      offsets[static_cast<std::size_t>(b)] = offset;
    }
  }
  return std::make_unique<AttentionLayer>(batches, rows, keys, depth, value_depth, ctx.attrs().f("scale", 1.f),
                                          std::move(offsets), row_stride, key_stride, strides);
}

}  // namespace sluice::nn::cpu
