// Layers that run the backend's own kernels (kernels.cuh): activations, elementwise math, broadcasting arithmetic,
// reductions, layer norm, standalone batch norm, pools, data movement (reshape, transpose, concat, split, slice, pad),
// softmax and log softmax, resize, ArgMax/ArgMin/TopK, GatherElements, GridSample.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "nn/cuda/layer.hpp"
#include "nn/sampling_math.hpp"

namespace sluice::nn::cuda {
namespace {

std::string fail(const BuildContext& ctx, const Node& node, const std::string& what) {
  return ctx.graph.source + ": " + node.where() + ": " + what;
}

class ActivationLayer : public Layer {
 public:
  ActivationLayer(const Node& node, BuildContext& ctx) : Layer(node), values_(ctx.values) {
    x_ = ctx.values.id(node.inputs.at(0));
    y_ = ctx.values.id(node.outputs.at(0));
    act_ = activation_params(node.op, node.attrs);  // the op table's parameter names and defaults
  }
  void run(const RunContext& ctx) override {
    activation(values_.type(), ctx.at(y_), ctx.at(x_), element_count(values_.shape_at(y_, ctx.count)), act_,
               ctx.stream);
  }
  std::string kernel() const override { return "activation"; }

 private:
  const ValueTable& values_;
  int x_, y_;
  ActivationParams act_;
};

class BinaryLayer : public Layer {
 public:
  BinaryLayer(const Node& node, BuildContext& ctx) : Layer(node), values_(ctx.values) {
    if (node.inputs.size() != 2) throw ModelError(fail(ctx, node, "expects two inputs"));
    a_ = ctx.values.id(node.inputs[0]);
    b_ = ctx.values.id(node.inputs[1]);
    y_ = ctx.values.id(node.outputs.at(0));
    type_ = values_.type(y_);  // f32 for index values (nn/exact_indices.hpp), whose operands are f32 too
    for (int id : {a_, b_}) {
      if (values_.slot(id).constant) (id == a_ ? a_const_ : b_const_) = ctx.constant_as(values_.slot(id).name, type_);
      else if (values_.type(id) != type_) throw ModelError(fail(ctx, node, "operand types differ"));
    }
    if (values_.slot(y_).shape.size() > kMaxRank) throw ModelError(fail(ctx, node, "more than 6 dimensions"));
    const auto op = binary_math_of(node.op);
    if (!op) throw ModelError(fail(ctx, node, "is not a binary arithmetic op"));
    op_ = *op;
  }
  void run(const RunContext& ctx) override {
    const Shape ys = values_.shape_at(y_, ctx.count);
    const int rank = static_cast<int>(ys.size());
    const auto order = values_.memory_order(y_);
    std::int64_t shape[kMaxRank], as[kMaxRank], bs[kMaxRank];
    auto operand_strides = [&](int id, std::int64_t* out) {
      const Shape s = values_.shape_at(id, ctx.count);
      const auto st = values_.strides(id, s);
      const int lead = rank - static_cast<int>(s.size());  // numpy: align on the right
      for (int i = 0; i < rank; ++i) {
        const int d = order[static_cast<std::size_t>(i)] - lead;
        out[i] = (d < 0 || s[static_cast<std::size_t>(d)] == 1) ? 0 : st[static_cast<std::size_t>(d)];
      }
    };
    for (int i = 0; i < rank; ++i) shape[i] = ys[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])];
    operand_strides(a_, as);
    operand_strides(b_, bs);
    binary(type_, op_, ctx.at(y_), rank, shape, a_const_ ? a_const_ : ctx.at(a_), as, b_const_ ? b_const_ : ctx.at(b_),
           bs, ctx.stream);
  }
  std::string kernel() const override { return type_ == values_.type() ? "binary (broadcast)" : "binary (broadcast, f32 indices)"; }

 private:
  const ValueTable& values_;
  int a_, b_, y_;
  DType type_;
  const void *a_const_ = nullptr, *b_const_ = nullptr;
  BinaryMath op_;
};

class UnaryMathLayer : public Layer {
 public:
  UnaryMathLayer(const Node& node, BuildContext& ctx, UnaryMath op) : Layer(node), values_(ctx.values), op_(op) {
    x_ = ctx.values.id(node.inputs.at(0));
    y_ = ctx.values.id(node.outputs.at(0));
    if (values_.slot(x_).nhwc != values_.slot(y_).nhwc) throw ModelError(fail(ctx, node, "input and output layouts differ"));
    if (values_.type(x_) != values_.type(y_)) throw ModelError(fail(ctx, node, "input and output types differ"));
  }
  void run(const RunContext& ctx) override {
    unary_math(values_.type(y_), ctx.at(y_), ctx.at(x_), element_count(values_.shape_at(y_, ctx.count)), op_, ctx.stream);
  }
  std::string kernel() const override { return "elementwise math"; }

 private:
  const ValueTable& values_;
  int x_, y_;
  UnaryMath op_;
};

