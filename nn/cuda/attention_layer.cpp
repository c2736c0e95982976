// The Attention node (nn/graph.hpp), one of three ways, chosen in one place (choose_attention_path):
//  * flash: sluice's FlashAttention-2 kernel on mma.sync (attention_flash.cu; f16/bf16, sm_80+, depth == value
//    depth in {32, 64, 128}), which never writes the scores;
//  * products: cuBLAS products around a softmax kernel (the scores [B, T, S] in the scratch block);
//  * fused: sluice's older fused kernel (attention.cu: WMMA, or CUDA cores for f32 and other depths), also
//    without the scores. It stays for what flash does not take (f32, other depths, depth != value depth, GPUs
//    before sm_80) once the scores outgrow the scratch limit. Measured on the H200 at ViT-B/16 sizes, f16 batch
//    64, the products beat it (0.31 vs 0.44 ms a ViT layer).
// Q, K, V and Y are read and written in place when row-major (the usual case: nhwc_values leaves attention
// tensors so); a 4-D NHWC operand is staged through the scratch block. The bias M is read through broadcast strides.
// Sequence-first operands ([S, B, d], graph.hpp) are read and written in place by the products and by flash (rows
// B*d apart, batches d apart); the older fused kernel takes them staged into row-major order. Q, K and V that are
// parts of one packed input ("packed_axis", graph.hpp) are read in place by flash (batch dims [N.., heads], the N..
// merging into one:
// AttentionOperandStrides::skip) and staged into row-major order by the other paths.
#include <algorithm>

#include "nn/cuda/gemm.hpp"
#include "nn/cuda/layer.hpp"

namespace sluice::nn::cuda {
namespace {

std::size_t align256(std::size_t b) { return (b + 255) / 256 * 256; }

enum class AttentionPath { products, fused, flash };

// The one place that decides how an Attention node runs (CudaEngineOptions::attention documents the modes).
AttentionPath choose_attention_path(CudaEngineOptions::AttentionMode mode, bool flash_runs, std::size_t scores_bytes,
                                    std::size_t scores_limit) {
  using Mode = CudaEngineOptions::AttentionMode;
  switch (mode) {
    case Mode::gemm: return AttentionPath::products;
    case Mode::fused: return AttentionPath::fused;
    case Mode::flash:
    case Mode::automatic:
      if (flash_runs) return AttentionPath::flash;
      break;
  }
  return scores_bytes <= scores_limit ? AttentionPath::products : AttentionPath::fused;
}

class AttentionLayer : public Layer {
 public:
  AttentionLayer(const Node& node, BuildContext& ctx) : Layer(node), values_(ctx.values) {
    const auto fail = [&](const std::string& what) {
      throw ModelError(ctx.graph.source + ": " + node.where() + ": " + what);
    };
    if (node.inputs.size() < 3) fail("expects Q, K, V[, M]");
    q_ = ctx.values.id(node.inputs[0]);
    k_ = ctx.values.id(node.inputs[1]);
    v_ = ctx.values.id(node.inputs[2]);
    if (node.inputs.size() > 3 && !node.inputs[3].empty()) mask_ = ctx.values.id(node.inputs[3]);
    y_ = ctx.values.id(node.outputs.at(0));
    for (int id : {q_, k_, v_, mask_})
      if (id >= 0 && values_.slot(id).constant) ctx.constant(values_.slot(id).name);
    seq_first_ = node.attrs.ints("seq_first", {0, 0, 0, 0});
    packed_axis_ = node.attrs.i("packed_axis", -1);
    packed_part_ = node.attrs.ints("packed_part", {});
    if (packed_axis_ >= 0) {
      if (packed_part_.size() != 3) fail("packed_part must be three part indices (Q, K, V)");
      for (int which = 0; which < 3; ++which) {
        const Shape& s = values_.slot(operand_id(which)).shape;
        const std::int64_t part = packed_part_[static_cast<std::size_t>(which)];
        if (static_cast<std::size_t>(packed_axis_) + 2 >= s.size() || part < 0 || part >= s[static_cast<std::size_t>(packed_axis_)])
          fail("packed_axis or packed_part out of range");
      }
    }
    if (seq_first_.size() != 4 || std::any_of(seq_first_.begin(), seq_first_.end(), [](auto f) { return f != 0 && f != 1; }))
      fail("seq_first must be four flags (Q, K, V, Y), each 0 or 1");
    for (int which = 0; which < 4; ++which)
      if (seq_first_[static_cast<std::size_t>(which)] && held_shape(which, values_.slot(operand_id(which)).shape).size() < 3)
        fail("a sequence-first operand must have at least 3 dims");
    const Shape q = logical(0, values_.slot(q_).shape), k = logical(1, values_.slot(k_).shape),
                v = logical(2, values_.slot(v_).shape);
    const std::size_t rank = q.size();
    if (rank < 3 || rank > kMaxRank || k.size() != rank || v.size() != rank) fail("Q, K and V need one rank, 3 to 6");
    if (!std::equal(q.begin(), q.end() - 2, k.begin()) || !std::equal(q.begin(), q.end() - 2, v.begin()))
      fail("Q, K and V must have the same leading dims");
    if (k[rank - 1] != q[rank - 1] || v[rank - 2] != k[rank - 2]) fail("K must be [.., S, d] and V [.., S, dv]");
    if (v[rank - 1] > 256) fail("value depth above 256");
    if (mask_ >= 0 && values_.slot(mask_).shape.size() > rank) fail("the bias has more dims than the scores");
    for (std::int64_t n : {element_count(Shape(q.begin(), q.end() - 2)), q[rank - 2], k[rank - 2], q[rank - 1]})
      if (n > 0x7fffffff) fail("a dim above 2^31");
    scale_ = node.attrs.f("scale", 1.f);
    const std::size_t scores = static_cast<std::size_t>(element_count(values_.slot(y_).shape) / v[rank - 1] * k[rank - 2]) *
                               values_.element_bytes();
    const bool flash_runs = attention_flash_supported(values_.type(), static_cast<int>(q[rank - 1]),
                                                      static_cast<int>(v[rank - 1]));
    path_ = choose_attention_path(ctx.attention_mode, flash_runs, scores, ctx.attention_scores_limit);
    scores_bytes_ = path_ == AttentionPath::products ? scores : 0;
  }

