#include "runtime/format.hpp"

#include <array>
#include <utility>

namespace sluice {
namespace {
constexpr std::array<std::pair<PixelFormat, std::string_view>, 5> kPixelNames{{
    {PixelFormat::bgr8, "bgr8"}, {PixelFormat::rgb8, "rgb8"}, {PixelFormat::gray8, "gray8"},
    {PixelFormat::nv12, "nv12"}, {PixelFormat::i420, "i420"}}};
constexpr std::array<std::pair<DType, std::string_view>, 4> kDTypeNames{
    {{DType::u8, "u8"}, {DType::f32, "f32"}, {DType::f16, "f16"}, {DType::bf16, "bf16"}}};
constexpr std::array<std::pair<Layout, std::string_view>, 2> kLayoutNames{
    {{Layout::nchw, "nchw"}, {Layout::nhwc, "nhwc"}}};

template <typename E, std::size_t N>
std::string_view name_of(const std::array<std::pair<E, std::string_view>, N>& table, E e) noexcept {
  for (const auto& [value, name] : table)
    if (value == e) return name;
  return "?";
}
template <typename E, std::size_t N>
std::optional<E> value_of(const std::array<std::pair<E, std::string_view>, N>& table, std::string_view s) noexcept {
  for (const auto& [value, name] : table)
    if (name == s) return value;
  return std::nullopt;
}
}  // namespace

std::string_view to_string(PixelFormat f) noexcept { return name_of(kPixelNames, f); }
std::string_view to_string(DType d) noexcept { return name_of(kDTypeNames, d); }
std::string_view to_string(Layout l) noexcept { return name_of(kLayoutNames, l); }
std::optional<PixelFormat> parse_pixel_format(std::string_view s) noexcept { return value_of(kPixelNames, s); }
std::optional<DType> parse_dtype(std::string_view s) noexcept { return value_of(kDTypeNames, s); }
std::optional<Layout> parse_layout(std::string_view s) noexcept { return value_of(kLayoutNames, s); }

std::size_t image_bytes(PixelFormat f, int width, int height) noexcept {
  const auto pixels = static_cast<std::size_t>(width) * static_cast<std::size_t>(height);
  switch (f) {
    case PixelFormat::bgr8:
    case PixelFormat::rgb8: return pixels * 3;
    case PixelFormat::gray8: return pixels;
    case PixelFormat::nv12:
    case PixelFormat::i420: return pixels * 3 / 2;
  }
  return 0;
}

std::size_t dtype_bytes(DType d) noexcept {
  switch (d) {
    case DType::u8: return 1;
    case DType::f16:
    case DType::bf16: return 2;
    case DType::f32: return 4;
  }
  return 0;
}

std::size_t PayloadDesc::item_bytes() const noexcept {
  if (kind == PayloadKind::frames) return image_bytes(pixel, width, height);
  if (kind == PayloadKind::classes) return static_cast<std::size_t>(channels) * 8;  // kernels::ClassScore
  if (kind == PayloadKind::detections) return attribute_offset(attributes.size());
  return static_cast<std::size_t>(channels) * static_cast<std::size_t>(width) * static_cast<std::size_t>(height) *
         dtype_bytes(dtype);
}

std::size_t PayloadDesc::attribute_offset(std::size_t a) const noexcept {
  const auto slots = static_cast<std::size_t>(channels);
  std::size_t offset = 16 + slots * 32;  // kernels::DetectionsHeader, kernels::Detection (kernels/detect.hpp)
  for (std::size_t i = 0; i < a && i < attributes.size(); ++i)
    offset += slots * static_cast<std::size_t>(attributes[i].k) * 8;  // kernels::ClassScore
  return offset;
}

std::string PayloadDesc::describe() const {
  std::string s;
  if (kind == PayloadKind::frames) {
    s = "frames " + std::string(to_string(pixel)) + " " + std::to_string(width) + "x" + std::to_string(height);
  } else if (kind == PayloadKind::classes) {
    s = "classes top-" + std::to_string(channels) + " of " + std::to_string(classes) + (labels ? " (labelled)" : "");
  } else if (kind == PayloadKind::detections) {
    s = "detections up to " + std::to_string(channels) + " of " + std::to_string(classes) + " classes" +
        (labels ? " (labelled)" : "");
    for (const BoxAttribute& a : attributes)
      s += ", each with '" + a.name + "' top-" + std::to_string(a.k) + " of " + std::to_string(a.classes);
  } else {
    s = "tensor " + std::string(to_string(dtype)) + " " + std::string(to_string(layout)) + " " +
        std::to_string(channels) + "x" + std::to_string(height) + "x" + std::to_string(width);
  }
  return s + " x" + std::to_string(batch) + " (" + to_string(memory) + ")";
}

std::string SourceGeometry::describe() const {
  if (!known()) return "unknown";
  return std::string(letterbox ? "letterbox" : "stretch") + " of frame " + std::to_string(frame_width) + "x" +
         std::to_string(frame_height) + " crop " + std::to_string(crop_x) + "," + std::to_string(crop_y) + " " +
         std::to_string(crop_w) + "x" + std::to_string(crop_h) + " -> " + std::to_string(img_w) + "x" +
         std::to_string(img_h) + " at " + std::to_string(img_x) + "," + std::to_string(img_y);
}

}  // namespace sluice