// The RowSpace of x (rows: the dims not in `reduced`) and y: y has x's dims (LayerNormalization, keepdims) or
// only the kept ones. Size-1 dims go, reduced neighbours contiguous in both merge (logical order kept), and the
// kept dims are ordered outermost first in x's memory so that neighbouring rows sit side by side.
RowSpace row_space(const View& x, const View& y, const std::vector<bool>& reduced, bool y_has_all_dims) {
  struct Dim {
    std::int64_t size, x_stride, y_stride;
  };
  std::vector<Dim> kept, red;
  int next_y = 0;
  for (int d = 0; d < x.rank; ++d) {
    const bool r = reduced[static_cast<std::size_t>(d)];
    const std::int64_t ys = y_has_all_dims ? y.stride[d] : r ? 0 : y.stride[next_y++];
    if (x.shape[d] == 1) continue;
    auto& list = r ? red : kept;
    if (r && !list.empty() && list.back().x_stride == x.stride[d] * x.shape[d] &&
        list.back().y_stride == ys * x.shape[d]) {
      list.back() = {list.back().size * x.shape[d], x.stride[d], ys};
      continue;
    }
    list.push_back({x.shape[d], x.stride[d], ys});
  }
  std::stable_sort(kept.begin(), kept.end(), [](const Dim& a, const Dim& b) { return a.x_stride > b.x_stride; });
  RowSpace s;
  s.kept_rank = static_cast<int>(kept.size());
  s.reduced_rank = static_cast<int>(red.size());
  for (std::size_t i = 0; i < kept.size(); ++i) {
    s.kept_shape[i] = kept[i].size;
    s.kept_x_stride[i] = kept[i].x_stride;
    s.kept_y_stride[i] = kept[i].y_stride;
  }
  for (std::size_t i = 0; i < red.size(); ++i) {
    s.reduced_shape[i] = red[i].size;
    s.reduced_x_stride[i] = red[i].x_stride;
    s.reduced_y_stride[i] = red[i].y_stride;
  }
  return s;
}

class ReduceLayer : public Layer {
 public:
  ReduceLayer(const Node& node, BuildContext& ctx, ReduceMath op) : Layer(node), values_(ctx.values), op_(op) {
    x_ = ctx.values.id(node.inputs.at(0));
    y_ = ctx.values.id(node.outputs.at(0));
    reduced_.assign(values_.slot(x_).shape.size(), false);
    for (auto a : node.attrs.ints("axes")) {
      if (a < 0 || a >= static_cast<std::int64_t>(reduced_.size())) throw ModelError(fail(ctx, node, "axes out of range"));
      reduced_[static_cast<std::size_t>(a)] = true;
    }
    keepdims_ = node.attrs.i("keepdims", 1) != 0;
  }
  std::string partial_batch_problem() const override {
    return reduced_.at(0) && values_.slot(x_).batched ? "a reduction over the batch dimension" : "";
  }
  void run(const RunContext& ctx) override {
    reduce(values_.type(), op_, ctx.at(y_), ctx.at(x_),
           row_space(values_.view(x_, ctx.count), values_.view(y_, ctx.count), reduced_, keepdims_), ctx.stream);
  }
  std::string kernel() const override { return "reduce"; }

 private:
  const ValueTable& values_;
  int x_, y_;
  ReduceMath op_;
  std::vector<bool> reduced_;
  bool keepdims_ = true;
};

class LayerNormLayer : public Layer {
 public:
  LayerNormLayer(const Node& node, BuildContext& ctx) : Layer(node), values_(ctx.values) {
    x_ = ctx.values.id(node.inputs.at(0));
    y_ = ctx.values.id(node.outputs.at(0));
    const Shape& xs = values_.slot(x_).shape;
    const std::int64_t axis = node.attrs.i("axis", -1);
    if (axis < 0 || axis >= static_cast<std::int64_t>(xs.size())) throw ModelError(fail(ctx, node, "axis out of range"));
    normalized_.assign(xs.size(), false);
    std::fill(normalized_.begin() + axis, normalized_.end(), true);
    const Shape normalized(xs.begin() + axis, xs.end());
    const auto parameter = [&](std::size_t input) -> float* {
      if (input >= node.inputs.size() || node.inputs[input].empty()) return nullptr;
      if (!ctx.graph.is_constant(node.inputs[input]))
        throw ModelError(fail(ctx, node, "scale and bias must be constants"));
      try {
        return static_cast<float*>(ctx.upload(broadcast_tensor(ctx.graph.constants.at(node.inputs[input]), normalized).f32, true));
      } catch (const ModelError& e) {
        throw ModelError(fail(ctx, node, e.what()));
      }
    };
    scale_ = parameter(1);
    bias_ = parameter(2);
    if (!scale_) throw ModelError(fail(ctx, node, "scale is missing"));
    epsilon_ = node.attrs.f("epsilon", 1e-5f);
  }
  std::string partial_batch_problem() const override {
    return normalized_.at(0) && values_.slot(x_).batched ? "a normalization over the batch dimension" : "";
  }
  void run(const RunContext& ctx) override {
    layer_norm(values_.type(), ctx.at(y_), ctx.at(x_),
               row_space(values_.view(x_, ctx.count), values_.view(y_, ctx.count), normalized_, true), scale_, bias_,
               epsilon_, ctx.stream);
  }
  std::string kernel() const override { return "layer norm"; }

 private:
  const ValueTable& values_;
  int x_, y_;
  std::vector<bool> normalized_;
  float *scale_ = nullptr, *bias_ = nullptr;
  float epsilon_ = 1e-5f;
};

