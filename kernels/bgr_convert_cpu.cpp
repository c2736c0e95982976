#include "kernels/bgr_convert_cpu.hpp"

#include <stdexcept>
#include <string>

#include "kernels/bgr_convert_math.hpp"

namespace sluice::kernels {

void validate(const BgrConvertParams& p) {
  if (p.in_width < 1 || p.in_height < 1 || p.out_width < 1 || p.out_height < 1)
    throw std::invalid_argument("bgr convert: sizes must be >= 1");
  if (p.in_pitch < static_cast<std::size_t>(p.in_width) * 3)
    throw std::invalid_argument("bgr convert: pitch shorter than a row");
  if (p.orientation < 1 || p.orientation > 8)
    throw std::invalid_argument("bgr convert: orientation must be 1..8, got " + std::to_string(p.orientation));
  const bool subsampled = p.out_format == PixelFormat::nv12 || p.out_format == PixelFormat::i420;
  if (subsampled && (p.out_width % 2 || p.out_height % 2))
    throw std::invalid_argument("bgr convert: nv12/i420 output needs an even width and height");
}

void bgr_convert_cpu(const BgrConvertParams& p, const std::uint8_t* src, std::uint8_t* dst) {
  validate(p);
  for (int y = 0; y < p.out_height; ++y)
    for (int x = 0; x < p.out_width; ++x) bgr::convert_pixel(p, src, dst, x, y);
}

}  // namespace sluice::kernels
