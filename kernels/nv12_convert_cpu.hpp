#pragma once
// CPU twin of the NV12/P016 conversion kernel (semantics in nv12_convert.hpp).
#include <cstdint>

#include "kernels/nv12_convert.hpp"

namespace sluice::kernels {

// `luma` and `chroma` point at the two source planes; `dst` receives one frame. Throws like validate().
void nv12_convert_cpu(const Nv12ConvertParams& p, const std::uint8_t* luma, const std::uint8_t* chroma,
                      std::uint8_t* dst);

}  // namespace sluice::kernels