class BatchNormLayer : public Layer {
 public:
  BatchNormLayer(const Node& node, BuildContext& ctx) : Layer(node), values_(ctx.values) {
    if (node.inputs.size() != 5) throw ModelError(fail(ctx, node, "expects X, scale, bias, mean, var"));
    x_ = ctx.values.id(node.inputs[0]);
    y_ = ctx.values.id(node.outputs.at(0));
    const Shape& xs = values_.slot(x_).shape;
    if (xs.size() < 2) throw ModelError(fail(ctx, node, "X needs a channel dimension"));
    channels_ = xs[1];
    const float eps = node.attrs.f("epsilon", 1e-5f);
    const auto& g = ctx.graph;
    for (int i = 1; i < 5; ++i)
      if (!g.is_constant(node.inputs[static_cast<std::size_t>(i)]) ||
          g.constants.at(node.inputs[static_cast<std::size_t>(i)]).f32.size() != static_cast<std::size_t>(channels_))
        throw ModelError(fail(ctx, node, "scale, bias, mean and var must be constants of one value per channel"));
    const auto& gamma = g.constants.at(node.inputs[1]).f32;
    const auto& beta = g.constants.at(node.inputs[2]).f32;
    const auto& mean = g.constants.at(node.inputs[3]).f32;
    const auto& var = g.constants.at(node.inputs[4]).f32;
    std::vector<float> scale(gamma.size()), shift(gamma.size());
    for (std::size_t c = 0; c < gamma.size(); ++c) {
      scale[c] = gamma[c] / std::sqrt(var[c] + eps);
      shift[c] = beta[c] - mean[c] * scale[c];
    }
    scale_ = static_cast<float*>(ctx.upload(scale, true));
    shift_ = static_cast<float*>(ctx.upload(shift, true));
    if (!values_.slot(x_).nhwc)
      for (std::size_t d = 2; d < xs.size(); ++d) inner_ *= xs[d];
  }
  void run(const RunContext& ctx) override {
    channel_affine(values_.type(), ctx.at(y_), ctx.at(x_), scale_, shift_,
                   element_count(values_.shape_at(y_, ctx.count)), channels_, inner_, ctx.stream);
  }
  std::string kernel() const override { return "channel affine"; }

 private:
  const ValueTable& values_;
  int x_, y_;
  std::int64_t channels_ = 1, inner_ = 1;
  float *scale_ = nullptr, *shift_ = nullptr;
};

class PoolLayer : public Layer {
 public:
  PoolLayer(const Node& node, BuildContext& ctx) : Layer(node), values_(ctx.values) {
    x_ = ctx.values.id(node.inputs.at(0));
    y_ = ctx.values.id(node.outputs.at(0));
    const Shape& xs = values_.slot(x_).shape;
    const Shape& ys = values_.slot(y_).shape;
    if (xs.size() != 4) throw ModelError(fail(ctx, node, "only 2-D pooling (4-D NCHW tensors) is supported"));
    const auto k = node.attrs.ints("kernel_shape");
    const auto s = node.attrs.ints("strides", {1, 1});
    const auto d = node.attrs.ints("dilations", {1, 1});
    const auto p = node.attrs.ints("pads", {0, 0, 0, 0});
    if (k.size() != 2 || s.size() != 2 || d.size() != 2 || p.size() != 4)
      throw ModelError(fail(ctx, node, "kernel_shape, strides, dilations need 2 values and pads 4"));
    p_.max = node.op == Op::MaxPool;
    p_.c = static_cast<int>(xs[1]);
    p_.h = static_cast<int>(xs[2]);
    p_.w = static_cast<int>(xs[3]);
    p_.out_h = static_cast<int>(ys[2]);
    p_.out_w = static_cast<int>(ys[3]);
    p_.kernel_h = static_cast<int>(k[0]);
    p_.kernel_w = static_cast<int>(k[1]);
    p_.stride_h = static_cast<int>(s[0]);
    p_.stride_w = static_cast<int>(s[1]);
    p_.dilation_h = static_cast<int>(d[0]);
    p_.dilation_w = static_cast<int>(d[1]);
    p_.pad_top = static_cast<int>(p[0]);
    p_.pad_left = static_cast<int>(p[1]);
    p_.pad_bottom = static_cast<int>(p[2]);
    p_.pad_right = static_cast<int>(p[3]);
    p_.count_include_pad = node.attrs.i("count_include_pad", 0) != 0;
  }
  void run(const RunContext& ctx) override {
    Pool2dParams p = p_;
    p.n = ctx.count;
    pool2d(values_.type(), p, ctx.at(y_), ctx.at(x_), ctx.stream);
  }
  std::string kernel() const override { return p_.max ? "max pool (NHWC)" : "average pool (NHWC)"; }

 private:
  const ValueTable& values_;
  int x_, y_;
  Pool2dParams p_;
};

class GlobalAveragePoolLayer : public Layer {
 public:
  GlobalAveragePoolLayer(const Node& node, BuildContext& ctx) : Layer(node), values_(ctx.values) {
    x_ = ctx.values.id(node.inputs.at(0));
    y_ = ctx.values.id(node.outputs.at(0));
    if (values_.slot(x_).shape.size() != 4)
      throw ModelError(fail(ctx, node, "only 4-D NCHW inputs are supported"));
  }
  void run(const RunContext& ctx) override {
    const Shape& s = values_.slot(x_).shape;
    global_average_pool(values_.type(), ctx.at(y_), ctx.at(x_), ctx.count, s[2] * s[3], s[1], ctx.stream);
  }
  std::string kernel() const override { return "global average pool (NHWC)"; }

 private:
  const ValueTable& values_;
  int x_, y_;
};

