#pragma once
// Synthetic test frames, rendered straight into the destination buffer in any pixel format.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "runtime/format.hpp"

namespace sluice {

enum class TestPattern { bars, shapes, gradient, checkerboard, noise };
std::optional<TestPattern> parse_test_pattern(std::string_view s) noexcept;
inline constexpr const char* kTestPatternNames[] = {"bars", "shapes", "gradient", "checkerboard", "noise"};

class TestPatternRenderer {
 public:
  TestPatternRenderer(TestPattern pattern, PixelFormat format, int width, int height, std::uint64_t seed);
  // Writes frame `index` (image_bytes(format, width, height) bytes) to dst. Moving patterns move with index.
  void render(std::uint64_t index, std::byte* dst);

 private:
  void render_rgb_row(std::uint64_t index, int y, std::uint8_t* rgb);
  // Rows identical to the one above are copied, not rendered: most test pictures are flat in y.
  bool same_as_previous_row(std::uint64_t index, int y) const;
  void copy_previous_row(std::uint8_t* dst, int y) const;
  TestPattern pattern_;
  PixelFormat format_;
  int width_, height_;
  std::uint64_t seed_;
  std::vector<std::uint8_t> row_;   // one RGB row
  std::vector<std::uint8_t> ramp_;  // gradient: red by column
};

}  // namespace sluice
