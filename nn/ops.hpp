#pragma once
// The op table: every operator the engine knows (read from ONNX files, or made by prepare()), one entry each.
// The loader turns a node's op_type into an Op once (op_from_name); the passes, both backends and describe_graph
// switch on the enum, never on the spelling. The checklist for adding an op is in nn/README.md.
//
// C++17 (no C++20 in what nvcc might include).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "nn/activation_math.hpp"
#include "nn/elementwise_math.hpp"

namespace sluice::nn {

// In table order (kOpTable below is indexed by it; a static_assert in ops.cpp checks).
enum class Op : std::uint8_t {
  unknown,
  // run by the backends (the prepared form, nn/graph.hpp)
  Conv, ConvTranspose, BatchNormalization,
  Relu, LeakyRelu, Clip, Sigmoid, HardSigmoid, HardSwish, Tanh,
  Add, Sub, Mul, Div, Pow, Max, Min,
  Erf, Sqrt, Exp, Log, Neg, Abs, Reciprocal, Floor, Ceil, Sin, Cos,
  MaxPool, AveragePool, GlobalAveragePool,
  Reshape, Transpose, Gemm, MatMul, Concat, Split, Slice, Softmax, LogSoftmax, Resize, Pad,
  ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceL1, ReduceL2, ReduceSumSquare, ReduceProd,
  LayerNormalization, ArgMax, ArgMin, TopK, GatherElements, GridSample,
  // made by prepare(), never read from a file
  Linear, Gelu, Attention,
  // respelled by canonicalize into ops above
  Flatten, Squeeze, Unsqueeze, Upsample,
  // rewritten by prepare() into ops above (nn/passes/decompose.cpp)
  DepthToSpace, SpaceToDepth, Tile, InstanceNormalization, GroupNormalization, Expand, Einsum,
  // removed or folded by prepare()
  Identity, Dropout, Constant, Shape, Gather, Cast, ConstantOfShape, Equal, Less, Greater, LessOrEqual,
  GreaterOrEqual, And, Or, Not, Where, Range, Mod, ScatterND,
  count_  // not an op
};

// What an op is, beyond its name (OpInfo::flags).
enum OpFlag : std::uint32_t {
  kFromOnnx = 1u << 0,      // the loader accepts it in a file
  kRuns = 1u << 1,          // remains in the prepared form: both backends run it
  kActivation = 1u << 2,    // elementwise activation (ActivationKind): fusable into a Conv/Linear epilogue
  kUnaryMath = 1u << 3,     // elementwise unary maths (UnaryMath)
  kBinaryMath = 1u << 4,    // elementwise binary maths with numpy broadcasting (BinaryMath)
  kReduce = 1u << 5,        // reduction over "axes" (ReduceMath)
  kComparison = 1u << 6,    // Equal, Less, ..., And, Or: folded only, bool (i64) out
};

constexpr int kManyInputs = 255;  // "any number" in OpInfo's arities

struct OpInfo {
  Op op;
  const char* name;          // the ONNX op_type (or the prepared form's name for ops prepare() makes)
  std::uint8_t since_opset;  // the first default-domain opset that has it (0: not an ONNX op). The loader takes
                             // opsets kMinOpset..kMaxOpset (nn/onnx_loader.hpp) as a whole; this is informative
  std::uint8_t min_inputs, max_inputs, max_outputs;  // ONNX's schemas, opsets 11-21 (checked by the loader)
  std::uint32_t flags;
  std::uint8_t math;  // the UnaryMath / BinaryMath / ReduceMath / ActivationKind value, per flags
  // Activations: the ONNX attribute names of ActivationParams' alpha and beta on a node of its own (null when
  // the op has none) and their ONNX defaults. Clip's min/max are attributes after canonicalize.
  const char* alpha_attr;
  const char* beta_attr;
  float default_alpha, default_beta;
};

// The entry of `op` (Op::unknown has an entry named "unknown").
const OpInfo& op_info(Op op);
// The ONNX spelling; "unknown" for Op::unknown.
const std::string& op_name(Op op);
// The op of an ONNX op_type (exact, case-sensitive); Op::unknown if the table has none.
Op op_from_name(std::string_view name);
inline bool has_flag(Op op, OpFlag f) { return (op_info(op).flags & f) != 0; }

// The maths of an elementwise/reduction op, or nothing for another op.
std::optional<UnaryMath> unary_math_of(Op op);
std::optional<BinaryMath> binary_math_of(Op op);
std::optional<ReduceMath> reduce_math_of(Op op);
// The activation of an activation op (Relu ... Tanh), or nothing.
std::optional<ActivationKind> activation_of(Op op);
// The op of an activation kind (Op::unknown for none).
Op op_of(ActivationKind kind);
inline bool is_activation(Op op) { return has_flag(op, kActivation); }

struct Attributes;
// The parameters of a standalone activation node of op `op` (its own attribute names, the ONNX defaults).
ActivationParams activation_params(Op op, const Attributes& attrs);
// A Conv/Linear's fused "activation" (an activation op's name, or "" / absent for none) with "act_alpha" and
// "act_beta"; nothing when the name is not an activation op.
std::optional<ActivationParams> fused_activation_params(const Attributes& attrs);

}  // namespace sluice::nn