  std::string partial_batch_problem() const override {
    if (std::count(seq_first_.begin(), seq_first_.end(), 1)) return "sequence-first attention operands (batch in dim 1)";
    return mask_ >= 0 && values_.slot(mask_).batched ? "an attention bias with a batch dimension" : "";
  }

  std::size_t scratch_bytes() const override {
    std::size_t total = align256(scores_bytes_);
    for (int which = 0; which < 4; ++which)
      if (staged(which)) total += align256(operand_bytes(which));
    return total;
  }

  void run(const RunContext& ctx) override {
    auto* scratch = static_cast<std::byte*>(ctx.scratch);
    void* scores = scratch;
    scratch += align256(scores_bytes_);
    auto row_major = [](View v) {
      for (int i = v.rank - 1, s = 1; i >= 0; --i) {
        v.stride[i] = s;
        s *= static_cast<int>(v.shape[i]);
      }
      v.offset = 0;
      return v;
    };
    auto natural = [&](int which) -> void* {  // the operand in row-major order, or in place
      const int id = operand_id(which);
      if (packed(which) && !staged(which))  // the part's first element
        return static_cast<std::byte*>(ctx.at(id)) + logical_view(which, ctx.count).offset * values_.element_bytes();
      if (!staged(which)) return ctx.at(id);
      void* dst = scratch;
      scratch += align256(operand_bytes(which));
      if (id != y_) {
        const View src = logical_view(which, ctx.count);
        remap_copy(values_.type(), dst, row_major(src), values_.type(), ctx.at(id), src, ctx.stream);
      }
      return dst;
    };
    const void *q = natural(0), *k = natural(1), *v = natural(2);
    void* y = natural(3);
    const Shape qs = logical(0, values_.shape_at(q_, ctx.count)), ks = logical(1, values_.shape_at(k_, ctx.count)),
                vs = logical(2, values_.shape_at(v_, ctx.count));
    const std::size_t rank = qs.size();
    AttentionShape s;
    s.batches = static_cast<int>(element_count(Shape(qs.begin(), qs.end() - 2)));
    s.rows = static_cast<int>(qs[rank - 2]);
    s.depth = static_cast<int>(qs[rank - 1]);
    s.keys = static_cast<int>(ks[rank - 2]);
    s.value_depth = static_cast<int>(vs[rank - 1]);
    s.scale = scale_;
    s.batch_rank = static_cast<int>(rank - 2);
    for (std::size_t d = 0; d + 2 < rank; ++d) s.batch_shape[d] = static_cast<int>(qs[d]);
    const void* mask = nullptr;
    if (mask_ >= 0) {  // numpy broadcasting of M against [batch dims, T, S], right-aligned
      const View m = values_.view(mask_, ctx.count);
      const int lead = static_cast<int>(rank) - m.rank;
      std::int64_t stride[kMaxRank] = {};
      for (int d = 0; d < m.rank; ++d) stride[lead + d] = m.shape[d] == 1 ? 0 : m.stride[d];
      for (std::size_t d = 0; d + 2 < rank; ++d) s.mask_batch_stride[d] = stride[d];
      s.mask_row_stride = stride[rank - 2];
      s.mask_key_stride = stride[rank - 1];
      mask = static_cast<const std::byte*>(ctx.at(mask_)) + m.offset * static_cast<std::int64_t>(values_.element_bytes());
    }
    const std::int64_t rows = s.rows, keys = s.keys, depth = s.depth, dv = s.value_depth;
    AttentionStrides strides{operand_strides(0, s.batches, rows, depth, ctx.count),
                             operand_strides(1, s.batches, keys, depth, ctx.count),
                             operand_strides(2, s.batches, keys, dv, ctx.count),
                             operand_strides(3, s.batches, rows, dv, ctx.count)};
    if (packed_in_place()) strides.heads = s.batch_rank >= 2 ? s.batch_shape[s.batch_rank - 1] : 1;
    if (path_ == AttentionPath::flash) {
      attention_flash(values_.type(), y, q, k, v, mask, s, strides, ctx.stream);
    } else if (path_ == AttentionPath::products) {  // scores = Q K^T (batched), softmax(scale * scores + M), Y = P V
      const DType t = values_.type();
      row_major_gemm_strided(ctx.cublas, t, false, true, rows, keys, depth, 1.f, {q, strides.q.row, strides.q.batch},
                             {k, strides.k.row, strides.k.batch}, 0.f, scores, keys, rows * keys, s.batches);
      attention_softmax(t, scores, mask, s, ctx.stream);
      row_major_gemm_strided(ctx.cublas, t, false, false, rows, dv, keys, 1.f, {scores, keys, rows * keys},
                             {v, strides.v.row, strides.v.batch}, 0.f, y, strides.y.row, strides.y.batch, s.batches);
    } else {
      attention(values_.type(), y, q, k, v, mask, s, ctx.stream);
    }
    if (y != ctx.at(y_)) {
      const View dst = logical_view(3, ctx.count);
      remap_copy(values_.type(), ctx.at(y_), dst, values_.type(), y, row_major(dst), ctx.stream);
    }
  }

