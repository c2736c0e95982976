#include "kernels/preprocess_cpu.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/half.hpp"

namespace sluice::kernels {
namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument("preprocess: " + what); }

std::string size_str(int w, int h) { return std::to_string(w) + "x" + std::to_string(h); }

// One axis of a bilinear sample: value = v[i0] + w * (v[i1] - v[i0]).
struct Tap {
  int i0 = 0, i1 = 0;
  float w = 0.f;
};

// Source coordinate of output index o is the exact rational (2o+1)*in/(2k*out) - 1/2 (k=1: full-resolution
// plane; k=2: half-resolution chroma, i.e. (s+0.5)/2-0.5), relative to the crop: `in` is the crop length, `out`
// the length of the resized image (the output size, or the letterboxed image size), `o` counts from the image's
// first output pixel, `plane` is the crop length in the sampled plane (clamping stays inside the crop). Integer
// maths keeps the neighbours and weights bit-identical to the GPU kernel's whatever float contraction either
// compiler applies (the kernel reaches the same integers through a different, division-free route).
Tap make_tap(int o, int in, int out, int k, int plane) {
  const long long num = (2LL * o + 1) * in - static_cast<long long>(k) * out;
  const long long den = 2LL * k * out;
  Tap t;
  if (num <= 0) {  // clamped to 0
    t.i0 = 0;
    t.i1 = std::min(1, plane - 1);
    return t;
  }
  const long long i0 = num / den;
  if (i0 >= plane - 1) {  // clamped to plane-1
    t.i0 = t.i1 = plane - 1;
    return t;
  }
  t.i0 = static_cast<int>(i0);
  t.i1 = t.i0 + 1;
  t.w = static_cast<float>(num - i0 * den) / static_cast<float>(den);  // both exact in float (< 2^24)
  return t;
}

// Taps of one output axis: output index o in [img_off, img_off + img_len) samples the crop [crop_off,
// crop_off + crop_len) resized to img_len; everything else is padding (letterbox). Indices are absolute in the
// source plane; chroma (YUV sources) uses the half-resolution crop.
struct Axis {
  std::vector<Tap> luma, chroma;
  std::vector<bool> pad;
};

Axis make_axis(int out, int img_off, int img_len, int crop_off, int crop_len, bool yuv) {
  Axis a;
  a.luma.resize(static_cast<std::size_t>(out));
  a.pad.assign(static_cast<std::size_t>(out), true);
  if (yuv) a.chroma.resize(static_cast<std::size_t>(out));
  for (int o = img_off; o < img_off + img_len; ++o) {
    const auto i = static_cast<std::size_t>(o);
    a.pad[i] = false;
    Tap t = make_tap(o - img_off, crop_len, img_len, 1, crop_len);
    t.i0 += crop_off;
    t.i1 += crop_off;
    a.luma[i] = t;
    if (yuv) {
      Tap c = make_tap(o - img_off, crop_len, img_len, 2, crop_len / 2);
      c.i0 += crop_off / 2;
      c.i1 += crop_off / 2;
      a.chroma[i] = c;
    }
  }
  return a;
}

// Bilinear sample of byte `ch` of pixel (tx, ty) in a plane of `step`-byte pixels, `stride` bytes a row.
inline float bilinear(const std::uint8_t* plane, std::size_t stride, int step, int ch, const Tap& tx, const Tap& ty) {
  const std::uint8_t* r0 = plane + static_cast<std::size_t>(ty.i0) * stride;
  const std::uint8_t* r1 = plane + static_cast<std::size_t>(ty.i1) * stride;
  const float a = r0[tx.i0 * step + ch], b = r0[tx.i1 * step + ch];
  const float c = r1[tx.i0 * step + ch], d = r1[tx.i1 * step + ch];
  const float top = a + tx.w * (b - a);
  const float bot = c + tx.w * (d - c);
  return top + ty.w * (bot - top);
}

struct Rgb {
  float r, g, b;
};

Rgb yuv_to_rgb(float y, float u, float v, const PreprocessParams& p) {
  if (p.yuv_full_range) {
    u -= 128.f;
    v -= 128.f;
  } else {
    y = (y - 16.f) * (255.f / 219.f);
    u = (u - 128.f) * (255.f / 224.f);
    v = (v - 128.f) * (255.f / 224.f);
  }
  Rgb c;
  if (p.yuv_matrix == YuvMatrix::bt601) {
    c = {y + 1.402f * v, y - 0.344136f * u - 0.714136f * v, y + 1.772f * u};
  } else {
    c = {y + 1.5748f * v, y - 0.187324f * u - 0.468124f * v, y + 1.8556f * u};
  }
  c.r = std::clamp(c.r, 0.f, 255.f);
  c.g = std::clamp(c.g, 0.f, 255.f);
  c.b = std::clamp(c.b, 0.f, 255.f);
  return c;
}

}  // namespace

