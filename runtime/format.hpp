#pragma once
// What a batch holds: frames of a pixel format, or tensors of a dtype and layout; and where it lives.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/gpu_handles.hpp"

namespace sluice {

enum class PixelFormat : std::uint8_t { bgr8, rgb8, gray8, nv12, i420 };
enum class DType : std::uint8_t { u8, f32, f16, bf16 };
enum class Layout : std::uint8_t { nchw, nhwc };
// classes: per item, `channels` (k) ClassScore entries {f32 score, i32 class index}, best first (the infer
// stage's classification output); `labels` names the classes when a labels file was given.
enum class PayloadKind : std::uint8_t { frames, tensor, classes };

std::string_view to_string(PixelFormat f) noexcept;
std::string_view to_string(DType d) noexcept;
std::string_view to_string(Layout l) noexcept;
std::optional<PixelFormat> parse_pixel_format(std::string_view s) noexcept;
std::optional<DType> parse_dtype(std::string_view s) noexcept;
std::optional<Layout> parse_layout(std::string_view s) noexcept;

// Bytes of one width x height image; NV12/I420 need even sizes (checked by the stages that make them).
std::size_t image_bytes(PixelFormat f, int width, int height) noexcept;
std::size_t dtype_bytes(DType d) noexcept;

// The description of what flows between two stages. One batch holds up to `batch` items of this shape.
struct PayloadDesc {
  PayloadKind kind = PayloadKind::frames;
  MemoryKind memory = MemoryKind::host;
  int batch = 1;
  int width = 0, height = 0;
  PixelFormat pixel = PixelFormat::bgr8;  // frames only
  DType dtype = DType::u8;                // tensor only
  Layout layout = Layout::nchw;           // tensor only
  int channels = 0;                       // tensor: channels; classes: k
  int classes = 0;                        // classes only: how many the model tells apart
  std::shared_ptr<const std::vector<std::string>> labels;  // classes only, optional: one name per class

  std::size_t item_bytes() const noexcept;
  std::size_t batch_bytes() const noexcept { return item_bytes() * static_cast<std::size_t>(batch); }
  // e.g. "frames bgr8 1920x1080 x8 (pinned)" or "tensor f16 nhwc 3x224x224 x8 (device)"
  std::string describe() const;
};

}  // namespace sluice
