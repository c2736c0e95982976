#include "kernels/roi_crop_cpu.hpp"

#include <cstddef>
#include <stdexcept>
#include <string>

#include "kernels/half.hpp"
#include "kernels/preprocess_cpu.hpp"

namespace sluice::kernels {
namespace {

// Every element of one output tensor set to the normalised pad value, as the kernels write a border pixel.
void fill_padding(const PreprocessParams& p, void* dst) {
  const std::size_t plane = static_cast<std::size_t>(p.out_width) * static_cast<std::size_t>(p.out_height);
  const int C = p.out_channels();
  for (int c = 0; c < C; ++c) {
    const float v = (p.pad_value / 255.f - p.mean[c]) / p.std[c];
    for (std::size_t px = 0; px < plane; ++px) {
      const std::size_t i = p.layout == Layout::nchw ? static_cast<std::size_t>(c) * plane + px
                                                     : px * static_cast<std::size_t>(C) + static_cast<std::size_t>(c);
      switch (p.dtype) {
        case DType::f16: static_cast<std::uint16_t*>(dst)[i] = float_to_half_bits(v); break;
        case DType::bf16: static_cast<std::uint16_t*>(dst)[i] = float_to_bf16_bits(v); break;
        default: static_cast<float*>(dst)[i] = v; break;
      }
    }
  }
}

}  // namespace

void validate_roi_crop(const PreprocessParams& p, int images) {
  if (images <= 0) throw std::invalid_argument("roi crop: images must be positive (got " + std::to_string(images) + ")");
  if (p.crop_x != 0 || p.crop_y != 0 || p.crop_width != 0 || p.crop_height != 0)
    throw std::invalid_argument("roi crop: the crop fields must be 0 (each ROI brings its own rect)");
  validate(p);  // sizes, formats, output: as preprocess (p.batch: the output slots)
}

void roi_crop_cpu(const PreprocessParams& p, const std::uint8_t* images, int images_count, const RoiRect* rois,
                  int count, void* dst) {
  validate_roi_crop(p, images_count);
  if (count < 0 || count > p.batch)
    throw std::invalid_argument("roi crop: " + std::to_string(count) + " ROIs for " + std::to_string(p.batch) +
                                " output slots");
  if (count > 0 && (images == nullptr || rois == nullptr || dst == nullptr))
    throw std::invalid_argument("roi crop: null images, rois or dst pointer");
  const std::size_t in_bytes = image_bytes(p.in_format, p.in_width, p.in_height);
  const std::size_t out_bytes = static_cast<std::size_t>(p.out_width) * static_cast<std::size_t>(p.out_height) *
                                static_cast<std::size_t>(p.out_channels()) * dtype_bytes(p.dtype);
  for (int n = 0; n < count; ++n) {
    const RoiRect& r = rois[n];
    void* out = static_cast<std::byte*>(dst) + static_cast<std::size_t>(n) * out_bytes;
    if (!roi_rect_usable(r, images_count, p.in_width, p.in_height, is_yuv(p.in_format))) {
      fill_padding(p, out);
      continue;
    }
    PreprocessParams one = p;
    one.batch = 1;
    one.crop_x = r.x;
    one.crop_y = r.y;
    one.crop_width = r.width;
    one.crop_height = r.height;
    preprocess_cpu(one, images + static_cast<std::size_t>(r.image) * in_bytes, out);
  }
}

}  // namespace sluice::kernels