  std::string kernel() const override {
    if (path_ == AttentionPath::products)
      return "attention as cublasGemmStridedBatchedEx + softmax kernel + cublasGemmStridedBatchedEx";
    if (path_ == AttentionPath::flash)
      return "flash attention (mma.sync m16n8k16, depth " + std::to_string(values_.slot(v_).shape.back()) + ")";
    AttentionShape s;
    const Shape q = logical(0, values_.slot(q_).shape), &v = values_.slot(v_).shape;
    s.batches = static_cast<int>(element_count(Shape(q.begin(), q.end() - 2)));
    s.depth = static_cast<int>(q.back());
    s.value_depth = static_cast<int>(v.back());
    return attention_uses_tensor_cores(values_.type(), s) ? "fused attention (tensor cores)"
                                                          : "fused attention (CUDA cores)";
  }

 private:
  int operand_id(int which) const { return which == 0 ? q_ : which == 1 ? k_ : which == 2 ? v_ : y_; }
  bool packed(int which) const { return which < 3 && packed_axis_ >= 0; }
  // Staged through the scratch block: NHWC operands, parts of a packed input, and sequence-first ones for the
  // older fused kernel.
  // Flash reads parts of a packed input through strides when the batch dims are [N, heads] or fewer, or more
  // whose leading ones merge into one N (each dim's stride the next one's extent times its stride, as in Swin's
  // shifted windows [batch, windows, heads]: the Attention on the split batch, graph.hpp).
  bool packed_in_place() const {
    if (packed_axis_ < 0 || path_ != AttentionPath::flash) return false;
    for (int which = 0; which < 3; ++which) {
      const View v = logical_view(which, 1);
      for (int d = 0; d + 4 < v.rank; ++d)
        if (v.stride[d] != v.shape[d + 1] * v.stride[d + 1]) return false;
    }
    return true;
  }
  bool staged(int which) const {
    return values_.slot(operand_id(which)).nhwc || (packed(which) && !packed_in_place()) ||
           (path_ == AttentionPath::fused && seq_first_[static_cast<std::size_t>(which)]);
  }
  // The operand's own bytes (a part of a packed input is a third of it).
  std::size_t operand_bytes(int which) const {
    const ValueSlot& slot = values_.slot(operand_id(which));
    if (!packed(which)) return slot.bytes;
    return static_cast<std::size_t>(element_count(held_shape(which, slot.shape))) * values_.element_bytes();
  }
  // The operand as held: its input's shape, less the parts axis of a packed input.
  Shape held_shape(int which, Shape s) const {
    if (packed(which)) s.erase(s.begin() + packed_axis_);
    return s;
  }
  // Where the rows of an operand [B, length, width] are as run: a part of a packed input or a sequence-first one
  // in place, else row-major (as held, or staged so).
  AttentionOperandStrides operand_strides(int which, std::int64_t batches, std::int64_t length, std::int64_t width,
                                          int count) const {
    if (packed(which) && !staged(which)) {  // logical [N, heads, L, w] or [B, L, w] through the input's strides
      const View v = logical_view(which, count);
      if (v.rank == 3) return {v.stride[0], v.stride[1], 0};
      const int n = v.rank - 4;  // [N.., heads, L, w]: the leading dims merge into N (packed_in_place)
      return {v.stride[n + 1], v.stride[n + 2], v.stride[n] - v.shape[n + 1] * v.stride[n + 1]};
    }
    if (seq_first_[static_cast<std::size_t>(which)] && !staged(which)) return {width, batches * width, 0};
    return {length * width, width, 0};
  }
  // The operand's shape as [B.., S, d] (a sequence-first one [S, B.., d] with its first dim moved back).
  Shape logical(int which, Shape input) const {
    Shape held = held_shape(which, std::move(input));
    if (seq_first_.size() == 4 && seq_first_[static_cast<std::size_t>(which)])
      std::rotate(held.begin(), held.begin() + 1, held.end() - 1);
    return held;
  }
  // The held value seen in [B.., S, d] order (strides follow), for staging copies.
  View logical_view(int which, int count) const {
    View v = values_.view(operand_id(which), count);
    if (packed(which)) {  // index packed_part of the parts axis
      const int axis = static_cast<int>(packed_axis_);
      v.offset += packed_part_[static_cast<std::size_t>(which)] * v.stride[axis];
      std::copy(v.shape + axis + 1, v.shape + v.rank, v.shape + axis);
      std::copy(v.stride + axis + 1, v.stride + v.rank, v.stride + axis);
      --v.rank;
    }
    if (seq_first_[static_cast<std::size_t>(which)]) {
      std::rotate(v.shape, v.shape + 1, v.shape + v.rank - 1);
      std::rotate(v.stride, v.stride + 1, v.stride + v.rank - 1);
    }
    return v;
  }

  const ValueTable& values_;
  std::vector<std::int64_t> seq_first_;
  std::int64_t packed_axis_ = -1;
  std::vector<std::int64_t> packed_part_;
  int q_ = -1, k_ = -1, v_ = -1, mask_ = -1, y_ = -1;
  float scale_ = 1.f;
  AttentionPath path_ = AttentionPath::products;
  std::size_t scores_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Layer> make_attention(const Node& node, BuildContext& ctx) {
  return std::make_unique<AttentionLayer>(node, ctx);
}

}  // namespace sluice::nn::cuda
