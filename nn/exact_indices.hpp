#pragma once
// Which run-time values of a prepared graph hold positions (integers) that a backend storing data at f16 or bf16
// must keep exact: one decision, made here, for every backend that holds values narrower than f32 (the CUDA
// engine at f16/bf16 keeps these values in f32 storage whatever its precision; the CPU backend is f32 throughout
// and needs none of it).
//
// The prepared form (nn/graph.hpp) has indices as f32 numbers: the outputs of ArgMax and ArgMin and TopK's second
// output. Held as f16 they are exact only up to 2048, as bf16 only up to 256. A value is an index value when
//   * an ArgMax/ArgMin/TopK computes it (the seeds), or
//   * an op made it from index values and constants only, by moving elements (Reshape, Transpose, Slice, Split,
//     Concat) or by elementwise arithmetic (Add, Sub, Mul, Div, Max, Min; Neg, Abs, Floor, Ceil): Tile and Expand
//     of run-time data become a Mul by a constant of ones, and arithmetic on positions (floor(i / classes) to
//     split a flat index, i + offset) stays exact in f32 where f16 would round it.
// Every reader of an index value either takes it as such (the ops above when their output is an index value;
// GatherElements' indices input; a graph output, converted when copied out) or is given a copy in the backend's
// own element type: `hold_indices_exactly` inserts that conversion (a Reshape to the same shape from the index
// value to "<value>/as_data") once per value, and points those readers at it.
#include <set>
#include <string>

#include "nn/graph.hpp"

namespace sluice::nn {

// The index values of a prepared graph (see above), by name.
std::set<std::string> index_values(const Graph& g);

struct ExactIndices {
  Graph graph;                      // the prepared graph with the conversions inserted (still in topological order)
  std::set<std::string> index_values;  // to hold exactly (f32), including none of the conversions' outputs
};
// `prepared` with every reader that does not take index values as such reading a converted copy.
ExactIndices hold_indices_exactly(const Graph& prepared);

// The suffix of a conversion's output name.
inline constexpr const char* kIndexAsDataSuffix = "/as_data";

}  // namespace sluice::nn