void validate(const PreprocessParams& p) {
  if (p.batch <= 0) fail("batch must be positive (got " + std::to_string(p.batch) + ")");
  if (p.in_width <= 0 || p.in_height <= 0)
    fail("input size must be positive (got " + size_str(p.in_width, p.in_height) + ")");
  if (p.out_width <= 0 || p.out_height <= 0)
    fail("output size must be positive (got " + size_str(p.out_width, p.out_height) + ")");
  if (p.in_width > kPreprocessMaxDim || p.in_height > kPreprocessMaxDim || p.out_width > kPreprocessMaxDim ||
      p.out_height > kPreprocessMaxDim)
    fail("sizes above " + std::to_string(kPreprocessMaxDim) + " are not supported (input " +
         size_str(p.in_width, p.in_height) + ", output " + size_str(p.out_width, p.out_height) + ")");
  switch (p.in_format) {
    case PixelFormat::bgr8:
    case PixelFormat::rgb8:
    case PixelFormat::gray8: break;
    case PixelFormat::nv12:
    case PixelFormat::i420:
      if (p.in_width % 2 != 0 || p.in_height % 2 != 0)
        fail(std::string(to_string(p.in_format)) + " input needs even width and height (got " +
             size_str(p.in_width, p.in_height) + ")");
      break;
    default: fail("unknown in_format " + std::to_string(static_cast<int>(p.in_format)));
  }
  const std::string crop = "crop [" + std::to_string(p.crop_x) + ", " + std::to_string(p.crop_y) + ", " +
                           std::to_string(p.crop_width) + ", " + std::to_string(p.crop_height) + "]";
  if (p.crop_x < 0 || p.crop_y < 0 || p.crop_width < 0 || p.crop_height < 0)
    fail(crop + ": values must not be negative");
  {
    const PreprocessGeometry g = preprocess_geometry(p);
    if (g.crop_w <= 0 || g.crop_h <= 0 ||
        static_cast<long long>(g.crop_x) + g.crop_w > p.in_width ||
        static_cast<long long>(g.crop_y) + g.crop_h > p.in_height)
      fail(crop + " does not fit inside the " + size_str(p.in_width, p.in_height) + " input");
    if ((p.in_format == PixelFormat::nv12 || p.in_format == PixelFormat::i420) &&
        (g.crop_x % 2 != 0 || g.crop_y % 2 != 0 || g.crop_w % 2 != 0 || g.crop_h % 2 != 0))
      fail(std::string(to_string(p.in_format)) + " input needs an even crop origin and size (got " + crop +
           ", i.e. " + size_str(g.crop_w, g.crop_h) + " at " + std::to_string(g.crop_x) + "," +
           std::to_string(g.crop_y) + ")");
  }
  if (!(p.pad_value >= 0.f && p.pad_value <= 255.f))  // also rejects nan
    fail("pad_value must be in 0..255 (got " + std::to_string(p.pad_value) + ")");
  if (p.yuv_matrix != YuvMatrix::bt601 && p.yuv_matrix != YuvMatrix::bt709)
    fail("unknown yuv_matrix " + std::to_string(static_cast<int>(p.yuv_matrix)));
  if (p.out_order != ChannelOrder::rgb && p.out_order != ChannelOrder::bgr && p.out_order != ChannelOrder::gray)
    fail("unknown out_order " + std::to_string(static_cast<int>(p.out_order)));
  if (p.layout != Layout::nchw && p.layout != Layout::nhwc)
    fail("unknown layout " + std::to_string(static_cast<int>(p.layout)));
  if (p.dtype != DType::f32 && p.dtype != DType::f16 && p.dtype != DType::bf16)
    fail("dtype must be f32, f16 or bf16 (got " + std::string(to_string(p.dtype)) + ")");
  for (int c = 0; c < p.out_channels(); ++c) {
    if (!std::isfinite(p.mean[c])) fail("mean[" + std::to_string(c) + "] must be finite");
    if (p.std[c] == 0.f || !std::isfinite(p.std[c]))
      fail("std[" + std::to_string(c) + "] must be non-zero and finite (got " + std::to_string(p.std[c]) + ")");
  }
}

