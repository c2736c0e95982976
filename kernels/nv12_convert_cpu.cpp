#include "kernels/nv12_convert_cpu.hpp"

#include <stdexcept>
#include <string>

#include "kernels/nv12_convert_math.hpp"

namespace sluice::kernels {

Nv12ConvertParams with_whole_rects(Nv12ConvertParams p) noexcept {
  const bool sideways = (p.quarter_turns & 1) != 0;
  if (p.src_w == 0) {
    p.src_x = p.src_y = 0;
    p.src_w = sideways ? p.in_height : p.in_width;
    p.src_h = sideways ? p.in_width : p.in_height;
  }
  if (p.dst_w == 0) p.dst_x = p.dst_y = 0, p.dst_w = p.out_width, p.dst_h = p.out_height;
  return p;
}

void validate(const Nv12ConvertParams& given) {
  const Nv12ConvertParams p = with_whole_rects(given);
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
  if (p.quarter_turns < 0 || p.quarter_turns > 3)
    throw std::invalid_argument("nv12 convert: quarter turns must be 0..3, got " + std::to_string(p.quarter_turns));
  const bool sideways = (p.quarter_turns & 1) != 0;
  const int upright_w = sideways ? p.in_height : p.in_width, upright_h = sideways ? p.in_width : p.in_height;
  const auto inside = [](long long x, long long y, long long w, long long h, long long outer_w, long long outer_h) {
    return x >= 0 && y >= 0 && w >= 1 && h >= 1 && x + w <= outer_w && y + h <= outer_h;
  };
  if (!inside(p.src_x, p.src_y, p.src_w, p.src_h, upright_w, upright_h) || p.src_x % 2 || p.src_y % 2)
    throw std::invalid_argument("nv12 convert: the shown part must lie in the upright frame, at an even position");
  if (!inside(p.dst_x, p.dst_y, p.dst_w, p.dst_h, p.out_width, p.out_height) ||
      (subsampled && (p.dst_x % 2 || p.dst_y % 2 || p.dst_w % 2 || p.dst_h % 2)))
    throw std::invalid_argument("nv12 convert: the destination must lie in the output (even for nv12/i420)");
}

void nv12_convert_cpu(const Nv12ConvertParams& p, const std::uint8_t* luma, const std::uint8_t* chroma,
                      std::uint8_t* dst) {
  validate(p);
  const Nv12ConvertParams whole = with_whole_rects(p);
  for (int y = 0; y < p.out_height; ++y)
    for (int x = 0; x < p.out_width; ++x) nv12::convert_pixel(whole, luma, chroma, dst, x, y);
}

}  // namespace sluice::kernels
