#include "nn/ops.hpp"

#include <limits>

#include "nn/graph.hpp"

namespace sluice::nn {
namespace {

constexpr std::uint8_t M = kManyInputs;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr std::uint32_t kOnnxRuns = kFromOnnx | kRuns;

constexpr std::uint8_t u(UnaryMath m) { return static_cast<std::uint8_t>(m); }
constexpr std::uint8_t b(BinaryMath m) { return static_cast<std::uint8_t>(m); }
constexpr std::uint8_t r(ReduceMath m) { return static_cast<std::uint8_t>(m); }
constexpr std::uint8_t a(ActivationKind k) { return static_cast<std::uint8_t>(k); }

// One entry per op, in the order of enum class Op.
// {op, name, since opset, min inputs, max inputs, max outputs, flags, maths, alpha attr, beta attr, alpha, beta}
constexpr OpInfo kOpTable[] = {
    {Op::unknown, "unknown", 0, 0, 0, 0, 0, 0, nullptr, nullptr, 0, 0},
    {Op::Conv, "Conv", 1, 2, 3, 1, kOnnxRuns, 0, nullptr, nullptr, 0, 0},
    {Op::ConvTranspose, "ConvTranspose", 1, 2, 3, 1, kOnnxRuns, 0, nullptr, nullptr, 0, 0},
    {Op::BatchNormalization, "BatchNormalization", 1, 5, 5, 5, kOnnxRuns, 0, nullptr, nullptr, 0, 0},
    {Op::Relu, "Relu", 1, 1, 1, 1, kOnnxRuns | kActivation, a(ActivationKind::relu), nullptr, nullptr, 0, 0},
    {Op::LeakyRelu, "LeakyRelu", 1, 1, 1, 1, kOnnxRuns | kActivation, a(ActivationKind::leaky_relu), "alpha", nullptr,
     0.01f, 0},
    {Op::Clip, "Clip", 1, 1, 3, 1, kOnnxRuns | kActivation, a(ActivationKind::clip), "min", "max", -kInf, kInf},
    {Op::Sigmoid, "Sigmoid", 1, 1, 1, 1, kOnnxRuns | kActivation, a(ActivationKind::sigmoid), nullptr, nullptr, 0, 0},
    {Op::HardSigmoid, "HardSigmoid", 1, 1, 1, 1, kOnnxRuns | kActivation, a(ActivationKind::hard_sigmoid), "alpha",
     "beta", 0.2f, 0.5f},
    {Op::HardSwish, "HardSwish", 14, 1, 1, 1, kOnnxRuns | kActivation, a(ActivationKind::hard_swish), nullptr, nullptr,
     0, 0},
    {Op::Tanh, "Tanh", 1, 1, 1, 1, kOnnxRuns | kActivation, a(ActivationKind::tanh), nullptr, nullptr, 0, 0},
    {Op::Add, "Add", 1, 2, 2, 1, kOnnxRuns | kBinaryMath, b(BinaryMath::add), nullptr, nullptr, 0, 0},
    {Op::Sub, "Sub", 1, 2, 2, 1, kOnnxRuns | kBinaryMath, b(BinaryMath::sub), nullptr, nullptr, 0, 0},
    {Op::Mul, "Mul", 1, 2, 2, 1, kOnnxRuns | kBinaryMath, b(BinaryMath::mul), nullptr, nullptr, 0, 0},
    {Op::Div, "Div", 1, 2, 2, 1, kOnnxRuns | kBinaryMath, b(BinaryMath::div), nullptr, nullptr, 0, 0},
    {Op::Pow, "Pow", 1, 2, 2, 1, kOnnxRuns | kBinaryMath, b(BinaryMath::pow), nullptr, nullptr, 0, 0},
    // Max/Min take any number of inputs in ONNX; prepare() refuses more than two
    {Op::Max, "Max", 1, 1, M, 1, kOnnxRuns | kBinaryMath, b(BinaryMath::max), nullptr, nullptr, 0, 0},
    {Op::Min, "Min", 1, 1, M, 1, kOnnxRuns | kBinaryMath, b(BinaryMath::min), nullptr, nullptr, 0, 0},
    {Op::Erf, "Erf", 9, 1, 1, 1, kOnnxRuns | kUnaryMath, u(UnaryMath::erf), nullptr, nullptr, 0, 0},
    {Op::Sqrt, "Sqrt", 1, 1, 1, 1, kOnnxRuns | kUnaryMath, u(UnaryMath::sqrt), nullptr, nullptr, 0, 0},
    {Op::Exp, "Exp", 1, 1, 1, 1, kOnnxRuns | kUnaryMath, u(UnaryMath::exp), nullptr, nullptr, 0, 0},
    {Op::Log, "Log", 1, 1, 1, 1, kOnnxRuns | kUnaryMath, u(UnaryMath::log), nullptr, nullptr, 0, 0},
    {Op::Neg, "Neg", 1, 1, 1, 1, kOnnxRuns | kUnaryMath, u(UnaryMath::neg), nullptr, nullptr, 0, 0},
    {Op::Abs, "Abs", 1, 1, 1, 1, kOnnxRuns | kUnaryMath, u(UnaryMath::abs), nullptr, nullptr, 0, 0},
    {Op::Reciprocal, "Reciprocal", 1, 1, 1, 1, kOnnxRuns | kUnaryMath, u(UnaryMath::reciprocal), nullptr, nullptr, 0, 0},
    {Op::Floor, "Floor", 1, 1, 1, 1, kOnnxRuns | kUnaryMath, u(UnaryMath::floor), nullptr, nullptr, 0, 0},
    {Op::Ceil, "Ceil", 1, 1, 1, 1, kOnnxRuns | kUnaryMath, u(UnaryMath::ceil), nullptr, nullptr, 0, 0},
    {Op::Sin, "Sin", 7, 1, 1, 1, kOnnxRuns | kUnaryMath, u(UnaryMath::sin), nullptr, nullptr, 0, 0},
    {Op::Cos, "Cos", 7, 1, 1, 1, kOnnxRuns | kUnaryMath, u(UnaryMath::cos), nullptr, nullptr, 0, 0},
    {Op::MaxPool, "MaxPool", 1, 1, 1, 2, kOnnxRuns, 0, nullptr, nullptr, 0, 0},
    {Op::AveragePool, "AveragePool", 1, 1, 1, 1, kOnnxRuns, 0, nullptr, nullptr, 0, 0},
    {Op::GlobalAveragePool, "GlobalAveragePool", 1, 1, 1, 1, kOnnxRuns, 0, nullptr, nullptr, 0, 0},
    {Op::Reshape, "Reshape", 1, 2, 2, 1, kOnnxRuns, 0, nullptr, nullptr, 0, 0},
    {Op::Transpose, "Transpose", 1, 1, 1, 1, kOnnxRuns, 0, nullptr, nullptr, 0, 0},
    {Op::Gemm, "Gemm", 1, 2, 3, 1, kOnnxRuns, 0, nullptr, nullptr, 0, 0},
    {Op::MatMul, "MatMul", 1, 2, 2, 1, kOnnxRuns, 0, nullptr, nullptr, 0, 0},
    {Op::Concat, "Concat", 1, 1, M, 1, kOnnxRuns, 0, nullptr, nullptr, 0, 0},
    {Op::Split, "Split", 1, 1, 2, M, kOnnxRuns, 0, nullptr, nullptr, 0, 0},
    {Op::Slice, "Slice", 1, 3, 5, 1, kOnnxRuns, 0, nullptr, nullptr, 0, 0},
    {Op::Softmax, "Softmax", 1, 1, 1, 1, kOnnxRuns, 0, nullptr, nullptr, 0, 0},
    {Op::LogSoftmax, "LogSoftmax", 1, 1, 1, 1, kOnnxRuns, 0, nullptr, nullptr, 0, 0},
    {Op::Resize, "Resize", 10, 1, 4, 1, kOnnxRuns, 0, nullptr, nullptr, 0, 0},
    {Op::Pad, "Pad", 1, 1, 4, 1, kOnnxRuns, 0, nullptr, nullptr, 0, 0},
    {Op::ReduceMean, "ReduceMean", 1, 1, 2, 1, kOnnxRuns | kReduce, r(ReduceMath::mean), nullptr, nullptr, 0, 0},
    {Op::ReduceSum, "ReduceSum", 1, 1, 2, 1, kOnnxRuns | kReduce, r(ReduceMath::sum), nullptr, nullptr, 0, 0},
    {Op::ReduceMax, "ReduceMax", 1, 1, 2, 1, kOnnxRuns | kReduce, r(ReduceMath::max), nullptr, nullptr, 0, 0},
    {Op::ReduceMin, "ReduceMin", 1, 1, 2, 1, kOnnxRuns | kReduce, r(ReduceMath::min), nullptr, nullptr, 0, 0},
    {Op::ReduceL1, "ReduceL1", 1, 1, 2, 1, kOnnxRuns | kReduce, r(ReduceMath::l1), nullptr, nullptr, 0, 0},
    {Op::ReduceL2, "ReduceL2", 1, 1, 2, 1, kOnnxRuns | kReduce, r(ReduceMath::l2), nullptr, nullptr, 0, 0},
    {Op::ReduceSumSquare, "ReduceSumSquare", 1, 1, 2, 1, kOnnxRuns | kReduce, r(ReduceMath::sum_square), nullptr,
     nullptr, 0, 0},
    {Op::ReduceProd, "ReduceProd", 1, 1, 2, 1, kOnnxRuns | kReduce, r(ReduceMath::prod), nullptr, nullptr, 0, 0},
    {Op::LayerNormalization, "LayerNormalization", 17, 2, 3, 3, kOnnxRuns, 0, nullptr, nullptr, 0, 0},
    {Op::ArgMax, "ArgMax", 1, 1, 1, 1, kOnnxRuns, 0, nullptr, nullptr, 0, 0},
    {Op::ArgMin, "ArgMin", 1, 1, 1, 1, kOnnxRuns, 0, nullptr, nullptr, 0, 0},
    {Op::TopK, "TopK", 1, 2, 2, 2, kOnnxRuns, 0, nullptr, nullptr, 0, 0},
    {Op::GatherElements, "GatherElements", 11, 2, 2, 1, kOnnxRuns, 0, nullptr, nullptr, 0, 0},
    {Op::GridSample, "GridSample", 16, 2, 2, 1, kOnnxRuns, 0, nullptr, nullptr, 0, 0},
    // made by prepare() (arity: the prepared form's)
    {Op::Linear, "Linear", 0, 2, 4, 1, kRuns, 0, nullptr, nullptr, 0, 0},
    {Op::Gelu, "Gelu", 0, 1, 1, 1, kRuns | kUnaryMath, u(UnaryMath::gelu), nullptr, nullptr, 0, 0},
    {Op::Attention, "Attention", 0, 3, 4, 1, kRuns, 0, nullptr, nullptr, 0, 0},
    // respelled by canonicalize
    {Op::Flatten, "Flatten", 1, 1, 1, 1, kFromOnnx, 0, nullptr, nullptr, 0, 0},
    {Op::Squeeze, "Squeeze", 1, 1, 2, 1, kFromOnnx, 0, nullptr, nullptr, 0, 0},
    {Op::Unsqueeze, "Unsqueeze", 1, 1, 2, 1, kFromOnnx, 0, nullptr, nullptr, 0, 0},
    {Op::Upsample, "Upsample", 7, 1, 2, 1, kFromOnnx, 0, nullptr, nullptr, 0, 0},
    // rewritten by decompose
    {Op::DepthToSpace, "DepthToSpace", 1, 1, 1, 1, kFromOnnx, 0, nullptr, nullptr, 0, 0},
    {Op::SpaceToDepth, "SpaceToDepth", 1, 1, 1, 1, kFromOnnx, 0, nullptr, nullptr, 0, 0},
    {Op::Tile, "Tile", 1, 2, 2, 1, kFromOnnx, 0, nullptr, nullptr, 0, 0},
    {Op::InstanceNormalization, "InstanceNormalization", 1, 3, 3, 1, kFromOnnx, 0, nullptr, nullptr, 0, 0},
    {Op::GroupNormalization, "GroupNormalization", 18, 3, 3, 1, kFromOnnx, 0, nullptr, nullptr, 0, 0},
    {Op::Expand, "Expand", 8, 2, 2, 1, kFromOnnx, 0, nullptr, nullptr, 0, 0},
    {Op::Einsum, "Einsum", 12, 1, M, 1, kFromOnnx, 0, nullptr, nullptr, 0, 0},
    // removed or folded
    {Op::Identity, "Identity", 1, 1, 1, 1, kFromOnnx, 0, nullptr, nullptr, 0, 0},
    {Op::Dropout, "Dropout", 1, 1, 3, 2, kFromOnnx, 0, nullptr, nullptr, 0, 0},
    {Op::Constant, "Constant", 1, 0, 0, 1, kFromOnnx, 0, nullptr, nullptr, 0, 0},
    {Op::Shape, "Shape", 1, 1, 1, 1, kFromOnnx, 0, nullptr, nullptr, 0, 0},
    {Op::Gather, "Gather", 1, 2, 2, 1, kFromOnnx, 0, nullptr, nullptr, 0, 0},
    {Op::Cast, "Cast", 1, 1, 1, 1, kFromOnnx, 0, nullptr, nullptr, 0, 0},
    {Op::ConstantOfShape, "ConstantOfShape", 9, 1, 1, 1, kFromOnnx, 0, nullptr, nullptr, 0, 0},
    {Op::Equal, "Equal", 1, 2, 2, 1, kFromOnnx | kComparison, 0, nullptr, nullptr, 0, 0},
    {Op::Less, "Less", 1, 2, 2, 1, kFromOnnx | kComparison, 0, nullptr, nullptr, 0, 0},
    {Op::Greater, "Greater", 1, 2, 2, 1, kFromOnnx | kComparison, 0, nullptr, nullptr, 0, 0},
    {Op::LessOrEqual, "LessOrEqual", 12, 2, 2, 1, kFromOnnx | kComparison, 0, nullptr, nullptr, 0, 0},
    {Op::GreaterOrEqual, "GreaterOrEqual", 12, 2, 2, 1, kFromOnnx | kComparison, 0, nullptr, nullptr, 0, 0},
    {Op::And, "And", 1, 2, 2, 1, kFromOnnx | kComparison, 0, nullptr, nullptr, 0, 0},
    {Op::Or, "Or", 1, 2, 2, 1, kFromOnnx | kComparison, 0, nullptr, nullptr, 0, 0},
    {Op::Not, "Not", 1, 1, 1, 1, kFromOnnx, 0, nullptr, nullptr, 0, 0},
    {Op::Where, "Where", 9, 3, 3, 1, kFromOnnx, 0, nullptr, nullptr, 0, 0},
    {Op::Range, "Range", 11, 3, 3, 1, kFromOnnx, 0, nullptr, nullptr, 0, 0},
    {Op::Mod, "Mod", 10, 2, 2, 1, kFromOnnx, 0, nullptr, nullptr, 0, 0},
    {Op::ScatterND, "ScatterND", 11, 3, 3, 1, kFromOnnx, 0, nullptr, nullptr, 0, 0},
};

constexpr std::size_t kOpCount = static_cast<std::size_t>(Op::count_);
static_assert(sizeof kOpTable / sizeof kOpTable[0] == kOpCount, "one kOpTable entry per Op");

constexpr bool table_in_enum_order() {
  for (std::size_t i = 0; i < kOpCount; ++i)
    if (static_cast<std::size_t>(kOpTable[i].op) != i) return false;
  return true;
}
static_assert(table_in_enum_order(), "kOpTable lists the ops in the order of enum class Op");

constexpr bool activations_consistent() {
  for (const OpInfo& e : kOpTable)
    if ((e.flags & kActivation) && e.math == a(ActivationKind::none)) return false;
  return true;
}
static_assert(activations_consistent(), "every activation op names its ActivationKind");

template <typename T>
std::optional<T> math_if(Op op, OpFlag flag) {
  const OpInfo& e = op_info(op);
  if (!(e.flags & flag)) return std::nullopt;
  return static_cast<T>(e.math);
}

}  // namespace

const OpInfo& op_info(Op op) {
  const auto i = static_cast<std::size_t>(op);
  return kOpTable[i < kOpCount ? i : 0];
}

const std::string& op_name(Op op) {
  static const auto* names = [] {
    auto* v = new std::string[kOpCount];  // never freed: read by messages until exit
    for (std::size_t i = 0; i < kOpCount; ++i) v[i] = kOpTable[i].name;
    return v;
  }();
  return names[static_cast<std::size_t>(op_info(op).op)];
}

Op op_from_name(std::string_view name) {
  for (const OpInfo& e : kOpTable)  // some 90 entries; looked up once per node, by the loader
    if (e.op != Op::unknown && name == e.name) return e.op;
  return Op::unknown;
}

std::optional<UnaryMath> unary_math_of(Op op) { return math_if<UnaryMath>(op, kUnaryMath); }
std::optional<BinaryMath> binary_math_of(Op op) { return math_if<BinaryMath>(op, kBinaryMath); }
std::optional<ReduceMath> reduce_math_of(Op op) { return math_if<ReduceMath>(op, kReduce); }
std::optional<ActivationKind> activation_of(Op op) { return math_if<ActivationKind>(op, kActivation); }

Op op_of(ActivationKind kind) {
  for (const OpInfo& e : kOpTable)
    if ((e.flags & kActivation) && e.math == a(kind)) return e.op;
  return Op::unknown;
}

ActivationParams activation_params(Op op, const Attributes& attrs) {
  const OpInfo& e = op_info(op);
  ActivationParams p{static_cast<ActivationKind>(e.math), e.default_alpha, e.default_beta};
  if (e.alpha_attr) p.alpha = attrs.f(e.alpha_attr, p.alpha);
  if (e.beta_attr) p.beta = attrs.f(e.beta_attr, p.beta);
  return p;
}

std::optional<ActivationParams> fused_activation_params(const Attributes& attrs) {
  const std::string name = attrs.s("activation", "");
  if (name.empty()) return ActivationParams{};
  const OpInfo& e = op_info(op_from_name(name));
  if (!(e.flags & kActivation)) return std::nullopt;
  const auto kind = static_cast<ActivationKind>(e.math);
  // Parameters the kind does not have stay 0 (the CUDA backend's former spelling; they are unused either way).
  return ActivationParams{kind, e.alpha_attr ? attrs.f("act_alpha", e.default_alpha) : 0.f,
                          e.beta_attr ? attrs.f("act_beta", e.default_beta) : 0.f};
}

}  // namespace sluice::nn
