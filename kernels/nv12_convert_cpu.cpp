#include "kernels/nv12_convert_cpu.hpp"

#include <stdexcept>
#include <string>

#include "kernels/nv12_convert_math.hpp"

namespace sluice::kernels {

void validate(const Nv12ConvertParams& p) {
  if (p.in_width < 1 || p.in_height < 1 || p.out_width < 1 || p.out_height < 1)
    throw std::invalid_argument("nv12 convert: sizes must be >= 1");
  if (p.in_bytes_per_sample != 1 && p.in_bytes_per_sample != 2)
    throw std::invalid_argument("nv12 convert: bytes per sample must be 1 or 2, got " +
                                std::to_string(p.in_bytes_per_sample));
  const std::size_t row = static_cast<std::size_t>(p.in_width) * static_cast<std::size_t>(p.in_bytes_per_sample);
  const std::size_t chroma_row = static_cast<std::size_t>((p.in_width + 1) / 2) * 2 * p.in_bytes_per_sample;
  if (p.in_pitch < row || p.in_pitch < chroma_row) throw std::invalid_argument("nv12 convert: pitch shorter than a row");
  const bool subsampled = p.out_format == PixelFormat::nv12 || p.out_format == PixelFormat::i420;
  if (subsampled && (p.out_width % 2 || p.out_height % 2))
    throw std::invalid_argument("nv12 convert: nv12/i420 output needs an even width and height");
}

void nv12_convert_cpu(const Nv12ConvertParams& p, const std::uint8_t* luma, const std::uint8_t* chroma,
                      std::uint8_t* dst) {
  validate(p);
  for (int y = 0; y < p.out_height; ++y)
    for (int x = 0; x < p.out_width; ++x) nv12::convert_pixel(p, luma, chroma, dst, x, y);
}

}  // namespace sluice::kernels
