#include <catch2/catch.hpp>

#include <set>

#include "stages/testsrc.hpp"

using namespace sluice;

TEST_CASE("test patterns are deterministic - distinct - and move when they should", "[testsrc]") {
  const int w = 64, h = 48;
  std::set<std::vector<std::byte>> distinct;
  for (int p = 0; p < 5; ++p) {
    const auto pattern = static_cast<TestPattern>(p);
    INFO(kTestPatternNames[p]);
    TestPatternRenderer a(pattern, PixelFormat::bgr8, w, h, 7), b(pattern, PixelFormat::bgr8, w, h, 7);
    std::vector<std::byte> f0(image_bytes(PixelFormat::bgr8, w, h)), g0(f0.size()), f5(f0.size());
    a.render(0, f0.data());
    b.render(0, g0.data());
    a.render(5, f5.data());
    REQUIRE(f0 == g0);
    REQUIRE(distinct.insert(f0).second);
    if (pattern == TestPattern::bars) REQUIRE(f5 == f0);  // static
    else REQUIRE(f5 != f0);
  }
}

TEST_CASE("testsrc colour bars have known values in BGR and NV12", "[testsrc]") {
  const int w = 64, h = 16;
  TestPatternRenderer bgr(TestPattern::bars, PixelFormat::bgr8, w, h, 1);
  std::vector<std::uint8_t> f(image_bytes(PixelFormat::bgr8, w, h));
  bgr.render(0, reinterpret_cast<std::byte*>(f.data()));
  // Bar 1 (x = 8..15) is 75% yellow: R = G = 191, B = 0; stored B, G, R.
  REQUIRE(f[3 * 9 + 0] == 0);
  REQUIRE(f[3 * 9 + 1] == 191);
  REQUIRE(f[3 * 9 + 2] == 191);

  TestPatternRenderer nv12(TestPattern::bars, PixelFormat::nv12, w, h, 1);
  std::vector<std::uint8_t> y(image_bytes(PixelFormat::nv12, w, h));
  nv12.render(0, reinterpret_cast<std::byte*>(y.data()));
  // 75% white in BT.601 limited range: Y = 16 + 219 * 191/255 = 180, U = V = 128.
  REQUIRE(y[0] == 180);
  REQUIRE(y[static_cast<std::size_t>(w * h)] == 128);
  REQUIRE(y[static_cast<std::size_t>(w * h) + 1] == 128);
}