// Reshape: element k of the input (ONNX order) is element k of the output, whatever either stores.
class ReshapeLayer : public Layer {
 public:
  ReshapeLayer(const Node& node, BuildContext& ctx) : Layer(node), values_(ctx.values) {
    x_ = ctx.values.id(node.inputs.at(0));
    y_ = ctx.values.id(node.outputs.at(0));
    const Shape &xs = values_.slot(x_).shape, &ys = values_.slot(y_).shape;
    if (xs.size() > kMaxRank || ys.size() > kMaxRank) throw ModelError(fail(ctx, node, "more than 6 dimensions"));
    if (values_.slot(x_).batched && (!values_.slot(y_).batched || xs[0] != ys[0])) batch_moves_ = true;
  }
  std::string partial_batch_problem() const override {
    return batch_moves_ ? "Reshape that merges or splits the batch dimension" : "";
  }
  void run(const RunContext& ctx) override {
    if (aliased()) return;
    remap_copy(values_.type(y_), ctx.at(y_), values_.view(y_, ctx.count), values_.type(x_), ctx.at(x_),
               values_.view(x_, ctx.count), ctx.stream);
  }
  std::string kernel() const override {
    if (aliased()) return "none (shares its input's memory)";
    return values_.type(x_) == values_.type(y_) ? "remap copy" : "remap copy (converts f32 indices)";
  }

 private:
  bool aliased() const {
    const int root = values_.slot(x_).alias_of >= 0 ? values_.slot(x_).alias_of : x_;
    return values_.slot(y_).alias_of == root;
  }
  const ValueTable& values_;
  int x_, y_;
  bool batch_moves_ = false;
};

class TransposeLayer : public Layer {
 public:
  TransposeLayer(const Node& node, BuildContext& ctx) : Layer(node), values_(ctx.values) {
    x_ = ctx.values.id(node.inputs.at(0));
    y_ = ctx.values.id(node.outputs.at(0));
    perm_ = node.attrs.ints("perm");
    if (perm_.size() != values_.slot(x_).shape.size()) throw ModelError(fail(ctx, node, "perm does not match X"));
    if (perm_.size() > kMaxRank) throw ModelError(fail(ctx, node, "more than 6 dimensions"));
  }
  std::string partial_batch_problem() const override {
    return !perm_.empty() && perm_[0] != 0 && values_.slot(x_).batched ? "Transpose that moves the batch dimension"
                                                                        : "";
  }
  void run(const RunContext& ctx) override {
    View dst = values_.view(y_, ctx.count), in = values_.view(x_, ctx.count), src = dst;
    for (int i = 0; i < dst.rank; ++i) {
      src.shape[i] = in.shape[perm_[static_cast<std::size_t>(i)]];
      src.stride[i] = in.stride[perm_[static_cast<std::size_t>(i)]];
    }
    order_by_destination(dst, src);
    remap_copy(values_.type(y_), ctx.at(y_), dst, values_.type(x_), ctx.at(x_), src, ctx.stream);
  }
  std::string kernel() const override { return "remap copy"; }

 private:
  const ValueTable& values_;
  int x_, y_;
  std::vector<std::int64_t> perm_;
};

// Concat, Split and Slice: copies between a piece of one tensor and the whole of another.
class PiecesLayer : public Layer {
 public:
  PiecesLayer(const Node& node, BuildContext& ctx) : Layer(node), values_(ctx.values) {
    const auto& g = ctx.graph;
    if (node.op == Op::Concat) {
      axis_ = node.attrs.i("axis", 0);
      whole_ = ctx.values.id(node.outputs.at(0));
      std::int64_t at = 0;
      for (const auto& in : node.inputs) {
        const int id = ctx.values.id(in);
        const void* constant = nullptr;
        if (values_.slot(id).constant) constant = ctx.constant_as(in, values_.type(whole_));
        pieces_.push_back({id, at, constant});
        at += g.shape_of(in).at(static_cast<std::size_t>(axis_));
      }
      into_whole_ = true;
    } else if (node.op == Op::Split) {
      axis_ = node.attrs.i("axis", 0);
      whole_ = ctx.values.id(node.inputs.at(0));
      std::int64_t at = 0;
      for (const auto& out : node.outputs) {
        const int id = ctx.values.id(out);
        pieces_.push_back({id, at});
        at += g.shape_of(out).at(static_cast<std::size_t>(axis_));
      }
    } else {  // Slice
      whole_ = ctx.values.id(node.inputs.at(0));
      starts_ = node.attrs.ints("starts");
      steps_ = node.attrs.ints("steps");
      const auto rank = values_.slot(whole_).shape.size();
      if (starts_.size() != rank || steps_.size() != rank)
        throw ModelError(fail(ctx, node, "starts and steps need one value per dimension"));
      pieces_.push_back({ctx.values.id(node.outputs.at(0)), 0});
      in_place_ = values_.slot(pieces_[0].id).window_of >= 0;  // its Concat reads the window itself (engine.cpp)
    }
    if (values_.slot(whole_).shape.size() > kMaxRank) throw ModelError(fail(ctx, node, "more than 6 dimensions"));
    const Shape& ws = values_.slot(whole_).shape;
    if (values_.slot(whole_).batched) {
      if (axis_ == 0 && node.op != Op::Slice) batch_problem_ = op_name(node.op) + " along the batch dimension";
      if (node.op == Op::Slice && (starts_[0] != 0 || steps_[0] != 1 || values_.slot(pieces_[0].id).shape[0] != ws[0]))
        batch_problem_ = "Slice of the batch dimension";
    }
  }
  std::string partial_batch_problem() const override { return batch_problem_; }

