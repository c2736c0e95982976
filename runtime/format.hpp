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
// detections: per item a kernels::DetectionsHeader and `channels` (max detections) kernels::Detection slots, the
// first header.count filled (boxes in source-frame pixels; the infer stage's `output: detections`), then one block
// per BoxAttribute: for every slot, its k ClassScore entries.
enum class PayloadKind : std::uint8_t { frames, tensor, classes, detections };

// How a tensor's pixels map to the frames they were made from (the preprocess stage's crop and fit): tensor pixel
// edge x lies at frame x = crop_x + (x - img_x) * crop_w / img_w (likewise y); pixels outside img_* are padding.
// frame_width 0: unknown (a tensor not made by preprocess).
struct SourceGeometry {
  int frame_width = 0, frame_height = 0;
  int crop_x = 0, crop_y = 0, crop_w = 0, crop_h = 0;
  int img_x = 0, img_y = 0, img_w = 0, img_h = 0;
  bool letterbox = false;
  bool known() const noexcept { return frame_width > 0; }
  // e.g. "letterbox crop 0,0 1280x720 -> 640x360 at 0,140 of the input" or "unknown"
  std::string describe() const;
};

std::string_view to_string(PixelFormat f) noexcept;
std::string_view to_string(DType d) noexcept;
std::string_view to_string(Layout l) noexcept;
std::optional<PixelFormat> parse_pixel_format(std::string_view s) noexcept;
std::optional<DType> parse_dtype(std::string_view s) noexcept;
std::optional<Layout> parse_layout(std::string_view s) noexcept;

// Bytes of one width x height image; NV12/I420 need even sizes (checked by the stages that make them).
std::size_t image_bytes(PixelFormat f, int width, int height) noexcept;
std::size_t dtype_bytes(DType d) noexcept;

// What a secondary model said about each box (the classify_boxes stage): its top-k classes per box slot, best
// first; a slot the model did not look at (filtered out, over the limit, an event slot) has index -1 in each.
struct BoxAttribute {
  std::string name;  // its key in the records (the stage's `attribute`)
  int k = 1;
  int classes = 0;   // how many the model tells apart
  std::shared_ptr<const std::vector<std::string>> labels;  // optional: one name per class
};

// The description of what flows between two stages. One batch holds up to `batch` items of this shape.
struct PayloadDesc {
  PayloadKind kind = PayloadKind::frames;
  MemoryKind memory = MemoryKind::host;
  int batch = 1;
  int width = 0, height = 0;
  PixelFormat pixel = PixelFormat::bgr8;  // frames only
  DType dtype = DType::u8;                // tensor only
  Layout layout = Layout::nchw;           // tensor only
  int channels = 0;                       // tensor: channels; classes: k; detections: max per item
  int classes = 0;                        // classes, detections: how many the model tells apart
  std::shared_ptr<const std::vector<std::string>> labels;  // classes, detections, optional: one name per class
  SourceGeometry geometry;                // tensor, detections: where the pixels came from
  std::vector<BoxAttribute> attributes;   // detections: what secondary models added per box, in order

  // detections: where attribute a's block starts in an item (a == attributes.size(): the item's size).
  std::size_t attribute_offset(std::size_t a) const noexcept;

  std::size_t item_bytes() const noexcept;
  std::size_t batch_bytes() const noexcept { return item_bytes() * static_cast<std::size_t>(batch); }
  // e.g. "frames bgr8 1920x1080 x8 (pinned)" or "tensor f16 nhwc 3x224x224 x8 (device)"
  std::string describe() const;
};

}  // namespace sluice
