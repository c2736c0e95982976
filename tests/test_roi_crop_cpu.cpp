// Known-value tests of the ROI crop CPU twin and of the box -> rect rule it shares with the GPU kernel.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernels/preprocess_cpu.hpp"
#include "kernels/roi_crop_cpu.hpp"

using sluice::DType;
using sluice::Layout;
using sluice::PixelFormat;
using namespace sluice::kernels;

namespace {

bool same_rect(const RoiRect& a, const RoiRect& b) {
  return a.image == b.image && a.x == b.x && a.y == b.y && a.width == b.width && a.height == b.height;
}

PreprocessParams bgr_params(int slots, int in_w, int in_h, int out_w, int out_h) {
  PreprocessParams p;
  p.batch = slots;
  p.in_format = PixelFormat::bgr8;
  p.in_width = in_w;
  p.in_height = in_h;
  p.out_width = out_w;
  p.out_height = out_h;
  p.dtype = DType::f32;
  return p;
}

}  // namespace

TEST_CASE("roi_rect_from_box covers the box with whole pixels inside the image", "[roi_crop]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  CHECK(same_rect(roi_rect_from_box(2, 10.f, 20.f, 30.f, 40.f, 100, 80, false), {2, 10, 20, 20, 20}));
  CHECK(same_rect(roi_rect_from_box(0, 10.4f, 20.6f, 29.2f, 39.9f, 100, 80, false), {0, 10, 20, 20, 20}));
  CHECK(same_rect(roi_rect_from_box(0, -15.f, -3.f, 140.f, 500.f, 100, 80, false), {0, 0, 0, 100, 80}));
  CHECK(same_rect(roi_rect_from_box(0, 99.5f, 79.5f, 99.5f, 79.5f, 100, 80, false), {0, 99, 79, 1, 1}));
  CHECK(same_rect(roi_rect_from_box(0, 150.f, 90.f, 160.f, 95.f, 100, 80, false), {0, 99, 79, 1, 1}));
  // YUV: even origin and size, at least 2x2.
  CHECK(same_rect(roi_rect_from_box(1, 11.f, 21.f, 30.f, 40.f, 100, 80, true), {1, 10, 20, 20, 20}));
  CHECK(same_rect(roi_rect_from_box(1, 99.f, 79.f, 99.f, 79.f, 100, 80, true), {1, 98, 78, 2, 2}));
  // Hostile boxes: empty, refused by roi_rect_usable.
  for (const RoiRect& r : {roi_rect_from_box(0, nan, 0.f, 5.f, 5.f, 100, 80, false),
                           roi_rect_from_box(0, 0.f, 0.f, inf, 5.f, 100, 80, false),
                           roi_rect_from_box(0, 0.f, -inf, 5.f, 5.f, 100, 80, false),
                           roi_rect_from_box(0, 9.f, 0.f, 5.f, 5.f, 100, 80, false)}) {
    CHECK(r.width == 0);
    CHECK_FALSE(roi_rect_usable(r, 1, 100, 80, false));
  }
  CHECK(roi_rect_usable({0, 0, 0, 100, 80}, 1, 100, 80, false));
  CHECK_FALSE(roi_rect_usable({1, 0, 0, 10, 10}, 1, 100, 80, false));   // no such image
  CHECK_FALSE(roi_rect_usable({0, 95, 0, 10, 10}, 1, 100, 80, false));  // past the right edge
  CHECK_FALSE(roi_rect_usable({0, 1, 0, 10, 10}, 1, 100, 80, true));    // odd origin for YUV
  CHECK(roi_rect_usable({0, 2, 4, 10, 6}, 1, 100, 80, true));
}

