#pragma once
// The model graph sluice executes: what the ONNX loader makes, what the passes rewrite, what the backends run.
//
// Life of a model:
//   Graph g = load_onnx(path);          // nn/onnx_loader.hpp: ONNX as written (opset 11-21), ops checked
//   Graph p = prepare(g, batch);        // nn/passes.hpp: batch bound, canonical ops, shapes, folds, fusions
//   CpuEngine / CudaEngine run p.       // nn/cpu/engine.hpp, nn/cuda/engine.hpp
//
// The contract between prepare() and the backends (the "prepared form") is written down here, next to the
// types, so that a backend never has to understand ONNX's many spellings of one thing.
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "nn/ops.hpp"

namespace sluice::nn {

// A model that cannot be loaded or run: the message names the file, the node (name and op) and what is wrong.
class ModelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using Shape = std::vector<std::int64_t>;
std::int64_t element_count(const Shape& s);
std::string to_string(const Shape& s);  // "[1,3,224,224]"

// A constant: an initializer, a Constant node's value, or a value the passes folded.
// Floating point data of any ONNX type is held as f32; integer and bool data as i64.
enum class ElementType : std::uint8_t { f32, i64 };
struct Tensor {
  ElementType type = ElementType::f32;
  Shape shape;
  std::vector<float> f32;         // type == f32
  std::vector<std::int64_t> i64;  // type == i64
  std::int64_t elements() const { return element_count(shape); }
};

// t repeated to `shape` by numpy broadcasting (t's shape aligned to the right; each of its dimensions 1 or equal).
// Throws ModelError when it does not broadcast.
Tensor broadcast_tensor(const Tensor& t, const Shape& shape);

using AttrValue = std::variant<std::int64_t, float, std::string, std::vector<std::int64_t>, std::vector<float>, Tensor>;

struct Attributes {
  std::map<std::string, AttrValue> values;
  bool has(const std::string& name) const { return values.count(name) != 0; }
  // Typed reads with a default; a present attribute of the wrong type throws ModelError naming it.
  std::int64_t i(const std::string& name, std::int64_t fallback) const;
  float f(const std::string& name, float fallback) const;
  std::string s(const std::string& name, const std::string& fallback) const;
  std::vector<std::int64_t> ints(const std::string& name, const std::vector<std::int64_t>& fallback = {}) const;
  std::vector<float> floats(const std::string& name, const std::vector<float>& fallback = {}) const;
  const Tensor* tensor(const std::string& name) const;  // null when absent
};

struct Node {
  std::string name;  // the ONNX node's name, or "<op>_<index>" when the file gave none
  Op op = Op::unknown;  // nn/ops.hpp; set by the loader from op_type (canonical op after prepare(), see below)
  std::vector<std::string> inputs;  // "" marks an absent optional input
  std::vector<std::string> outputs;
  Attributes attrs;
  std::string where() const { return "node '" + name + "' (" + op_name(op) + ")"; }
};

struct ValueInfo {
  std::string name;
  Shape shape;  // -1 for a dimension the file leaves symbolic (usually the batch)
  ElementType type = ElementType::f32;
};

struct Graph {
  std::string source;  // file name, for messages
  std::int64_t opset = 0;
  std::vector<ValueInfo> inputs;   // the graph's inputs that are not initializers
  std::vector<ValueInfo> outputs;
  std::vector<Node> nodes;         // topological order
  std::map<std::string, Tensor> constants;  // initializers, Constant nodes, folded values
  std::map<std::string, Shape> shapes;      // after prepare(): every non-constant value's concrete shape
  std::vector<std::string> rewrites;        // after prepare(): one line per fold/fusion/removal, for `sluiced model`