  void run(const RunContext& ctx) override {
    if (in_place_) return;
    const View whole = values_.view(whole_, ctx.count);
    for (const auto& piece : pieces_) {
      View part = values_.view(piece.id, ctx.count), in_whole = whole;
      for (int d = 0; d < part.rank; ++d) in_whole.shape[d] = part.shape[d];
      if (starts_.empty()) {
        in_whole.offset = piece.at * whole.stride[axis_];
      } else {
        for (int d = 0; d < part.rank; ++d) {
          in_whole.offset += starts_[static_cast<std::size_t>(d)] * whole.stride[d];
          in_whole.stride[d] = whole.stride[d] * steps_[static_cast<std::size_t>(d)];
        }
      }
      if (into_whole_) {
        order_by_destination(in_whole, part);
        remap_copy(values_.type(whole_), ctx.at(whole_), in_whole, piece.constant ? values_.type(whole_) : values_.type(piece.id),
                   piece.constant ? piece.constant : ctx.at(piece.id), part, ctx.stream);
      } else {
        order_by_destination(part, in_whole);
        remap_copy(values_.type(piece.id), ctx.at(piece.id), part, values_.type(whole_), ctx.at(whole_), in_whole, ctx.stream);
      }
    }
  }
  std::string kernel() const override {
    return in_place_ ? "none (its Concat reads the window in place)" : "remap copy x" + std::to_string(pieces_.size());
  }

 private:
  struct Piece {
    int id;
    std::int64_t at;  // start along the axis (Concat, Split)
    const void* constant = nullptr;  // a constant Concat input, uploaded in the whole's type
  };
  const ValueTable& values_;
  int whole_ = -1;
  std::int64_t axis_ = 0;
  bool into_whole_ = false, in_place_ = false;
  std::vector<Piece> pieces_;
  std::vector<std::int64_t> starts_, steps_;
  std::string batch_problem_;
};

class PadLayer : public Layer {
 public:
  PadLayer(const Node& node, BuildContext& ctx) : Layer(node), values_(ctx.values) {
    x_ = ctx.values.id(node.inputs.at(0));
    y_ = ctx.values.id(node.outputs.at(0));
    const auto pads = node.attrs.ints("pads");
    const auto rank = values_.slot(x_).shape.size();
    if (pads.size() != 2 * rank) throw ModelError(fail(ctx, node, "pads needs 2 values per dimension"));
    if (rank > kMaxRank) throw ModelError(fail(ctx, node, "more than 6 dimensions"));
    begin_.assign(pads.begin(), pads.begin() + static_cast<std::ptrdiff_t>(rank));
    if (values_.slot(x_).batched && (pads[0] != 0 || pads[rank] != 0)) batch_padded_ = true;
    const std::string mode = node.attrs.s("mode", "constant");
    if (mode == "constant") mode_ = PadMode::constant;
    else if (mode == "reflect") mode_ = PadMode::reflect;
    else if (mode == "edge") mode_ = PadMode::edge;
    else throw ModelError(fail(ctx, node, "mode '" + mode + "' is not constant, reflect or edge"));
    value_ = node.attrs.f("value", 0.f);
  }
  std::string partial_batch_problem() const override { return batch_padded_ ? "Pad of the batch dimension" : ""; }
  void run(const RunContext& ctx) override {
    const View in = values_.view(x_, ctx.count), out = values_.view(y_, ctx.count);
    const auto order = values_.memory_order(y_);
    std::int64_t out_shape[kMaxRank], in_shape[kMaxRank], in_stride[kMaxRank], begin[kMaxRank];
    for (int i = 0; i < out.rank; ++i) {
      const int d = order[static_cast<std::size_t>(i)];
      out_shape[i] = out.shape[d];
      in_shape[i] = in.shape[d];
      in_stride[i] = in.stride[d];
      begin[i] = begin_[static_cast<std::size_t>(d)];
    }
    pad(values_.type(), ctx.at(y_), out.rank, out_shape, ctx.at(x_), in_shape, in_stride, begin, mode_, value_,
        ctx.stream);
  }
  std::string kernel() const override { return "pad"; }

 private:
  const ValueTable& values_;
  int x_, y_;
  std::vector<std::int64_t> begin_;
  PadMode mode_ = PadMode::constant;
  float value_ = 0.f;
  bool batch_padded_ = false;
};

class SoftmaxLayer : public Layer {
 public:
  SoftmaxLayer(const Node& node, BuildContext& ctx) : Layer(node), values_(ctx.values) {
    x_ = ctx.values.id(node.inputs.at(0));
    y_ = ctx.values.id(node.outputs.at(0));
    axis_ = static_cast<int>(node.attrs.i("axis", -1));
    coerce_ = node.attrs.i("coerce_2d", 0) != 0;
    log_ = node.op == Op::LogSoftmax;
    const int rank = static_cast<int>(values_.slot(x_).shape.size());
    if (axis_ < 0 || axis_ >= rank) throw ModelError(fail(ctx, node, "axis out of range"));
    // The kernel writes y at x's offsets (nhwc_values ties the two).
    if (values_.slot(x_).nhwc != values_.slot(y_).nhwc) throw ModelError(fail(ctx, node, "input and output layouts differ"));
  }
  std::string partial_batch_problem() const override {
    return axis_ == 0 && values_.slot(x_).batched ? op() + " over the batch dimension" : "";
  }
  void run(const RunContext& ctx) override {
    const Shape s = values_.shape_at(x_, ctx.count);
    const auto order = values_.memory_order(x_);
    // The softmax dims ({axis} or {axis..}) are contiguous in memory order; outer/inner are the rest.
    std::int64_t outer = 1, len = 1, inner = 1;
    bool seen = false;
    for (int d : order) {
      const bool in_set = coerce_ ? d >= axis_ : d == axis_;
      if (in_set) {
        len *= s[static_cast<std::size_t>(d)];
        seen = true;
      } else if (!seen) {
        outer *= s[static_cast<std::size_t>(d)];
      } else {
        inner *= s[static_cast<std::size_t>(d)];
      }
    }
    softmax(values_.type(), ctx.at(y_), ctx.at(x_), outer, len, inner, log_, ctx.stream);
  }
  std::string kernel() const override { return log_ ? "log softmax" : "softmax"; }

