#pragma once
// CPU twin of the BGR conversion kernel (semantics in bgr_convert.hpp).
#include <cstdint>

#include "kernels/bgr_convert.hpp"

namespace sluice::kernels {

// `src` points at the BGR image; `dst` receives one frame. Throws like validate().
void bgr_convert_cpu(const BgrConvertParams& p, const std::uint8_t* src, std::uint8_t* dst);

}  // namespace sluice::kernels
