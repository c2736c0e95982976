#pragma once
// Where the CPU backend keeps each 4-D value: in ONNX's NCHW, or channels last (NHWC), the order oneDNN's fast
// convolutions read and write. Keeping a chain of convolutions channels last saves a reorder on each side of
// every convolution; a value goes NHWC only when every node that writes or reads it can take it so, and graph
// inputs and outputs stay NCHW. Layers never see a layout they did not declare they can take.
#include <cstdint>
#include <map>
#include <string>

#include "nn/graph.hpp"

namespace sluice::nn::cpu {

enum class Layout : std::uint8_t { nchw, nhwc };  // nchw: ONNX's own order, any rank; nhwc: 4-D only

struct LayoutPlan {
  std::map<std::string, Layout> nhwc_values;  // only the values kept channels last; the rest are NCHW
  Layout of(const std::string& value) const {
    return nhwc_values.count(value) ? Layout::nhwc : Layout::nchw;
  }
};

// channels_last false: every value NCHW (the plain reference the tests compare against).
LayoutPlan plan_layouts(const Graph& prepared, bool channels_last);

}  // namespace sluice::nn::cpu
