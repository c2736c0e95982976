// The size an image declares, read before decoding (media/image_header.hpp), and the reader that refuses an
// image declaring more pixels than sluice allows before imgcodecs allocates them (a file must not take the
// daemon's memory: 2.6 MB of PNG declaring 30000x30000 cost `sluiced run` 2.7 GB of resident memory).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <opencv2/imgcodecs.hpp>
#include <zlib.h>

#include "media/image_header.hpp"
#include "media/media.hpp"
#include "runtime/frame_reader.hpp"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

std::string encoded(const std::string& ext, int width, int height, int type = CV_8UC3) {
  std::vector<std::uint8_t> out;
  REQUIRE(cv::imencode(ext, cv::Mat(height, width, type, cv::Scalar::all(77)), out));
  return std::string(out.begin(), out.end());
}

std::string be32(std::uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

std::string png_chunk(const std::string& type, const std::string& data) {
  const std::string body = type + data;
  const auto crc = static_cast<std::uint32_t>(::crc32(0, reinterpret_cast<const Bytef*>(body.data()), body.size()));
  return be32(static_cast<std::uint32_t>(data.size())) + body + be32(crc);
}

// A PNG that declares width x height RGB pixels with the first few rows' data (all zero; the whole image would
// take about a thousandth of its pixels' bytes once compressed: 2.6 MB for 30000x30000).
std::string png_bomb(std::uint32_t width, std::uint32_t height) {
  const std::string ihdr = be32(width) + be32(height) + std::string("\x08\x02\x00\x00\x00", 5);
  std::string raw(static_cast<std::size_t>(width) * 3 + 1, '\0');
  z_stream z{};
  REQUIRE(deflateInit(&z, 9) == Z_OK);
  std::string out(1 << 20, '\0'), idat;
  for (std::uint32_t row = 0; row < std::min<std::uint32_t>(height, 4); ++row) {
    z.next_in = reinterpret_cast<Bytef*>(raw.data());
    z.avail_in = static_cast<uInt>(raw.size());
    while (z.avail_in > 0) {
      z.next_out = reinterpret_cast<Bytef*>(out.data());
      z.avail_out = static_cast<uInt>(out.size());
      deflate(&z, Z_NO_FLUSH);
      idat.append(out.data(), out.size() - z.avail_out);
    }
  }
  int rc;
  do {
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    rc = deflate(&z, Z_FINISH);
    idat.append(out.data(), out.size() - z.avail_out);
  } while (rc == Z_OK);
  deflateEnd(&z);
  return std::string("\x89PNG\r\n\x1a\n", 8) + png_chunk("IHDR", ihdr) + png_chunk("IDAT", idat) + png_chunk("IEND", "");
}

}  // namespace

TEST_CASE("image header: the size of every image format sluice reads, as imgcodecs writes it", "[media][image]") {
  const std::vector<std::pair<std::string, const char*>> formats = {
      {".png", "PNG"}, {".jpg", "JPEG"}, {".bmp", "BMP"}, {".tif", "TIFF"}, {".webp", "WebP"}, {".ppm", "PNM"},
      {".pgm", "PNM"}, {".pbm", "PNM"}, {".pam", "PNM"}};
  for (const auto& [ext, format] : formats) {
    for (const auto& [w, h] : {std::pair{1, 1}, std::pair{37, 5}, std::pair{300, 1001}}) {
      INFO(ext << " " << w << "x" << h);
      const int type = ext == ".pgm" || ext == ".pbm" ? CV_8UC1 : CV_8UC3;
      const auto header = read_image_header(encoded(ext, w, h, type));
      REQUIRE(header);
      CHECK(std::string(header->format) == format);
      CHECK(header->width == w);
      CHECK(header->height == h);
    }
  }
  // A lossless WebP and a big-endian TIFF, and a PNM header with comments.
  std::vector<std::uint8_t> lossless;
  REQUIRE(cv::imencode(".webp", cv::Mat(9, 17, CV_8UC3, cv::Scalar::all(3)), lossless, {cv::IMWRITE_WEBP_QUALITY, 101}));
  const auto webp = read_image_header(std::string(lossless.begin(), lossless.end()));
  REQUIRE(webp);
  CHECK((webp->width == 17 && webp->height == 9));
  std::string tiff_be = std::string("MM\0*\0\0\0\x08", 8) + std::string("\0\x02", 2) +
                        std::string("\x01\x00\0\x03\0\0\0\x01\x01\x2c\0\0", 12) +  // ImageWidth, SHORT 300
                        std::string("\x01\x01\0\x04\0\0\0\x01\0\0\x03\xe9", 12);   // ImageLength, LONG 1001
  const auto tiff = read_image_header(tiff_be);
  REQUIRE(tiff);
  CHECK((tiff->width == 300 && tiff->height == 1001));
  const auto pnm = read_image_header("P6\n# made by hand\n 640 # width\n480\n255\n");
  REQUIRE(pnm);
  CHECK((pnm->width == 640 && pnm->height == 480));
}