TEST_CASE("roi_crop_cpu crops each rect of its own image into its own slot", "[roi_crop]") {
  // Two 40x30 images, each a flat background with one flat rectangle: a crop of exactly the rectangle is that
  // colour everywhere, whatever the resize.
  const int w = 40, h = 30;
  std::vector<std::uint8_t> src(static_cast<std::size_t>(w) * h * 3 * 2, 0);
  auto paint = [&](int image, int x0, int y0, int rw, int rh, std::uint8_t b, std::uint8_t g, std::uint8_t r) {
    for (int y = y0; y < y0 + rh; ++y)
      for (int x = x0; x < x0 + rw; ++x) {
        std::uint8_t* px = src.data() + ((static_cast<std::size_t>(image) * h + y) * w + x) * 3;
        px[0] = b, px[1] = g, px[2] = r;
      }
  };
  paint(0, 0, 0, w, h, 200, 200, 200);
  paint(1, 0, 0, w, h, 50, 50, 50);
  paint(0, 5, 7, 10, 6, 10, 20, 30);
  paint(1, 20, 3, 8, 20, 90, 60, 30);
  PreprocessParams p = bgr_params(3, w, h, 16, 12);
  const std::vector<RoiRect> rois = {{1, 20, 3, 8, 20}, {0, 5, 7, 10, 6}, {5, 0, 0, 4, 4}};
  std::vector<float> out(3u * 3 * 16 * 12, std::numeric_limits<float>::quiet_NaN());
  roi_crop_cpu(p, src.data(), 2, rois.data(), 3, out.data());
  const std::size_t plane = 16 * 12;
  auto all_equal = [&](int slot, int c, float v) {
    for (std::size_t i = 0; i < plane; ++i)
      if (out[(static_cast<std::size_t>(slot) * 3 + c) * plane + i] != v) return false;
    return true;
  };
  CHECK(all_equal(0, 0, 30.f / 255.f));  // rgb order: r, g, b of image 1's rectangle
  CHECK(all_equal(0, 1, 60.f / 255.f));
  CHECK(all_equal(0, 2, 90.f / 255.f));
  CHECK(all_equal(1, 0, 30.f / 255.f));  // image 0's rectangle
  CHECK(all_equal(1, 1, 20.f / 255.f));
  CHECK(all_equal(1, 2, 10.f / 255.f));
  for (int c = 0; c < 3; ++c) CHECK(all_equal(2, c, 114.f / 255.f));  // no image 5: padding

  // A usable rect's slot is exactly preprocess with that crop of that image (letterboxed here).
  p.letterbox = true;
  roi_crop_cpu(p, src.data(), 2, rois.data(), 3, out.data());
  PreprocessParams one = p;
  one.batch = 1;
  one.crop_x = 20, one.crop_y = 3, one.crop_width = 8, one.crop_height = 20;
  std::vector<float> ref(3u * plane);
  preprocess_cpu(one, src.data() + static_cast<std::size_t>(w) * h * 3, ref.data());
  CHECK(std::memcmp(ref.data(), out.data(), ref.size() * sizeof(float)) == 0);
  CHECK(out[0] == 114.f / 255.f);  // 8x20 into 16x12: a pillarbox, the corner is padding
}

TEST_CASE("roi_crop_cpu refuses bad parameters, naming them", "[roi_crop]") {
  std::vector<std::uint8_t> src(8 * 8 * 3, 0);
  std::vector<float> out(2 * 3 * 4 * 4);
  const RoiRect r{0, 0, 0, 4, 4};
  PreprocessParams p = bgr_params(2, 8, 8, 4, 4);
  CHECK_THROWS_WITH(roi_crop_cpu(p, src.data(), 0, &r, 1, out.data()), Catch::Contains("images must be positive"));
  CHECK_THROWS_WITH(roi_crop_cpu(p, src.data(), 1, &r, 3, out.data()), Catch::Contains("3 ROIs for 2 output slots"));
  CHECK_THROWS_WITH(roi_crop_cpu(p, src.data(), 1, nullptr, 1, out.data()), Catch::Contains("null"));
  p.crop_x = 2;
  CHECK_THROWS_WITH(roi_crop_cpu(p, src.data(), 1, &r, 1, out.data()), Catch::Contains("crop fields must be 0"));
  p.crop_x = 0;
  p.out_width = 0;
  CHECK_THROWS_WITH(roi_crop_cpu(p, src.data(), 1, &r, 1, out.data()), Catch::Contains("output size"));
  p.out_width = 4;
  CHECK_NOTHROW(roi_crop_cpu(p, src.data(), 1, &r, 0, out.data()));  // no ROIs: nothing to do
}