  bool is_constant(const std::string& value) const { return constants.count(value) != 0; }
  const Shape& shape_of(const std::string& value) const;  // constants and values; throws ModelError if unknown
};

// ---- The prepared form (what prepare() guarantees and the backends may rely on) ----------------------------
// * Every graph input has a concrete shape (the batch bound); every non-constant value is f32 data (a
//   backend may hold it as f16/bf16) with a concrete entry in `shapes`. Integer data exists only as constants
//   (the indices ArgMax, ArgMin and TopK compute at run time are f32 numbers: see those ops below).
// * Nodes are in topological order; no node has only constant inputs (folded); no dead nodes; no Identity,
//   Dropout, Constant, Shape, Gather-on-shapes, Cast, Upsample or ConstantOfShape remains; no Pad of nothing
//   (all pads 0) and no Slice of every element in order (starts 0, steps 1, whole dims) either, unless it is all
//   that makes a graph output from a graph input (those copies are removed like Identity).
// * Ops that remain, with their canonical attributes (all axes non-negative, all lists concrete):
//   Conv            inputs X, W (constant, f32, OIHW), B (constant or ""), R (residual or "", same shape as Y)
//                   attrs strides, pads [top,left,bottom,right], dilations, group (auto_pad resolved away);
//                   "activation": "" | Relu | LeakyRelu | Clip | Sigmoid | HardSigmoid | HardSwish | Tanh,
//                   "act_alpha", "act_beta" (LeakyRelu alpha; HardSigmoid alpha, beta; Clip min, max).
//                   Y = activation(conv(X, W) + B + R). BatchNormalization that follows a Conv is folded into W, B.
//   ConvTranspose   inputs X, W (constant, f32, [C_in, C_out/group, kH, kW]), B (constant or "")
//                   attrs strides, pads [top,left,bottom,right], dilations, group, output_padding [h, w] (each
//                   below max(stride, dilation)); output_shape and auto_pad resolved into pads and output_padding.
//                   Y extent = stride * (in - 1) + output_padding + (k - 1) * dilation + 1 - pads. 2-D only;
//                   never folded (constant X is refused, like Conv).
//   BatchNormalization  inputs X, scale, bias, mean, var (constants); attr epsilon (only where no Conv precedes)
//   Relu, Sigmoid, Tanh, HardSwish              no attrs
//   LeakyRelu (alpha), HardSigmoid (alpha, beta), Clip ("min", "max" floats; +-inf when absent)
//   Add, Sub, Mul, Div   two inputs, numpy broadcasting; either may be a constant
//   MaxPool, AveragePool attrs kernel_shape, strides, pads [top,left,bottom,right], dilations (MaxPool),
//                        ceil_mode, count_include_pad (AveragePool); 2-D (NCHW) only
//   GlobalAveragePool
//   Reshape          one input; attr "shape": the concrete output shape (Flatten, Squeeze, Unsqueeze and
//                    Reshape all become this; the data order does not change)
//   Transpose        attr perm (one that keeps the order of every dim longer than 1 is a Reshape)
//   Gemm             inputs A, B, C ("" if absent); attrs alpha, beta, transA, transB (B computed at run time,
//                    or C varying along rows: a product by a constant matrix is a Linear)
//   MatMul           numpy semantics (batched, broadcast); B computed at run time or a batched constant
//   Linear           inputs X [.., K] (rank >= 2), W (constant, f32, [K, N]), B (constant [N] or ""), R (residual
//                    or "", same shape as Y); attrs "activation", "act_alpha", "act_beta" as Conv's.
//                    Y [.., N] = activation(X W + B + R), X's leading dims folded into rows. Made by prepare()
//                    from MatMul/Gemm by a constant matrix and what follows them (nn/passes/linear.cpp, fuse.cpp),
//                    never read from a file
//   Concat           attr axis
//   Split            attr axis, attr "split" (sizes, concrete)
//   Slice            one input; attrs "starts", "ends", "steps" (one per dimension, clamped, concrete)
//   Softmax, LogSoftmax  attr axis; attr "coerce_2d" (1: opset < 13 semantics, over all dims from axis on);
//                    the row's maximum is subtracted first; LogSoftmax is x - max - log(sum(exp(x - max)))
//   Resize           one input; attr "sizes" (concrete output shape), "mode" (nearest | linear),
//                    "coordinate_transformation_mode", "nearest_mode" (ONNX spellings); 4-D NCHW, H and W only;
//                    "scales" (4 floats, optional): the model's scales, which the coordinates use when given
//   Pad              one input; attr "pads" (ONNX order: begins then ends, one per dimension), "mode"
//                    (constant | reflect | edge), "value"
//   Erf, Sqrt, Exp, Log, Neg, Abs, Reciprocal, Floor, Ceil, Sin, Cos   no attrs (nn/elementwise_math.hpp)
//   Gelu             no attrs: x * 0.5 * (1 + erf(x / sqrt(2))) (ONNX Gelu, approximate "none"); made by prepare()
//                    from the five nodes exporters write for it, never read from a file
//   Attention        inputs Q [.., T, d], K [.., S, d], V [.., S, dv] (the same leading dims), M (additive bias
//                    broadcasting to [.., T, S], or ""); attr scale. Y [.., T, dv] = softmax(scale * Q K^T + M) V,
//                    softmax over the S keys. Made by prepare() from MatMul -> [scale] -> [Add M] -> Softmax ->
//                    MatMul (nn/passes/fuse_attention.cpp, d and dv at most 256), never read from a file.
//                    attr "seq_axis" (optional, 4 ints for Q, K, V, Y; absent: each rank - 2): where in the held
//                    operand's leading dims its sequence axis sits; the logical [B.., S, d] is the held value with
//                    that axis moved to rank - 2 (its shape in the graph is the held one). 0: sequence-first
//                    [S, B.., d], nn.MultiheadAttention's layout; 1 of [B, S, heads, d]: heads split off the
//                    embedding, read and written without a Transpose (nn/passes/attention_layout.cpp). Where the batch
//                    is then not in dim 0 (seq_axis or packed_axis 0), partial batches are refused
//                    attrs "packed_axis" (optional, int a) and "packed_part" (3 ints pq, pk, pv): Q, K and V are one
//                    input X, parts of its axis a (a < rank - 2): the held Q is X[.., pq, ..] (index pq of axis a,
//                    that axis dropped; its "seq_axis" counts the dims without it), K and V likewise; nn.MultiheadAttention's q|k|v product read in place
//                    (nn/passes/fuse_attention_parts.cpp)
//                    Swin's shifted windows (scores [B, ..] -> Reshape [B1, B2, ..] -> Add window mask -> Reshape
//                    back) run on the split batch: Q, K, V and Y are views [B1, B2, heads, L, w] (the batch B1 in
//                    dim 0, so partial batches work) and M is one constant, the position bias plus the mask,
//                    [B2 windows, heads or 1, T, S], broadcasting over B1 like any bias
//   Pow, Max, Min        two inputs, numpy broadcasting (Max/Min with more inputs are refused)
//   ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceL1, ReduceL2, ReduceSumSquare, ReduceProd
//                    one input; attrs "axes" (sorted, non-negative, unique, never empty), "keepdims" (0 | 1)
//   LayerNormalization  inputs X, Scale (constant), B (constant or ""); attrs axis, epsilon: normalizes over
//                    the dimensions from axis on; Scale and B broadcast to them; one output
//   ArgMax, ArgMin   one input; attrs axis, keepdims (0 | 1), select_last_index (0 | 1). One output: indices
//   TopK             one input; attrs "k" (the constant K, in [1, axis length]), axis, largest (0 | 1), sorted
//                    (0 | 1; the output is sorted either way). Outputs Values, Indices
//     Order (nn/ranking.hpp): ties go to the lower index (the higher with select_last_index). NaN: ArgMax and
//     ArgMin pick it (the first NaN), as numpy and torch; TopK ranks NaN above +inf (as torch.topk).
//     Index outputs are data like any other: f32 numbers 0, 1, 2, ..., not int64. A backend that holds data
//     narrower keeps them, and what moves and arithmetic make of them, in f32 (nn/exact_indices.hpp). So that no
//     index is ever rounded, an engine refuses at build, naming the node, an axis longer than 2^24 elements.
//     Folded on constants they are i64, exact.
//   GatherElements   inputs data, indices (the same rank; each dimension of indices at most data's, except
//                    along the axis); attr axis. Y, shaped like indices: Y[i..] = data[i.. with i_axis replaced by
//                    indices[i..]]. Indices are data like any other (f32 numbers, e.g. TopK's) or an f32 constant
//                    (the sweep turns int64 ones into f32); a negative index counts from the end of the axis. A
//                    constant index outside [-dim, dim) is refused at prepare time; at run time an index is
//                    rounded and one outside [-dim, dim) (or NaN) gives NaN, never another element. Engines
//                    refuse run-time indices into an axis longer than the type holding them counts exactly (f32
//                    for index values, nn/exact_indices.hpp; other run-time indices: the engine's type)
//   GridSample       inputs X [N, C, H, W], grid [N, Ho, Wo, 2] (x then y, -1 .. 1 spanning the input: the
//                    outer edges of the corner pixels, or with align_corners their centres); attrs "mode"
//                    (bilinear | nearest; opset 20's "linear" is bilinear; bicubic refused), "padding_mode"
//                    (zeros | border | reflection), align_corners (0 | 1). Y [N, C, Ho, Wo], PyTorch's
//                    grid_sample: nearest rounds half to even; a NaN coordinate reads as outside (0 with zeros)
// DepthToSpace, SpaceToDepth (Reshape, Transpose, Reshape), Tile (Reshape, Mul by a constant of ones, Reshape),
// InstanceNormalization (LayerNormalization over the dims from 2 on with scale 1, then BatchNormalization with
// the scale and B, mean 0, variance 1, epsilon 0), GroupNormalization (Reshape to [N, groups, rest],
// LayerNormalization over the rest with scale 1, Reshape back, then BatchNormalization like InstanceNormalization's
// with scale and bias per channel: opsets 18-20 give them per group, 21 per channel) and Expand of run-time data
// (Mul by a constant of ones, or nothing) and Einsum (ReduceSum of indices only one operand has and the output
// lacks, Transpose and Reshape to [batch, M, K] x [batch, K, N], MatMul, or a broadcasting Mul when nothing is
// contracted, Reshape and Transpose to the output; more operands pairwise, left to right; diagonals, a repeated
// index within one operand, are refused) are rewritten into the ops above (nn/passes/decompose.cpp). Exporters at
// opset <= 17 write GroupNorm as Reshape, InstanceNormalization, Reshape, Mul, Add, which runs too.
// Equal, Less, Greater, LessOrEqual, GreaterOrEqual, And, Or, Not, Where, Range, Mod and ScatterND exist only
// folded (Expand too, unless its data is computed at run time).
// Shapes and data are in ONNX's layout (NCHW for images); a backend may store 4-D values NHWC inside.

// Ops the loader accepts (as written in ONNX files; the op table's kFromOnnx entries), sorted; anything else is
// refused, naming the node.
const std::vector<std::string>& supported_onnx_ops();

}  // namespace sluice::nn