TEST_CASE("image header: other bytes, and headers cut short, give no size", "[media][image]") {
  for (const std::string& bytes : {std::string(), std::string("GIF89a\x10\0\x10\0", 10), std::string("\x89PNG\r\n\x1a\n", 8),
                                   std::string("\xFF\xD8\xFF\xE0\0\x10JFIF", 10), std::string("BM\0\0", 4),
                                   std::string("II*\0\xff\xff\xff\xff", 8), std::string("RIFF\0\0\0\0WEBPVP8 ", 16),
                                   std::string("P6\n"), std::string("#?RADIANCE\n"), std::string("\x76\x2f\x31\x01", 4)})
    CHECK_FALSE(read_image_header(bytes));
  // Every prefix of a real file, and random bytes behind each format's first bytes: never outside the data
  // (the ASan build checks), never a throw.
  const std::string png = encoded(".png", 20, 10), jpg = encoded(".jpg", 20, 10), tif = encoded(".tif", 20, 10);
  for (const std::string* file : {&png, &jpg, &tif})
    for (std::size_t n = 0; n < file->size(); ++n) (void)read_image_header(std::string_view(*file).substr(0, n));
  std::mt19937 rng(33);
  for (const std::string& start : {std::string("\x89PNG\r\n\x1a\n", 8), std::string("\xFF\xD8\xFF", 3), std::string("BM"),
                                   std::string("II*\0", 4), std::string("MM\0+", 4), std::string("RIFF\0\0\0\0WEBPVP8L", 16),
                                   std::string("P7\n"), std::string("P2 ")}) {
    for (int i = 0; i < 2000; ++i) {
      std::string bytes = start;
      const int n = static_cast<int>(rng() % 64);
      for (int k = 0; k < n; ++k) bytes += static_cast<char>(rng() % 4 == 0 ? 0 : rng());
      const auto header = read_image_header(bytes);
      if (header) CHECK((header->width >= 0 && header->height >= 0));
    }
  }
}

TEST_CASE("an image declaring more pixels than allowed is refused before decoding", "[media][image][reader]") {
  const fs::path dir = fs::temp_directory_path() / ("sluice-image-bomb-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "bomb.png", std::ios::binary) << png_bomb(30000, 30000);  // 2.7 GB as BGR
  std::ofstream(dir / "wide.png", std::ios::binary) << png_bomb(1u << 20, 300);   // 315 MP in a strip
  std::ofstream(dir / "ok.png", std::ios::binary) << encoded(".png", 640, 480);
  std::ofstream(dir / "gif.png", std::ios::binary) << std::string("GIF89a\x10\0\x10\0\0\0\0", 13);
  ReaderOptions options;
  options.width = 64;
  options.height = 48;
  CHECK_THROWS_WITH(ReaderRegistry::global().open(InputKind::image, (dir / "bomb.png").string(), options),
                    Catch::Contains("bomb.png") && Catch::Contains("PNG image of 30000x30000 pixels") &&
                        Catch::Contains("refused before decoding"));
  CHECK_THROWS_WITH(ReaderRegistry::global().open(InputKind::image, (dir / "wide.png").string(), options),
                    Catch::Contains("1048576x300"));
  CHECK_THROWS_WITH(ReaderRegistry::global().open(InputKind::image, (dir / "gif.png").string(), options),
                    Catch::Contains("not an image sluice reads"));
  CHECK_NOTHROW(ReaderRegistry::global().open(InputKind::image, (dir / "ok.png").string(), options));
  // In a sequence too (its images are read with the same function).
  fs::copy_file(dir / "ok.png", dir / "s_1.png");
  fs::copy_file(dir / "bomb.png", dir / "s_2.png");
  auto seq = ReaderRegistry::global().open(InputKind::image_sequence, (dir / "s_%d.png").string(), options);
  std::vector<std::byte> pixels(64 * 48 * 3);
  FrameTarget target;
  target.data = pixels.data();
  target.width = 64;
  target.height = 48;
  std::string why;
  CHECK(seq->read(target, why) == ReadStatus::frame);
  CHECK(seq->read(target, why) == ReadStatus::error);
  CHECK_THAT(why, Catch::Contains("image 2 of 2") && Catch::Contains("30000x30000") &&
                      Catch::Contains("refused before decoding"));
  fs::remove_all(dir);
}
