// Annex-B elementary streams without a GPU: codec from extension and content, NAL units read in bounded
// chunks (start codes across chunk boundaries, 3- and 4-byte start codes, the length limit), and what the
// registry does with .h264/.hevc files when NVDEC cannot serve them.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "media/nvdec/annexb.hpp"
#include "media/nvdec/annexb_reader.hpp"
#if SLUICE_WITH_CUDA
#include "media/nvdec/nvdec_decoder.hpp"
#endif
#include "runtime/frame_reader.hpp"
#include "tests/pipeline_helpers.hpp"
#include "tests/temp_dir.hpp"

using namespace sluice;

namespace {
std::vector<std::uint8_t> bytes(std::initializer_list<int> v) {
  std::vector<std::uint8_t> out;
  for (int b : v) out.push_back(static_cast<std::uint8_t>(b));
  return out;
}

std::vector<std::vector<std::uint8_t>> split(const std::vector<std::uint8_t>& data, std::size_t chunk,
                                             std::size_t max_nal = 1 << 20) {
  std::size_t offset = 0;
  AnnexBSplitter s(
      [&](std::uint8_t* buf, std::size_t cap) {
        const std::size_t n = std::min(cap, data.size() - offset);
        std::memcpy(buf, data.data() + offset, n);
        offset += n;
        return n;
      },
      chunk, max_nal);
  std::vector<std::vector<std::uint8_t>> out;
  std::vector<std::uint8_t> nal;
  while (s.next(nal)) out.push_back(nal);
  return out;
}

std::vector<std::uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), {});
}
}  // namespace

TEST_CASE("Annex-B codec from the file extension", "[annexb]") {
  CHECK(codec_from_extension("a/b.h264") == VideoCodec::h264);
  CHECK(codec_from_extension("clip.264") == VideoCodec::h264);
  CHECK(codec_from_extension("CLIP.H265") == VideoCodec::hevc);
  CHECK(codec_from_extension("x.hevc") == VideoCodec::hevc);
  CHECK(codec_from_extension("x.265") == VideoCodec::hevc);
  CHECK(codec_from_extension("x.mp4") == VideoCodec::unknown);
  CHECK(codec_from_extension("dir.h264/file") == VideoCodec::unknown);
  CHECK(codec_from_extension("noext") == VideoCodec::unknown);
}

TEST_CASE("Annex-B codec sniffed from the first NAL units", "[annexb]") {
  const std::string dir = test::source_dir() + "/tests/data/nvdec/";
  for (const char* f : {"h264_320x240.h264", "h264_size_change.h264"}) {
    const auto d = file_bytes(dir + f);
    REQUIRE(d.size() > 1000);
    CHECK(sniff_codec(d.data(), d.size()) == VideoCodec::h264);
  }
  for (const char* f : {"hevc_320x240.hevc", "hevc10_320x240.hevc"}) {
    const auto d = file_bytes(dir + f);
    CHECK(sniff_codec(d.data(), d.size()) == VideoCodec::hevc);
  }
  // Hand-made headers: H.264 SPS (nal_ref_idc 3, type 7), HEVC VPS (type 32, layer 0, tid 1).
  const auto sps = bytes({0, 0, 0, 1, 0x67, 0x42, 0xc0, 0x1e});
  CHECK(sniff_codec(sps.data(), sps.size()) == VideoCodec::h264);
  const auto vps = bytes({0, 0, 1, 0x40, 0x01, 0x0c});
  CHECK(sniff_codec(vps.data(), vps.size()) == VideoCodec::hevc);
  // An H.264 SEI must have nal_ref_idc 0; an SPS must not: neither counts otherwise.
  const auto bad = bytes({0, 0, 1, 0x46, 0x00, 0, 0, 1, 0x07, 0x00, 0, 0, 1});
  CHECK(sniff_codec(bad.data(), bad.size()) == VideoCodec::unknown);
  CHECK(sniff_codec(nullptr, 0) == VideoCodec::unknown);
}

TEST_CASE("Annex-B splitter: NAL units with their start codes, whatever the chunk size", "[annexb]") {
  // garbage, a 4-byte start code unit, a 3-byte one, an empty unit, a unit at the very end
  const auto data = bytes({9, 9, 0, 0, 0, 1, 0x67, 1, 2, 0, 0, 1, 0x68, 3, 0, 0, 0, 1, 0, 0, 1, 0x65, 0, 7});
  const std::vector<std::vector<std::uint8_t>> want = {
      bytes({0, 0, 1, 0x67, 1, 2}), bytes({0, 0, 1, 0x68, 3}), bytes({0, 0, 0, 1}), bytes({0, 0, 1, 0x65, 0, 7})};
  for (std::size_t chunk : {16, 17, 1000}) {
    INFO("chunk " << chunk);
    CHECK(split(data, chunk) == want);
  }
  // A real stream read in chunks of prime sizes gives the same units as read whole, and loses no byte.
  const auto clip = file_bytes(test::source_dir() + "/tests/data/nvdec/hevc_320x240.hevc");
  const auto whole = split(clip, 1 << 20);
  REQUIRE(whole.size() > 30);
  std::size_t total = 0;
  for (const auto& n : whole) total += n.size();
  CHECK(total == clip.size() - 1);  // all but the leading zero of the first (four-byte) start code
  for (std::size_t chunk : {17, 509, 4099}) CHECK(split(clip, chunk) == whole);
}

