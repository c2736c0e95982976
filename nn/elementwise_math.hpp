#pragma once
// The elementwise math ops (Erf, Sqrt, Exp, Log, Neg, Abs, Reciprocal, Floor, Ceil, Sin, Cos) and the binary ones
// beyond + - * / (Pow, Max, Min): one definition each, used by constant folding, the CPU backend and the CUDA
// kernels (the functions are the C math library's, which CUDA provides on the device under the same names).
#include <math.h>

#include <cstdint>

#if defined(__CUDACC__)
#define SLUICE_HOST_DEVICE __host__ __device__
#else
#define SLUICE_HOST_DEVICE
#endif

namespace sluice::nn {

// gelu: Gelu with approximate "none", x * 0.5 * (1 + erf(x / sqrt(2))); prepare() makes it from that pattern.
enum class UnaryMath : std::uint8_t { erf, sqrt, exp, log, neg, abs, reciprocal, floor, ceil, sin, cos, gelu };
enum class BinaryMath : std::uint8_t { add, sub, mul, div, pow, max, min };

// ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceL1, ReduceL2, ReduceSumSquare, ReduceProd.
enum class ReduceMath : std::uint8_t { mean, sum, max, min, l1, l2, sum_square, prod };

// An op's kind: unary_math_of(Op) etc. in nn/ops.hpp (the op table).

SLUICE_HOST_DEVICE inline float apply_unary_math(UnaryMath op, float x) {
  switch (op) {
    case UnaryMath::erf: return erff(x);
    case UnaryMath::sqrt: return sqrtf(x);
    case UnaryMath::exp: return expf(x);
    case UnaryMath::log: return logf(x);
    case UnaryMath::neg: return -x;
    case UnaryMath::abs: return fabsf(x);
    case UnaryMath::reciprocal: return 1.0f / x;
    case UnaryMath::floor: return floorf(x);
    case UnaryMath::ceil: return ceilf(x);
    case UnaryMath::sin: return sinf(x);
    case UnaryMath::cos: return cosf(x);
    case UnaryMath::gelu: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  }
  return x;
}

// Max/Min propagate NaN as ONNX Runtime and PyTorch do (fmaxf would drop it).
SLUICE_HOST_DEVICE inline float apply_binary_math(BinaryMath op, float a, float b) {
  switch (op) {
    case BinaryMath::add: return a + b;
    case BinaryMath::sub: return a - b;
    case BinaryMath::mul: return a * b;
    case BinaryMath::div: return a / b;
    case BinaryMath::pow: return b == 2.0f ? a * a : powf(a, b);
    case BinaryMath::max: return a != a || a > b ? a : b;
    case BinaryMath::min: return a != a || a < b ? a : b;
  }
  return a;
}

// A reduction: acc = reduce_start(op); acc = reduce_step(op, acc, x) for each element (in f32, also for f16 data);
// result = reduce_finish(op, acc, count).
SLUICE_HOST_DEVICE inline float reduce_start(ReduceMath op) {
  switch (op) {
    case ReduceMath::max: return -INFINITY;
    case ReduceMath::min: return INFINITY;
    case ReduceMath::prod: return 1.0f;
    default: return 0.0f;
  }
}

SLUICE_HOST_DEVICE inline float reduce_step(ReduceMath op, float acc, float x) {
  switch (op) {
    case ReduceMath::mean:
    case ReduceMath::sum: return acc + x;
    case ReduceMath::max: return apply_binary_math(BinaryMath::max, x, acc);  // a NaN element wins
    case ReduceMath::min: return apply_binary_math(BinaryMath::min, x, acc);
    case ReduceMath::l1: return acc + fabsf(x);
    case ReduceMath::l2:
    case ReduceMath::sum_square: return acc + x * x;
    case ReduceMath::prod: return acc * x;
  }
  return acc;
}

// Two partial accumulators of the same reduction (parallel reductions).
SLUICE_HOST_DEVICE inline float reduce_combine(ReduceMath op, float a, float b) {
  switch (op) {
    case ReduceMath::max: return apply_binary_math(BinaryMath::max, a, b);
    case ReduceMath::min: return apply_binary_math(BinaryMath::min, a, b);
    case ReduceMath::prod: return a * b;
    default: return a + b;
  }
}

SLUICE_HOST_DEVICE inline float reduce_finish(ReduceMath op, float acc, float count) {
  if (op == ReduceMath::mean) return acc / count;
  if (op == ReduceMath::l2) return sqrtf(acc);
  return acc;
}

}  // namespace sluice::nn
