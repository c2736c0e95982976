#include "media/frame_fit.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace sluice {
namespace {

// `v` rounded to the nearest multiple of `align`, kept within [align, limit] (limit rounded down likewise).
int aligned(double v, int align, int limit) {
  const int top = std::max(align, limit / align * align);
  const int n = static_cast<int>(std::lround(v / align)) * align;
  return std::clamp(n, align, top);
}

int centred(int outer, int inner, int align) { return std::max(0, (outer - inner) / 2 / align * align); }

template <int Bytes>
void rotate_elements(const std::uint8_t* src, std::ptrdiff_t src_stride, int w, int h, std::uint8_t* dst,
                     std::ptrdiff_t dst_stride, int quarter_turns) {
  const auto at = [&](int x, int y) { return src + y * src_stride + static_cast<std::ptrdiff_t>(x) * Bytes; };
  switch (quarter_turns) {
    case 1:  // dst is h wide, w high: dst(u, v) = src(v, h-1-u)
      for (int v = 0; v < w; ++v) {
        std::uint8_t* out = dst + v * dst_stride;
        for (int u = 0; u < h; ++u) std::memcpy(out + u * Bytes, at(v, h - 1 - u), Bytes);
      }
      return;
    case 2:  // dst(u, v) = src(w-1-u, h-1-v)
      for (int v = 0; v < h; ++v) {
        std::uint8_t* out = dst + v * dst_stride;
        for (int u = 0; u < w; ++u) std::memcpy(out + u * Bytes, at(w - 1 - u, h - 1 - v), Bytes);
      }
      return;
    case 3:  // dst is h wide, w high: dst(u, v) = src(w-1-v, u)
      for (int v = 0; v < w; ++v) {
        std::uint8_t* out = dst + v * dst_stride;
        for (int u = 0; u < h; ++u) std::memcpy(out + u * Bytes, at(w - 1 - v, u), Bytes);
      }
      return;
    default:
      for (int y = 0; y < h; ++y) std::memcpy(dst + y * dst_stride, at(0, y), static_cast<std::size_t>(w) * Bytes);
  }
}

}  // namespace

FitPlan plan_fit(int frame_w, int frame_h, int target_w, int target_h, Fit fit, int target_align,
                 int source_align) noexcept {
  FitPlan plan;
  plan.source = {0, 0, frame_w, frame_h};
  plan.dest = {0, 0, target_w, target_h};
  if (frame_w <= 0 || frame_h <= 0 || target_w <= 0 || target_h <= 0) return plan;
  const double sx = static_cast<double>(target_w) / frame_w, sy = static_cast<double>(target_h) / frame_h;
  switch (fit) {
    case Fit::stretch: break;
    case Fit::letterbox: {
      const double s = std::min(sx, sy);
      plan.dest.width = aligned(frame_w * s, target_align, target_w);
      plan.dest.height = aligned(frame_h * s, target_align, target_h);
      plan.dest.x = centred(target_w, plan.dest.width, target_align);
      plan.dest.y = centred(target_h, plan.dest.height, target_align);
      break;
    }
    case Fit::crop: {
      const double s = std::max(sx, sy);
      plan.source.width = aligned(target_w / s, source_align, frame_w);
      plan.source.height = aligned(target_h / s, source_align, frame_h);
      plan.source.x = centred(frame_w, plan.source.width, source_align);
      plan.source.y = centred(frame_h, plan.source.height, source_align);
      break;
    }
  }
  return plan;
}

PixelRect unrotate_rect(const PixelRect& r, int stored_w, int stored_h, int quarter_turns) noexcept {
  switch (quarter_turns & 3) {
    case 1: return {r.y, stored_h - r.x - r.width, r.height, r.width};
    case 2: return {stored_w - r.x - r.width, stored_h - r.y - r.height, r.width, r.height};
    case 3: return {stored_w - r.y - r.height, r.x, r.height, r.width};
    default: return r;
  }
}

void rotate_plane(const std::uint8_t* src, std::ptrdiff_t src_stride, int w, int h, int element_bytes,
                  std::uint8_t* dst, std::ptrdiff_t dst_stride, int quarter_turns) noexcept {
  const int turns = quarter_turns & 3;
  switch (element_bytes) {
    case 1: rotate_elements<1>(src, src_stride, w, h, dst, dst_stride, turns); return;
    case 2: rotate_elements<2>(src, src_stride, w, h, dst, dst_stride, turns); return;
    case 3: rotate_elements<3>(src, src_stride, w, h, dst, dst_stride, turns); return;
    default: return;
  }
}

}  // namespace sluice
