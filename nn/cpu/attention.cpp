// Attention (nn/graph.hpp): Y = softmax(scale * Q K^T + M) V over the keys with f32 accumulation: the twin the
// CUDA kernels are tested against. Per batch two sgemm products around an f32 softmax; batches run in parallel
// (OpenMP where the compiler offers it, as oneDNN's primitives do). Operands are read and written through a batch
// and a row stride, so a sequence-first one ([S, B.., d], see graph.hpp) needs no copy.
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

// Where row r of batch b of an operand starts: b * batch + r * row.
struct OperandStrides {
  std::int64_t batch = 0, row = 0;
};

class AttentionLayer final : public Layer {
 public:
  AttentionLayer(std::int64_t batches, std::int64_t rows, std::int64_t keys, std::int64_t depth,
                 std::int64_t value_depth, float scale, std::vector<std::int64_t> mask_batch_offset,
                 std::int64_t mask_row_stride, std::int64_t mask_key_stride, const OperandStrides (&strides)[4])
      : batches_(batches), rows_(rows), keys_(keys), depth_(depth), value_depth_(value_depth), scale_(scale),
        mask_batch_offset_(std::move(mask_batch_offset)), mask_row_stride_(mask_row_stride),
        mask_key_stride_(mask_key_stride), q_(strides[0]), k_(strides[1]), v_(strides[2]), y_(strides[3]) {}

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
      dnnl_status_t status = dnnl_sgemm('N', 'T', rows_, keys_, depth_, scale_, q + b * q_.batch, q_.row,
                                        k + b * k_.batch, k_.row, 0.f, scores, keys_);
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
      status = dnnl_sgemm('N', 'N', rows_, value_depth_, keys_, 1.f, scores, keys_, v + b * v_.batch, v_.row, 0.f,
                          y + b * y_.batch, y_.row);
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
  // Logical shapes [B.., S, d]: a sequence-first operand [S, B.., d] with its first dim moved back.
  std::vector<std::int64_t> seq_first = ctx.attrs().ints("seq_first", {0, 0, 0, 0});
  if (seq_first.size() != 4 || std::any_of(seq_first.begin(), seq_first.end(), [](auto f) { return f != 0 && f != 1; }))
    ctx.fail("seq_first must be four flags (Q, K, V, Y), each 0 or 1");
  auto logical = [&](Shape s, std::size_t which) {
    if (seq_first[which]) {
      if (s.size() < 3) ctx.fail("a sequence-first operand must have at least 3 dims, got " + to_string(s));
      std::rotate(s.begin(), s.begin() + 1, s.end() - 1);
    }
    return s;
  };
  const Shape q = logical(ctx.input_shape(0), 0), k = logical(ctx.input_shape(1), 1), v = logical(ctx.input_shape(2), 2);
  const std::size_t rank = q.size();
  if (rank < 3 || k.size() != rank || v.size() != rank) ctx.fail("Q, K and V must have the same rank, at least 3");
  if (!std::equal(q.begin(), q.end() - 2, k.begin()) || !std::equal(q.begin(), q.end() - 2, v.begin()))
    ctx.fail("Q, K and V must have the same leading dims");
  const std::int64_t rows = q[rank - 2], depth = q[rank - 1], keys = k[rank - 2], value_depth = v[rank - 1];
  if (k[rank - 1] != depth || v[rank - 2] != keys) ctx.fail("K must be [.., keys, " + std::to_string(depth) +
                                                            "] and V [.., keys, dv]");
  Shape y(q.begin(), q.end() - 1);
  y.push_back(value_depth);
  Shape y_held = y;  // Y [B.., T, dv] held sequence-first: [T, B.., dv]
  if (seq_first[3]) std::rotate(y_held.begin(), y_held.end() - 2, y_held.end() - 1);
  ctx.expect_output_shape(0, y_held);
  const Shape batch_dims(q.begin(), q.end() - 2);
  const std::int64_t batches = element_count(batch_dims);
  OperandStrides strides[4];
  const std::int64_t widths[4] = {depth, depth, value_depth, value_depth}, lengths[4] = {rows, keys, keys, rows};
  for (std::size_t i = 0; i < 4; ++i)
    strides[i] = seq_first[i] ? OperandStrides{widths[i], batches * widths[i]}
                              : OperandStrides{lengths[i] * widths[i], widths[i]};
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
