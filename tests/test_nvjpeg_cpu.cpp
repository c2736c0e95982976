// The CPU side of GPU image decoding: the BGR -> frame conversion's CPU twin on inputs worked out by hand (the
// GPU kernel is held to it in tests/gpu/test_nvjpeg_gpu.cpp), the JPEG marker walk that screens files before
// nvJPEG (tests/data/nvjpeg: whole, truncated, corrupt, not a JPEG), and the reader's registration: images go
// through the extension readers and decoder: cpu leaves them to the CPU image reader.
#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "kernels/bgr_convert_cpu.hpp"
#include "media/nvjpeg/jpeg_reader.hpp"
#include "media/nvjpeg/jpeg_sniff.hpp"
#include "runtime/frame_reader.hpp"
#include "tests/pipeline_helpers.hpp"

using namespace sluice;
using kernels::BgrConvertParams;

namespace {

std::vector<std::uint8_t> convert(const std::vector<std::uint8_t>& bgr, int w, int h, PixelFormat f, int ow, int oh) {
  BgrConvertParams p;
  p.in_width = w;
  p.in_height = h;
  p.in_pitch = static_cast<std::size_t>(w) * 3;
  p.out_format = f;
  p.out_width = ow;
  p.out_height = oh;
  std::vector<std::uint8_t> out(image_bytes(f, ow, oh), 0xEE);
  kernels::bgr_convert_cpu(p, bgr.data(), out.data());
  return out;
}

std::vector<std::uint8_t> file_bytes(const std::string& name) {
  std::ifstream in(test::source_dir() + "/tests/data/nvjpeg/" + name, std::ios::binary);
  REQUIRE(in.good());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

JpegHeader sniff_file(const std::string& name) {
  const auto bytes = file_bytes(name);
  return sniff_jpeg(bytes.data(), bytes.size());
}

}  // namespace

TEST_CASE("bgr convert: at the image's own size bgr8 is a copy and rgb8 swaps the channels", "[nvjpeg][kernels]") {
  std::mt19937 rng(7);
  std::vector<std::uint8_t> img(13 * 7 * 3);
  for (auto& b : img) b = static_cast<std::uint8_t>(rng());
  CHECK(convert(img, 13, 7, PixelFormat::bgr8, 13, 7) == img);
  const auto rgb = convert(img, 13, 7, PixelFormat::rgb8, 13, 7);
  for (std::size_t i = 0; i < img.size(); i += 3) {
    CHECK(rgb[i] == img[i + 2]);
    CHECK(rgb[i + 1] == img[i + 1]);
    CHECK(rgb[i + 2] == img[i]);
  }
}

TEST_CASE("bgr convert: bilinear enlargement with half-pixel centres, worked out by hand", "[nvjpeg][kernels]") {
  // Black then white, 2x1 -> 4x1: source positions 0, 0.25, 0.75, 1 (in 1/256: 0, 64, 192, 256 clamped).
  const std::vector<std::uint8_t> img = {0, 0, 0, 255, 255, 255};
  const auto out = convert(img, 2, 1, PixelFormat::gray8, 4, 1);
  // gray of (v, v, v) = (32768 v + 16384) >> 15 = v; blends: 255*64/256 = 63.75 -> 64, 255*192/256 = 191.25 -> 191.
  CHECK(out == std::vector<std::uint8_t>{0, 64, 191, 255});
}

TEST_CASE("bgr convert: colour as OpenCV's cvtColor computes it", "[nvjpeg][kernels]") {
  // gray8: (9798 R + 19235 G + 3735 B + 16384) >> 15; B=10 G=200 R=30 -> 4194674 >> 15 = 128 (0.299/0.587/0.114: 127.5).
  CHECK(convert({10, 200, 30}, 1, 1, PixelFormat::gray8, 1, 1) == std::vector<std::uint8_t>{128});
  // Pure red, 2x2, BT.601 limited range: Y 82 (81.5), U 90 (90.3), V 240 (239.9); white: 235, 128, 128.
  const std::vector<std::uint8_t> red(2 * 2 * 3, 0), white(2 * 2 * 3, 255);
  std::vector<std::uint8_t> red_img = red;
  for (std::size_t i = 2; i < red_img.size(); i += 3) red_img[i] = 255;
  CHECK(convert(red_img, 2, 2, PixelFormat::i420, 2, 2) == std::vector<std::uint8_t>{82, 82, 82, 82, 90, 240});
  CHECK(convert(red_img, 2, 2, PixelFormat::nv12, 2, 2) == std::vector<std::uint8_t>{82, 82, 82, 82, 90, 240});
  CHECK(convert(white, 2, 2, PixelFormat::i420, 2, 2) == std::vector<std::uint8_t>{235, 235, 235, 235, 128, 128});
  // Chroma comes from each 2x2 block's top-left pixel (as OpenCV's BGR2YUV_I420): a red top-left, white rest.
  std::vector<std::uint8_t> mixed = white;
  mixed[0] = mixed[1] = 0;
  CHECK(convert(mixed, 2, 2, PixelFormat::nv12, 2, 2) == std::vector<std::uint8_t>{82, 235, 235, 235, 90, 240});
}

TEST_CASE("bgr convert: EXIF orientations turn the image upright first", "[nvjpeg][kernels]") {
  // A 3x2 image of grey levels 0 10 20 / 30 40 50; gray8 of (v, v, v) is v.
  std::vector<std::uint8_t> img;
  for (int v = 0; v <= 50; v += 10) img.insert(img.end(), {static_cast<std::uint8_t>(v), static_cast<std::uint8_t>(v),
                                                           static_cast<std::uint8_t>(v)});
  auto turned = [&](int orientation, int ow, int oh) {
    BgrConvertParams p;
    p.in_width = 3;
    p.in_height = 2;
    p.in_pitch = 9;
    p.orientation = orientation;
    p.out_format = PixelFormat::gray8;
    p.out_width = ow;
    p.out_height = oh;
    std::vector<std::uint8_t> out(static_cast<std::size_t>(ow * oh));
    kernels::bgr_convert_cpu(p, img.data(), out.data());
    return out;
  };
  CHECK(turned(1, 3, 2) == std::vector<std::uint8_t>{0, 10, 20, 30, 40, 50});
  CHECK(turned(2, 3, 2) == std::vector<std::uint8_t>{20, 10, 0, 50, 40, 30});  // mirrored
  CHECK(turned(3, 3, 2) == std::vector<std::uint8_t>{50, 40, 30, 20, 10, 0});  // 180 degrees
  CHECK(turned(4, 3, 2) == std::vector<std::uint8_t>{30, 40, 50, 0, 10, 20});  // upside down
  CHECK(turned(5, 2, 3) == std::vector<std::uint8_t>{0, 30, 10, 40, 20, 50});  // transposed
  CHECK(turned(6, 2, 3) == std::vector<std::uint8_t>{30, 0, 40, 10, 50, 20});  // 90 degrees clockwise
  CHECK(turned(7, 2, 3) == std::vector<std::uint8_t>{50, 20, 40, 10, 30, 0});  // transversed
  CHECK(turned(8, 2, 3) == std::vector<std::uint8_t>{20, 50, 10, 40, 0, 30});  // 90 degrees counter-clockwise
  CHECK_THROWS_AS(turned(9, 2, 3), std::invalid_argument);
}

TEST_CASE("bgr convert: bad params are refused", "[nvjpeg][kernels]") {
  BgrConvertParams p;
  p.in_width = p.in_height = 4;
  p.in_pitch = 11;  // < 12
  p.out_width = p.out_height = 4;
  CHECK_THROWS_AS(kernels::validate(p), std::invalid_argument);
  p.in_pitch = 12;
  CHECK_NOTHROW(kernels::validate(p));
  p.out_format = PixelFormat::nv12;
  p.out_width = 5;
  CHECK_THROWS_AS(kernels::validate(p), std::invalid_argument);
  p.out_width = 0;
  p.out_format = PixelFormat::bgr8;
  CHECK_THROWS_AS(kernels::validate(p), std::invalid_argument);
}

TEST_CASE("jpeg sniff: whole files pass with their frame header", "[nvjpeg]") {
  const JpegHeader a = sniff_file("color444.jpg");
  CHECK(a.problem.empty());
  CHECK(a.width == 64);
  CHECK(a.height == 48);
  CHECK(a.components == 3);
  CHECK_FALSE(a.progressive);
  CHECK(a.orientation == 1);
  CHECK(sniff_file("exif6.jpg").orientation == 6);  // little-endian TIFF
  CHECK(sniff_file("exif8.jpg").orientation == 8);  // big-endian TIFF
  CHECK(sniff_file("exif8.jpg").problem.empty());
  const JpegHeader b = sniff_file("odd420.jpg");
  CHECK(b.problem.empty());
  CHECK(b.width == 33);
  CHECK(b.height == 17);
}

TEST_CASE("jpeg sniff: truncated, corrupt and non-JPEG files are told apart", "[nvjpeg]") {
  CHECK_THAT(sniff_file("truncated.jpg").problem, Catch::Contains("truncated"));
  CHECK_THAT(sniff_file("corrupt.jpg").problem, Catch::Contains("corrupt"));
  CHECK_THAT(sniff_file("image.png").problem, Catch::Contains("not a JPEG"));
  // Every cut of a whole file is refused (the end-of-image marker is the last thing in it), and never read past.
  const auto whole = file_bytes("smooth420.jpg");
  for (std::size_t n = 0; n < whole.size(); ++n) {
    const std::vector<std::uint8_t> cut(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(n));
    INFO("first " << n << " bytes");
    CHECK_FALSE(sniff_jpeg(cut.data(), cut.size()).problem.empty());
  }
  // Bytes after the end-of-image marker (some cameras append data) are allowed.
  std::vector<std::uint8_t> trailing = whole;
  trailing.insert(trailing.end(), {0x00, 0x11, 0x22});
  CHECK(sniff_jpeg(trailing.data(), trailing.size()).problem.empty());
}

TEST_CASE("jpeg sniff: a 4-component (CMYK) and a 12-bit frame header are unsupported", "[nvjpeg]") {
  auto with_frame = [](std::uint8_t marker, std::uint8_t precision, std::uint8_t components) {
    std::vector<std::uint8_t> f = {0xFF, 0xD8, 0xFF, marker, 0x00, static_cast<std::uint8_t>(8 + 3 * components),
                                   precision, 0x00, 0x10, 0x00, 0x10, components};
    for (int c = 0; c < components; ++c) f.insert(f.end(), {static_cast<std::uint8_t>(c + 1), 0x11, 0x00});
    f.insert(f.end(), {0xFF, 0xDA, 0x00, 0x02, 0x12, 0x34, 0xFF, 0xD9});
    return sniff_jpeg(f.data(), f.size());
  };
  CHECK(with_frame(0xC0, 8, 3).problem.empty());
  CHECK(with_frame(0xC2, 8, 1).progressive);
  CHECK_THAT(with_frame(0xC0, 8, 4).problem, Catch::Contains("CMYK"));
  CHECK_THAT(with_frame(0xC1, 12, 3).problem, Catch::Contains("12-bit"));
  CHECK_THAT(with_frame(0xC3, 8, 3).problem, Catch::Contains("lossless"));
}

TEST_CASE("jpeg reader: images go through the extension readers and decoder: cpu leaves them to the CPU reader",
          "[nvjpeg]") {
  struct Fake final : FrameReader {
    InputInfo i;
    ReadStatus read(const FrameTarget&, std::string&) override { return ReadStatus::end; }
    const InputInfo& info() const override { return i; }
  };
  ReaderRegistry registry;
  register_jpeg_reader(registry);
  ReaderOptions cpu;
  cpu.decoder = DecoderChoice::cpu;
  // Without a CPU image reader the reason is the error, naming the file.
  try {
    registry.open(InputKind::image, "/nowhere/a.JPG", cpu);
    FAIL("opened without a reader");
  } catch (const InputError& e) {
    CHECK_THAT(e.what(), Catch::Contains("'/nowhere/a.JPG': decoder: cpu"));
  }
  registry.add(InputKind::image, [](const std::string& uri, const ReaderOptions&) {
    auto r = std::make_unique<Fake>();
    r->i.uri = uri;
    r->i.backend = "cpu-fake";
    return r;
  });
  CHECK(registry.open(InputKind::image, test::source_dir() + "/tests/data/nvjpeg/color444.jpg", cpu)->info().backend ==
        "cpu-fake");
  // A PNG is no extension reader's: the image factory opens it whatever the decoder.
  ReaderOptions gpu;
  gpu.decoder = DecoderChoice::gpu;
  CHECK(registry.open(InputKind::image, test::source_dir() + "/tests/data/nvjpeg/image.png", gpu)->info().backend ==
        "cpu-fake");
}