TEST_CASE("Annex-B splitter refuses a NAL unit over its limit instead of growing", "[annexb]") {
  std::vector<std::uint8_t> data = bytes({0, 0, 1, 0x65});
  data.resize(100000, 0x55);
  CHECK_THROWS_WITH(split(data, 4096, 8192), Catch::Contains("longer than"));
  CHECK(split(data, 4096, 200000).size() == 1);
  std::vector<std::uint8_t> none(50000, 0x42);  // no start code at all: no unit, bounded buffer
  CHECK(split(none, 4096, 8192).empty());
}

TEST_CASE("Annex-B file: codec from content, then extension, errors name the file", "[annexb]") {
  test::TempDir dir("sluice-annexb");
  const auto hevc = file_bytes(test::source_dir() + "/tests/data/nvdec/hevc_320x240.hevc");
  const std::string misnamed = (dir.path / "really_hevc.h264").string();
  std::ofstream(misnamed, std::ios::binary).write(reinterpret_cast<const char*>(hevc.data()), static_cast<std::streamsize>(hevc.size()));
  AnnexBFile f(misnamed, 4096);
  CHECK(f.codec() == VideoCodec::hevc);  // the content wins over the name
  std::vector<std::uint8_t> nal;
  std::size_t units = 0, total = 0;
  while (f.next(nal)) {
    ++units;
    total += nal.size();
  }
  CHECK(units > 30);
  CHECK(total == hevc.size() - 1);  // all but the leading zero of the first (four-byte) start code
  CHECK(f.bytes_read() == hevc.size());

  const std::string noise = (dir.path / "noise.bin").string();
  std::ofstream(noise) << "no start codes here";
  CHECK_THROWS_AS(AnnexBFile(noise), InputError);
  const std::string named = (dir.path / "noise.265").string();
  std::ofstream(named) << "no start codes here";
  CHECK(AnnexBFile(named).codec() == VideoCodec::hevc);  // the extension decides when the content cannot
  CHECK_THROWS_WITH(AnnexBFile((dir.path / "missing.h264").string()), Catch::Contains("missing.h264"));
  CHECK_THROWS_WITH(AnnexBFile(dir.path.string() + "/"), Catch::Contains("not a regular file"));
}

namespace {
// A CPU file reader that only says who it is (its own registry: the global one belongs to other tests).
class NamedReader final : public FrameReader {
 public:
  explicit NamedReader(const std::string& uri) {
    info_.uri = uri;
    info_.backend = "cpu-fake";
  }
  ReadStatus read(const FrameTarget&, std::string&) override { return ReadStatus::end; }
  const InputInfo& info() const override { return info_; }

 private:
  InputInfo info_;
};
}  // namespace

TEST_CASE("Annex-B files fall back to the CPU file reader when NVDEC cannot serve them", "[annexb]") {
#if SLUICE_WITH_CUDA
  if (nvdec_unavailable_reason().empty()) return;  // a GPU machine: decoder auto takes NVDEC (GPU tests)
#endif
  ReaderRegistry registry;
  register_annexb_reader(registry);
  const std::string path = test::source_dir() + "/tests/data/nvdec/hevc_320x240.hevc";
  ReaderOptions options;
  // Without a CPU file reader (a GPU-host build): the input fails and says why.
#if SLUICE_WITH_CUDA
  // A CUDA build on a machine without a driver or GPU: it runs, and names what is missing.
  const std::string why = "NVDEC unavailable: " + nvdec_unavailable_reason();
#else
  const std::string why = "NVDEC unavailable: this sluiced was built without CUDA";
#endif
  CHECK_THROWS_WITH(registry.open(InputKind::file, path, options), Catch::Contains(why));
  options.decoder = DecoderChoice::cpu;
  CHECK_THROWS_WITH(registry.open(InputKind::file, path, options), Catch::Contains("decoder: cpu"));
  // With one (the media library): auto and cpu go to it; gpu still fails.
  registry.add(InputKind::file, [](const std::string& uri, const ReaderOptions&) {
    return std::unique_ptr<FrameReader>(std::make_unique<NamedReader>(uri));
  });
  for (const DecoderChoice choice : {DecoderChoice::automatic, DecoderChoice::cpu}) {
    options.decoder = choice;
    CHECK(registry.open(InputKind::file, path, options)->info().backend == "cpu-fake");
  }
  options.decoder = DecoderChoice::gpu;
  CHECK_THROWS_WITH(registry.open(InputKind::file, path, options), Catch::Contains("decoder: gpu, but " + why));
  // Other extensions never reach the NVDEC reader.
  options.decoder = DecoderChoice::gpu;
  CHECK(registry.open(InputKind::file, "clip.mp4", options)->info().backend == "cpu-fake");
}