 private:
  const ValueTable& values_;
  int x_, y_, axis_;
  bool coerce_ = false, log_ = false;
};

// The longest axis whose positions the element type holds exactly (nn/ranking.hpp).
std::int64_t exact_index_axis(DType type) {
  switch (type) {
    case DType::f16: return kExactIndexAxisF16;
    case DType::bf16: return kExactIndexAxisBf16;
    default: return kExactIndexAxisF32;
  }
}

// ArgMax, ArgMin (one output: indices) and TopK (values, indices) along the canonical "axis".
class RankingLayer : public Layer {
 public:
  RankingLayer(const Node& node, BuildContext& ctx) : Layer(node), values_(ctx.values) {
    x_ = ctx.values.id(node.inputs.at(0));
    const bool top_k = node.op == Op::TopK;
    if (node.outputs.size() != (top_k ? 2u : 1u)) throw ModelError(fail(ctx, node, "has the wrong number of outputs"));
    if (top_k) values_out_ = ctx.values.id(node.outputs[0]);
    indices_ = ctx.values.id(node.outputs.back());
    const Shape& xs = values_.slot(x_).shape;
    axis_ = static_cast<int>(node.attrs.i("axis", -1));
    if (axis_ < 0 || axis_ >= static_cast<int>(xs.size())) throw ModelError(fail(ctx, node, "axis out of range"));
    if (xs.size() > kMaxRank) throw ModelError(fail(ctx, node, "more than 6 dimensions"));
    const DType index_type = values_.type(indices_);  // f32 unless the engine is (nn/exact_indices.hpp)
    const std::int64_t length = xs[static_cast<std::size_t>(axis_)], limit = exact_index_axis(index_type);
    if (length > limit)
      throw ModelError(fail(ctx, node, "the axis has " + std::to_string(length) + " elements, but this engine holds " +
                                           "indices as " + std::string(to_string(index_type)) +
                                           " numbers, whose integers are exact only up to " + std::to_string(limit) +
                                           "; the indices would be wrong"));
    keepdims_ = top_k || node.attrs.i("keepdims", 1) != 0;
    if (top_k) {
      k_ = node.attrs.i("k", 0);
      if (k_ < 1 || k_ > length) throw ModelError(fail(ctx, node, "k is outside [1, the axis length]"));
      order_ = top_k_order(node.attrs.i("largest", 1) != 0);
      std::int64_t rows = 1;  // at the full batch: partial runs have fewer
      for (std::size_t d = 0; d < xs.size(); ++d)
        if (static_cast<int>(d) != axis_) rows *= xs[d];
      if (rows * length > std::numeric_limits<int>::max())
        throw ModelError(fail(ctx, node, "the input has more than 2^31 - 1 elements, more than TopK's sort takes"));
      scratch_bytes_ = top_k_scratch_bytes(rows, length, k_, order_);
    } else {
      order_ = arg_extreme_order(node.op == Op::ArgMax, node.attrs.i("select_last_index", 0) != 0);
    }
  }
  std::string partial_batch_problem() const override {
    return axis_ == 0 && values_.slot(x_).batched ? op() + " along the batch dimension" : "";
  }
  void run(const RunContext& ctx) override {
    const View x = values_.view(x_, ctx.count), indices = values_.view(indices_, ctx.count);
    const View out_values = values_out_ >= 0 ? values_.view(values_out_, ctx.count) : indices;
    AxisRows r;
    r.length = x.shape[axis_];
    r.x_axis_stride = x.stride[axis_];
    r.values_axis_stride = keepdims_ ? out_values.stride[axis_] : 0;
    r.indices_axis_stride = keepdims_ ? indices.stride[axis_] : 0;
    for (int d = 0; d < x.rank; ++d) {
      if (d == axis_) continue;
      const int at_out = keepdims_ || d < axis_ ? d : d - 1;  // without keepdims the outputs lack the axis
      r.shape[r.rank] = x.shape[d];
      r.x_stride[r.rank] = x.stride[d];
      r.values_stride[r.rank] = out_values.stride[at_out];
      r.indices_stride[r.rank] = indices.stride[at_out];
      ++r.rank;
    }
    if (values_out_ >= 0)
      top_k(values_.type(x_), values_.type(indices_), ctx.at(values_out_), ctx.at(indices_), ctx.at(x_), r, k_, order_,
            ctx.scratch, ctx.scratch_bytes, ctx.stream);
    else
      arg_extreme(values_.type(x_), values_.type(indices_), ctx.at(indices_), ctx.at(x_), r, order_, ctx.stream);
  }
  std::size_t scratch_bytes() const override { return scratch_bytes_; }
  std::string kernel() const override {
    const std::string indices = values_.type(indices_) == values_.type() ? "" : ", f32 indices";
    if (values_out_ < 0) return "arg extreme" + indices;
    return (scratch_bytes_ ? "top k (radix sort)" : "top k (rank count)") + indices;
  }

 private:
  const ValueTable& values_;
  int x_, values_out_ = -1, indices_, axis_;
  bool keepdims_ = true;
  std::int64_t k_ = 0;
  RankOrder order_;
  std::size_t scratch_bytes_ = 0;
};