void preprocess_cpu(const PreprocessParams& p, const std::uint8_t* src, void* dst) {
  validate(p);
  if (src == nullptr || dst == nullptr) fail("null src or dst pointer");

  const int in_w = p.in_width, in_h = p.in_height, out_w = p.out_width, out_h = p.out_height;
  const int C = p.out_channels();
  const bool yuv = p.in_format == PixelFormat::nv12 || p.in_format == PixelFormat::i420;
  const int cw = in_w / 2, ch = in_h / 2;

  const PreprocessGeometry g = preprocess_geometry(p);
  const Axis xa = make_axis(out_w, g.img_x, g.img_w, g.crop_x, g.crop_w, yuv);
  const Axis ya = make_axis(out_h, g.img_y, g.img_h, g.crop_y, g.crop_h, yuv);

  const std::size_t in_bytes = image_bytes(p.in_format, in_w, in_h);
  const std::size_t plane_px = static_cast<std::size_t>(out_w) * static_cast<std::size_t>(out_h);
  const std::size_t out_elems = plane_px * static_cast<std::size_t>(C);
  const std::size_t luma = static_cast<std::size_t>(in_w) * static_cast<std::size_t>(in_h);
  const std::size_t chroma = static_cast<std::size_t>(cw) * static_cast<std::size_t>(ch);

  float* dst32 = static_cast<float*>(dst);
  std::uint16_t* dst16 = static_cast<std::uint16_t*>(dst);

  for (int n = 0; n < p.batch; ++n) {
    const std::uint8_t* img = src + static_cast<std::size_t>(n) * in_bytes;
    const std::size_t out_base = static_cast<std::size_t>(n) * out_elems;
    for (int y = 0; y < out_h; ++y) {
      const std::size_t yi = static_cast<std::size_t>(y);
      const Tap& ty = ya.luma[yi];
      for (int x = 0; x < out_w; ++x) {
        const std::size_t xi = static_cast<std::size_t>(x);
        const Tap& tx = xa.luma[xi];
        float v[3];
        if (xa.pad[xi] || ya.pad[yi]) {  // letterbox border: the pad value in every channel, gray included
          v[0] = v[1] = v[2] = p.pad_value;
        } else {
          float gray = 0.f;
          bool is_gray = false;  // gray8 source: no colour to mix or replicate through
          Rgb c{};
          switch (p.in_format) {
            case PixelFormat::bgr8:
            case PixelFormat::rgb8: {
              const std::size_t stride = static_cast<std::size_t>(in_w) * 3;
              const float s0 = bilinear(img, stride, 3, 0, tx, ty);
              const float s1 = bilinear(img, stride, 3, 1, tx, ty);
              const float s2 = bilinear(img, stride, 3, 2, tx, ty);
              c = p.in_format == PixelFormat::rgb8 ? Rgb{s0, s1, s2} : Rgb{s2, s1, s0};
              break;
            }
            case PixelFormat::gray8:
              gray = bilinear(img, static_cast<std::size_t>(in_w), 1, 0, tx, ty);
              is_gray = true;
              break;
            case PixelFormat::nv12:
            case PixelFormat::i420: {
              const Tap& tcx = xa.chroma[xi];
              const Tap& tcy = ya.chroma[yi];
              const float Y = bilinear(img, static_cast<std::size_t>(in_w), 1, 0, tx, ty);
              float U = 0.f, V = 0.f;
              if (p.in_format == PixelFormat::nv12) {
                const std::uint8_t* uv = img + luma;
                U = bilinear(uv, static_cast<std::size_t>(cw) * 2, 2, 0, tcx, tcy);
                V = bilinear(uv, static_cast<std::size_t>(cw) * 2, 2, 1, tcx, tcy);
              } else {
                U = bilinear(img + luma, static_cast<std::size_t>(cw), 1, 0, tcx, tcy);
                V = bilinear(img + luma + chroma, static_cast<std::size_t>(cw), 1, 0, tcx, tcy);
              }
              c = yuv_to_rgb(Y, U, V, p);
              break;
            }
          }

          if (p.out_order == ChannelOrder::gray) {
            v[0] = is_gray ? gray : 0.299f * c.r + 0.587f * c.g + 0.114f * c.b;
          } else if (is_gray) {
            v[0] = v[1] = v[2] = gray;
          } else if (p.out_order == ChannelOrder::rgb) {
            v[0] = c.r, v[1] = c.g, v[2] = c.b;
          } else {
            v[0] = c.b, v[1] = c.g, v[2] = c.r;
          }
        }

        const std::size_t px = yi * static_cast<std::size_t>(out_w) + xi;
        for (int k = 0; k < C; ++k) {
          const float out = (v[k] / 255.f - p.mean[k]) / p.std[k];
          const std::size_t idx = out_base + (p.layout == Layout::nchw
                                                  ? static_cast<std::size_t>(k) * plane_px + px
                                                  : px * static_cast<std::size_t>(C) + static_cast<std::size_t>(k));
          switch (p.dtype) {
            case DType::f16: dst16[idx] = float_to_half_bits(out); break;
            case DType::bf16: dst16[idx] = float_to_bf16_bits(out); break;
            default: dst32[idx] = out; break;
          }
        }
      }
    }
  }
}

}  // namespace sluice::kernels
