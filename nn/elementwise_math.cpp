#include "nn/elementwise_math.hpp"

#include <map>

namespace sluice::nn {
namespace {

template <typename Kind>
std::optional<Kind> find(const std::map<std::string, Kind>& table, const std::string& op) {
  auto it = table.find(op);
  if (it == table.end()) return std::nullopt;
  return it->second;
}

}  // namespace

std::optional<UnaryMath> unary_math_of(const std::string& op) {
  static const std::map<std::string, UnaryMath> table{
      {"Erf", UnaryMath::erf}, {"Sqrt", UnaryMath::sqrt}, {"Exp", UnaryMath::exp},
      {"Log", UnaryMath::log}, {"Neg", UnaryMath::neg},   {"Abs", UnaryMath::abs},
      {"Reciprocal", UnaryMath::reciprocal}, {"Floor", UnaryMath::floor}, {"Ceil", UnaryMath::ceil},
      {"Gelu", UnaryMath::gelu}};
  return find(table, op);
}

std::optional<BinaryMath> binary_math_of(const std::string& op) {
  static const std::map<std::string, BinaryMath> table{
      {"Add", BinaryMath::add}, {"Sub", BinaryMath::sub}, {"Mul", BinaryMath::mul}, {"Div", BinaryMath::div},
      {"Pow", BinaryMath::pow}, {"Max", BinaryMath::max}, {"Min", BinaryMath::min}};
  return find(table, op);
}

std::optional<ReduceMath> reduce_math_of(const std::string& op) {
  static const std::map<std::string, ReduceMath> table{
      {"ReduceMean", ReduceMath::mean}, {"ReduceSum", ReduceMath::sum}, {"ReduceMax", ReduceMath::max},
      {"ReduceMin", ReduceMath::min},   {"ReduceL1", ReduceMath::l1},   {"ReduceL2", ReduceMath::l2},
      {"ReduceSumSquare", ReduceMath::sum_square}, {"ReduceProd", ReduceMath::prod}};
  return find(table, op);
}

}  // namespace sluice::nn