// GatherElements along the canonical "axis": indices are run-time data (the element type) or a constant, uploaded
// as f32 so that its integers stay exact at every precision.
class GatherElementsLayer : public Layer {
 public:
  GatherElementsLayer(const Node& node, BuildContext& ctx) : Layer(node), values_(ctx.values) {
    x_ = ctx.values.id(node.inputs.at(0));
    indices_ = ctx.values.id(node.inputs.at(1));
    y_ = ctx.values.id(node.outputs.at(0));
    const Shape &xs = values_.slot(x_).shape, &is = values_.slot(indices_).shape;
    axis_ = static_cast<int>(node.attrs.i("axis", -1));
    if (axis_ < 0 || axis_ >= static_cast<int>(xs.size())) throw ModelError(fail(ctx, node, "axis out of range"));
    if (xs.size() > kMaxRank) throw ModelError(fail(ctx, node, "more than 6 dimensions"));
    if (is.size() != xs.size() || values_.slot(y_).shape != is)
      throw ModelError(fail(ctx, node, "indices, data and output shapes disagree (the graph is not prepared)"));
    for (std::size_t d = 0; d < xs.size(); ++d)
      if (static_cast<int>(d) != axis_ && is[d] > xs[d])
        throw ModelError(fail(ctx, node, "indices " + to_string(is) + " are longer than data " + to_string(xs)));
    const std::int64_t length = xs[static_cast<std::size_t>(axis_)];
    if (values_.slot(x_).constant) ctx.constant(node.inputs[0]);
    if (values_.type(x_) != values_.type(y_)) throw ModelError(fail(ctx, node, "data and output types differ"));
    if (values_.slot(indices_).constant) {
      const Tensor& t = ctx.graph.constants.at(node.inputs[1]);
      std::vector<float> as_float = t.type == ElementType::f32 ? t.f32 : std::vector<float>(t.i64.begin(), t.i64.end());
      constant_indices_ = ctx.upload(as_float, true);
      if (length > kExactIndexAxisF32) throw ModelError(fail(ctx, node, "the axis is longer than 2^24 elements"));
    } else if (const std::int64_t limit = exact_index_axis(values_.type(indices_)); length > limit) {
      // Run-time indices that are not index values (nn/exact_indices.hpp: not made from ArgMax/ArgMin/TopK by
      // moves and arithmetic with constants) are data in the engine's type.
      throw ModelError(fail(ctx, node, "the axis has " + std::to_string(length) + " elements, but this engine holds " +
                                           "these indices as " + std::string(to_string(values_.type(indices_))) +
                                           " data, whose integers are exact only up to " + std::to_string(limit) +
                                           "; the indices would be wrong (build the engine at a wider precision)"));
    }
  }
  std::string partial_batch_problem() const override {
    if (axis_ == 0 && values_.slot(x_).batched) return "GatherElements along the batch dimension";
    return "";
  }
  void run(const RunContext& ctx) override {
    const View y = values_.view(y_, ctx.count), x = values_.view(x_, ctx.count);
    const View indices = values_.view(indices_, ctx.count);  // a constant's: row-major, whole
    gather_elements(values_.type(), ctx.at(y_), y, ctx.at(x_), x,
                    constant_indices_ ? constant_indices_ : ctx.at(indices_), indices,
                    constant_indices_ != nullptr || values_.type(indices_) == DType::f32,
                    axis_, ctx.stream);
  }
  std::string kernel() const override { return "gather elements"; }

 private:
  const ValueTable& values_;
  int x_, indices_, y_, axis_;
  const void* constant_indices_ = nullptr;
};

class GridSampleLayer : public Layer {
 public:
  GridSampleLayer(const Node& node, BuildContext& ctx) : Layer(node), values_(ctx.values) {
    x_ = ctx.values.id(node.inputs.at(0));
    grid_ = ctx.values.id(node.inputs.at(1));
    y_ = ctx.values.id(node.outputs.at(0));
    const Shape &xs = values_.slot(x_).shape, &gs = values_.slot(grid_).shape;
    if (xs.size() != 4 || gs.size() != 4 || gs[0] != xs[0] || gs[3] != 2)
      throw ModelError(fail(ctx, node, "input " + to_string(xs) + " and grid " + to_string(gs) +
                                           " are not [N, C, H, W] and [N, Ho, Wo, 2]"));
    if (xs[2] > (1 << 30) || xs[3] > (1 << 30)) throw ModelError(fail(ctx, node, "the input is too large to sample"));
    const std::string mode = node.attrs.s("mode", "bilinear"), padding = node.attrs.s("padding_mode", "zeros");
    if (mode != "bilinear" && mode != "nearest")
      throw ModelError(fail(ctx, node, "mode '" + mode + "' is not bilinear or nearest"));
    p_.nearest = mode == "nearest";
    if (padding == "zeros") p_.padding = static_cast<std::uint8_t>(GridSamplePadding::zeros);
    else if (padding == "border") p_.padding = static_cast<std::uint8_t>(GridSamplePadding::border);
    else if (padding == "reflection") p_.padding = static_cast<std::uint8_t>(GridSamplePadding::reflection);
    else throw ModelError(fail(ctx, node, "padding_mode '" + padding + "' is not zeros, border or reflection"));
    p_.align_corners = node.attrs.i("align_corners", 0) != 0;
    for (int id : {x_, grid_})
      if (values_.slot(id).constant) ctx.constant(values_.slot(id).name);
  }
  void run(const RunContext& ctx) override {
    grid_sample(values_.type(), p_, ctx.at(y_), values_.view(y_, ctx.count), ctx.at(x_), values_.view(x_, ctx.count),
                ctx.at(grid_), values_.view(grid_, ctx.count), ctx.stream);
  }
  std::string kernel() const override { return p_.nearest ? "grid sample nearest" : "grid sample bilinear"; }

 private:
  const ValueTable& values_;
  int x_, grid_, y_;
  GridSampleParams p_;
};

class ResizeLayer : public Layer {
 public:
  ResizeLayer(const Node& node, BuildContext& ctx) : Layer(node), values_(ctx.values) {
    x_ = ctx.values.id(node.inputs.at(0));
    y_ = ctx.values.id(node.outputs.at(0));
    const Shape &xs = values_.slot(x_).shape, &ys = values_.slot(y_).shape;
    if (xs.size() != 4 || ys.size() != 4 || xs[0] != ys[0] || xs[1] != ys[1])
      throw ModelError(fail(ctx, node, "only resizing H and W of 4-D NCHW tensors is supported"));
    const std::string mode = node.attrs.s("mode", "nearest");
    if (mode != "nearest" && mode != "linear")
      throw ModelError(fail(ctx, node, "mode '" + mode + "' is not nearest or linear"));
    p_.linear = mode == "linear";
    const std::string ct = node.attrs.s("coordinate_transformation_mode", "half_pixel");
    if (ct == "half_pixel") p_.coordinates = ResizeCoordinates::half_pixel;
    else if (ct == "pytorch_half_pixel") p_.coordinates = ResizeCoordinates::pytorch_half_pixel;
    else if (ct == "align_corners") p_.coordinates = ResizeCoordinates::align_corners;
    else if (ct == "asymmetric") p_.coordinates = ResizeCoordinates::asymmetric;
    else if (ct == "tf_half_pixel_for_nearest") p_.coordinates = ResizeCoordinates::tf_half_pixel_for_nearest;
    else
      throw ModelError(fail(ctx, node, "coordinate_transformation_mode '" + ct +
                                           "' is not half_pixel, pytorch_half_pixel, align_corners, asymmetric or "
                                           "tf_half_pixel_for_nearest"));
    const std::string nm = node.attrs.s("nearest_mode", "round_prefer_floor");
    if (nm == "round_prefer_floor") p_.rounding = NearestRounding::round_prefer_floor;
    else if (nm == "round_prefer_ceil") p_.rounding = NearestRounding::round_prefer_ceil;
    else if (nm == "floor") p_.rounding = NearestRounding::floor;
    else if (nm == "ceil") p_.rounding = NearestRounding::ceil;
    else throw ModelError(fail(ctx, node, "nearest_mode '" + nm + "' is not round_prefer_floor, round_prefer_ceil, floor or ceil"));
    p_.c = static_cast<int>(xs[1]);
    p_.h = static_cast<int>(xs[2]);
    p_.w = static_cast<int>(xs[3]);
    p_.out_h = static_cast<int>(ys[2]);
    p_.out_w = static_cast<int>(ys[3]);
  }
  void run(const RunContext& ctx) override {
    ResizeParams p = p_;
    p.n = ctx.count;
    resize(values_.type(), p, ctx.at(y_), ctx.at(x_), ctx.stream);
  }
  std::string kernel() const override { return p_.linear ? "resize linear (NHWC)" : "resize nearest (NHWC)"; }

 private:
  const ValueTable& values_;
  int x_, y_;
  ResizeParams p_;
};

}  // namespace

std::unique_ptr<Layer> make_kernel_layer(const Node& node, BuildContext& ctx) {
  const Op op = node.op;
  if (is_activation(op))
    return std::make_unique<ActivationLayer>(node, ctx);
  if (binary_math_of(op)) return std::make_unique<BinaryLayer>(node, ctx);
  if (const auto math = unary_math_of(op)) return std::make_unique<UnaryMathLayer>(node, ctx, *math);
  if (const auto reduction = reduce_math_of(op)) return std::make_unique<ReduceLayer>(node, ctx, *reduction);
  if (op == Op::LayerNormalization) return std::make_unique<LayerNormLayer>(node, ctx);
  if (op == Op::BatchNormalization) return std::make_unique<BatchNormLayer>(node, ctx);
  if (op == Op::MaxPool || op == Op::AveragePool) return std::make_unique<PoolLayer>(node, ctx);
  if (op == Op::GlobalAveragePool) return std::make_unique<GlobalAveragePoolLayer>(node, ctx);
  if (op == Op::Reshape) return std::make_unique<ReshapeLayer>(node, ctx);
  if (op == Op::Transpose) return std::make_unique<TransposeLayer>(node, ctx);
  if (op == Op::Concat || op == Op::Split || op == Op::Slice) return std::make_unique<PiecesLayer>(node, ctx);
  if (op == Op::Pad) return std::make_unique<PadLayer>(node, ctx);
  if (op == Op::Softmax || op == Op::LogSoftmax) return std::make_unique<SoftmaxLayer>(node, ctx);
  if (op == Op::ArgMax || op == Op::ArgMin || op == Op::TopK) return std::make_unique<RankingLayer>(node, ctx);
  if (op == Op::Resize) return std::make_unique<ResizeLayer>(node, ctx);
  if (op == Op::GatherElements) return std::make_unique<GatherElementsLayer>(node, ctx);
  if (op == Op::GridSample) return std::make_unique<GridSampleLayer>(node, ctx);
  if (op == Op::Attention) return make_attention(node, ctx);
  throw ModelError(ctx.graph.source + ": " + node.where() + ": the CUDA backend does not run this op (not in the "
                   "prepared form of nn/graph.hpp)");
}

}  // namespace sluice::nn::cuda
