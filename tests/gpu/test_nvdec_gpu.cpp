// NVDEC: decoded pictures against ffmpeg's decode of the same Annex-B files (per-frame adler32 of the NV12/P010
// frame, made by `ffmpeg -f framehash -hash adler32`, see tests/data/nvdec/README.md), a mid-stream resolution
// change, the NV12 -> frame conversion kernel against its CPU twin, and NVDEC sources in real pipelines
// (corrupt and truncated streams next to good ones, 16 sources at once) with frame conservation.
#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <cstdio>
#include <cstring>
#include <map>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/nv12_convert.cuh"
#include "kernels/nv12_convert_cpu.hpp"
#include "media/nvdec/annexb.hpp"
#include "media/nvdec/annexb_reader.hpp"
#include "media/nvdec/nvdec_decoder.hpp"
#include "runtime/cuda_check.hpp"
#include "runtime/frame_reader.hpp"
#include "runtime/gpu.hpp"
#include "runtime/source_control.hpp"
#include "tests/gpu/device_memory.hpp"
#include "tests/pipeline_helpers.hpp"
#include "tests/video_reference.hpp"
#include "tests/temp_dir.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

struct Decoded {
  std::vector<FrameSum> frames;
  std::vector<std::vector<std::uint8_t>> native;  // the first few frames as decoded (NV12/P016)
  std::vector<std::pair<int, int>> sizes;
  NvdecSequence sequence;
  std::vector<std::string> errors;
};

Decoded decode_native(NvdecDecoder& decoder, const std::string& path, std::size_t keep = 3) {
  AnnexBFile file(path);
  Decoded out;
  std::vector<std::uint8_t> nal, frame(8 << 20);
  const auto drain = [&] {
    while (decoder.has_frame()) {
      const NvdecFrame f = decoder.pop_to_host(frame.data(), frame.size(), NvdecOutput{true});
      if (!f.error.empty()) {
        out.errors.push_back(f.error);
        continue;
      }
      out.frames.push_back({f.bytes, adler32(frame.data(), f.bytes)});
      out.sizes.emplace_back(f.width, f.height);
      if (out.native.size() < keep) out.native.emplace_back(frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(f.bytes));
    }
  };
  while (file.next(nal)) {
    decoder.feed(nal.data(), nal.size());
    drain();
  }
  decoder.finish();
  drain();
  out.sequence = decoder.sequence();
  return out;
}

Decoded decode_native(const std::string& path, std::size_t keep = 3) {
  NvdecDecoder decoder(AnnexBFile(path).codec());
  return decode_native(decoder, path, keep);
}

void require_nvdec() {
  const std::string why = nvdec_unavailable_reason();
  INFO("NVDEC unavailable: " << why);
  REQUIRE(why.empty());  // a GPU is present (main exits 77 otherwise): NVDEC must work with its driver
}

}  // namespace

TEST_CASE("NV12/P016 conversion kernel equals its CPU twin on random inputs, turned, cut and letterboxed", "[gpu][nvdec][kernel]") {
  std::mt19937 rng(1234);
  TestStream stream;
  const PixelFormat formats[] = {PixelFormat::bgr8, PixelFormat::rgb8, PixelFormat::gray8, PixelFormat::nv12,
                                 PixelFormat::i420};
  for (int round = 0; round < 40; ++round) {
    kernels::Nv12ConvertParams p;
    p.in_width = 2 + static_cast<int>(rng() % 300);
    p.in_height = 2 + static_cast<int>(rng() % 200);
    p.in_bytes_per_sample = 1 + static_cast<int>(rng() % 2);
    p.in_pitch = static_cast<std::size_t>((p.in_width + 1) / 2) * 2 * p.in_bytes_per_sample + rng() % 64;
    p.out_format = formats[round % 5];
    p.out_width = 2 * (1 + static_cast<int>(rng() % 200));
    p.out_height = 2 * (1 + static_cast<int>(rng() % 150));
    if (round % 4 == 0) {  // the native size: a plain conversion
      p.in_width = p.out_width;
      p.in_height = p.out_height;
      p.in_pitch = static_cast<std::size_t>(p.in_width) * p.in_bytes_per_sample + 32;
    }
    if (round % 4 >= 2) {  // turned, a shown part (even position) and a destination with black bars (even)
      p.quarter_turns = static_cast<int>(rng() % 4);
      const int uw = p.quarter_turns % 2 ? p.in_height : p.in_width, uh = p.quarter_turns % 2 ? p.in_width : p.in_height;
      p.src_x = 2 * static_cast<int>(rng() % static_cast<unsigned>((uw + 1) / 2));
      p.src_y = 2 * static_cast<int>(rng() % static_cast<unsigned>((uh + 1) / 2));
      p.src_w = 1 + static_cast<int>(rng() % static_cast<unsigned>(uw - p.src_x));
      p.src_h = 1 + static_cast<int>(rng() % static_cast<unsigned>(uh - p.src_y));
      p.dst_w = 2 * (1 + static_cast<int>(rng() % static_cast<unsigned>(p.out_width / 2)));
      p.dst_h = 2 * (1 + static_cast<int>(rng() % static_cast<unsigned>(p.out_height / 2)));
      p.dst_x = 2 * static_cast<int>(rng() % static_cast<unsigned>((p.out_width - p.dst_w) / 2 + 1));
      p.dst_y = 2 * static_cast<int>(rng() % static_cast<unsigned>((p.out_height - p.dst_h) / 2 + 1));
    }
    INFO("round " << round << ": " << p.in_width << "x" << p.in_height << " bps " << p.in_bytes_per_sample << " turns "
                  << p.quarter_turns << " src " << p.src_x << "," << p.src_y << " " << p.src_w << "x" << p.src_h
                  << " -> " << to_string(p.out_format) << " " << p.out_width << "x" << p.out_height << " dst " << p.dst_x
                  << "," << p.dst_y << " " << p.dst_w << "x" << p.dst_h);
    const std::size_t luma_bytes = p.in_pitch * static_cast<std::size_t>(p.in_height);
    const std::size_t chroma_bytes = p.in_pitch * static_cast<std::size_t>((p.in_height + 1) / 2);
    std::vector<std::uint8_t> src(luma_bytes + chroma_bytes);
    for (auto& b : src) b = static_cast<std::uint8_t>(rng());
    const std::size_t out_bytes = image_bytes(p.out_format, p.out_width, p.out_height);
    std::vector<std::uint8_t> cpu(out_bytes), gpu(out_bytes, 0xAB);
    kernels::nv12_convert_cpu(p, src.data(), src.data() + luma_bytes, cpu.data());
    DeviceBuffer d_src(src.size()), d_dst(out_bytes);
    copy_to_device(d_src.get(), src.data(), src.size());
    const auto* base = static_cast<const std::uint8_t*>(d_src.get());
    kernels::nv12_convert_gpu(p, base, base + luma_bytes, static_cast<std::uint8_t*>(d_dst.get()), stream.get());
    CUDA_CHECK(cudaMemcpyAsync(gpu.data(), d_dst.get(), out_bytes, cudaMemcpyDeviceToHost, stream.get()));
    CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    std::size_t differing = 0;
    for (std::size_t i = 0; i < out_bytes; ++i) differing += cpu[i] != gpu[i];
    REQUIRE(differing == 0);  // integer arithmetic on both sides: identical bytes
  }
}

TEST_CASE("NVDEC decodes H.264, HEVC and 10-bit HEVC exactly as ffmpeg does", "[gpu][nvdec]") {
  require_nvdec();
  struct Case {
    const char *file, *reference;
    int bit_depth;
    double fps;
  };
  for (const Case& c : {Case{"h264_320x240.h264", "h264_320x240.h264.nv12.framehash", 8, 25.0},
                        Case{"hevc_320x240.hevc", "hevc_320x240.hevc.nv12.framehash", 8, 30.0},
                        Case{"hevc10_320x240.hevc", "hevc10_320x240.hevc.p010.framehash", 10, 30.0}}) {
    INFO(c.file);
    const Decoded got = decode_native(clip(c.file));
    const std::vector<FrameSum> want = read_framehash(clip(c.reference));
    CHECK(got.errors.empty());
    CHECK(got.sequence.bit_depth == c.bit_depth);
    CHECK(got.sequence.width == 320);
    CHECK(got.sequence.height == 240);
    CHECK(got.sequence.fps == Approx(c.fps));  // from the SPS's VUI timing info
    CHECK(got.sequence.decode_surfaces > 4);
    REQUIRE(got.frames.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      INFO("frame " << i);
      CHECK(got.frames[i].bytes == want[i].bytes);
      CHECK(got.frames[i].hash == want[i].hash);  // H.264/HEVC decoding is bit-exact: no tolerance needed
    }
  }
}

// A directory job opens input after input: a session whose stream ended goes back to an idle list and the next
// input of its codec restarts it (no new decoder), decoding exactly as a fresh one would, other sizes included.
TEST_CASE("A restarted NVDEC session decodes the next stream as a new one does", "[gpu][nvdec]") {
  require_nvdec();
  const auto expect = [](const Decoded& got, const std::string& reference) {
    const std::vector<FrameSum> want = read_framehash(clip(reference));
    CHECK(got.errors.empty());
    REQUIRE(got.frames.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      INFO(reference << " frame " << i);
      CHECK(got.frames[i].hash == want[i].hash);
    }
  };
  std::unique_ptr<NvdecDecoder> session = NvdecDecoder::take(VideoCodec::h264);
  NvdecDecoder* const first = session.get();
  expect(decode_native(*session, clip("h264_320x240.h264")), "h264_320x240.h264.nv12.framehash");
  NvdecDecoder::give_back(std::move(session));
  session = NvdecDecoder::take(VideoCodec::h264);
  CHECK(session.get() == first);  // the idle session, not a new one
  CHECK(session->sequence().count == 0);
  const Decoded changed = decode_native(*session, clip("h264_size_change.h264"));
  expect(changed, "h264_size_change.h264.nv12.framehash");
  CHECK(changed.sequence.count == 2);
  NvdecDecoder::give_back(std::move(session));
  session = NvdecDecoder::take(VideoCodec::h264);
  expect(decode_native(*session, clip("h264_320x240.h264")), "h264_320x240.h264.nv12.framehash");
  NvdecDecoder::give_back(std::move(session));
  std::unique_ptr<NvdecDecoder> hevc = NvdecDecoder::take(VideoCodec::hevc);
  CHECK(hevc.get() != first);  // sessions are per codec
  CHECK(hevc->codec() == VideoCodec::hevc);
}

TEST_CASE("NVDEC follows a mid-stream resolution change", "[gpu][nvdec]") {
  require_nvdec();
  // Two streams concatenated: 30 frames of 320x240, then 12 of 192x144 (a new SPS).
  const Decoded got = decode_native(clip("h264_size_change.h264"));
  const std::vector<FrameSum> want = read_framehash(clip("h264_size_change.h264.nv12.framehash"));
  CHECK(got.sequence.count == 2);
  CHECK(got.sequence.width == 192);
  CHECK(got.sequence.height == 144);
  REQUIRE(got.frames.size() == want.size());
  REQUIRE(got.frames.size() == 42);
  CHECK(got.sizes.front() == std::pair{320, 240});
  CHECK(got.sizes.back() == std::pair{192, 144});
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("frame " << i);
    CHECK(got.frames[i].bytes == want[i].bytes);
    CHECK(got.frames[i].hash == want[i].hash);
  }
}

// The decoder's creation knobs and the unmap strategy change where host time goes, never the pictures: each
// combination (deferred unmap keeps up to output_surfaces - 1 surfaces mapped while later pictures decode, across a
// resolution change too) decodes exactly as ffmpeg does, at the file and the live display delay.
TEST_CASE("every NVDEC tuning decodes exactly as ffmpeg does", "[gpu][nvdec][tuning]") {
  require_nvdec();
  using Creation = NvdecTuning::Creation;
  std::vector<NvdecTuning> tunings;
  for (Creation creation : {Creation::cuvid, Creation::cuda, Creation::driver_default})
    for (bool deferred : {false, true})
      for (int outputs : {1, 2, 4}) {
        NvdecTuning t;
        t.creation = creation;
        t.deferred_unmap = deferred;
        t.output_surfaces = outputs;
        t.context_lock = outputs != 4;
        t.extra_decode_surfaces = outputs == 4 ? 8 : 0;
        tunings.push_back(t);
      }
  for (const char* name : {"h264_size_change.h264", "hevc10_320x240.hevc"}) {
    const std::string file = name;
    const std::vector<FrameSum> want =
        read_framehash(clip(file + (file.find("hevc10") != std::string::npos ? ".p010.framehash" : ".nv12.framehash")));
    for (const NvdecTuning& t : tunings)
      for (int delay : {kNvdecLiveDisplayDelay, kNvdecFileDisplayDelay}) {
        INFO(file << " creation " << static_cast<int>(t.creation) << " deferred " << t.deferred_unmap << " outputs "
                  << t.output_surfaces << " lock " << t.context_lock << " delay " << delay);
        NvdecDecoder decoder(AnnexBFile(clip(file)).codec(), delay, t);
        const Decoded got = decode_native(decoder, clip(file));
        CHECK(got.errors.empty());
        REQUIRE(got.frames.size() == want.size());
        for (std::size_t i = 0; i < want.size(); ++i) {
          INFO("frame " << i);
          CHECK(got.frames[i].hash == want[i].hash);
        }
      }
  }
  CHECK_THROWS_AS(NvdecDecoder(VideoCodec::h264, 0, NvdecTuning{.output_surfaces = 0}), NvdecError);
  CHECK_THROWS_AS(NvdecDecoder(VideoCodec::h264, 0, NvdecTuning{.output_surfaces = 9}), NvdecError);
}

// limit_concurrent_feeds: 8 sessions on 8 threads with 2 at a time in the parser all decode every picture right.
TEST_CASE("NVDEC sessions limited to two feeding threads at once decode every picture", "[gpu][nvdec][tuning]") {
  require_nvdec();
  NvdecDecoder::limit_concurrent_feeds(2);
  const std::vector<FrameSum> want = read_framehash(clip("h264_320x240.h264.nv12.framehash"));
  std::vector<Decoded> got(8);
  std::vector<std::string> errors(got.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < got.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        NvdecDecoder decoder(VideoCodec::h264, kNvdecLiveDisplayDelay, NvdecTuning{.deferred_unmap = i % 2 == 1});
        got[i] = decode_native(decoder, clip("h264_320x240.h264"));
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  NvdecDecoder::limit_concurrent_feeds(0);
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("session " << i << " " << errors[i]);
    CHECK(errors[i].empty());
    REQUIRE(got[i].frames.size() == want.size());
    for (std::size_t f = 0; f < want.size(); ++f) CHECK(got[i].frames[f].hash == want[f].hash);
  }
}

TEST_CASE("NVDEC reader converts into the pipeline's frame layout as the CPU twin does", "[gpu][nvdec][reader]") {
  require_nvdec();
  const std::string path = clip("hevc10_320x240.hevc");
  const Decoded native = decode_native(path, 3);
  REQUIRE(native.native.size() == 3);
  struct Target {
    PixelFormat pixel;
    int width, height;
  };
  for (const Target& t : {Target{PixelFormat::bgr8, 320, 240}, Target{PixelFormat::rgb8, 224, 160},
                          Target{PixelFormat::nv12, 640, 480}, Target{PixelFormat::gray8, 100, 50}}) {
    INFO(to_string(t.pixel) << " " << t.width << "x" << t.height);
    ReaderOptions options;
    options.decoder = DecoderChoice::gpu;
    auto reader = ReaderRegistry::global().open(InputKind::file, path, options);
    CHECK(reader->info().backend == "NVDEC HEVC");
    CHECK(reader->info().fps == Approx(30.0));
    CHECK(reader->info().width == 320);
    const std::size_t bytes = image_bytes(t.pixel, t.width, t.height);
    std::vector<std::byte> got(bytes);
    std::vector<std::uint8_t> want(bytes);
    for (int i = 0; i < 3; ++i) {
      std::string why;
      REQUIRE(reader->read(FrameTarget{got.data(), t.width, t.height, t.pixel}, why) == ReadStatus::frame);
      kernels::Nv12ConvertParams p;
      p.in_width = 320;
      p.in_height = 240;
      p.in_bytes_per_sample = 2;
      p.in_pitch = 320 * 2;
      p.out_format = t.pixel;
      p.out_width = t.width;
      p.out_height = t.height;
      const auto& src = native.native[static_cast<std::size_t>(i)];
      kernels::nv12_convert_cpu(p, src.data(), src.data() + p.in_pitch * 240, want.data());
      REQUIRE(std::memcmp(got.data(), want.data(), bytes) == 0);
    }
    std::string why;
    int rest = 0;
    ReadStatus st;
    while ((st = reader->read(FrameTarget{got.data(), t.width, t.height, t.pixel}, why)) == ReadStatus::frame) ++rest;
    CHECK(st == ReadStatus::end);
    CHECK(rest + 3 == 20);
  }
}

TEST_CASE("NVDEC sources: corrupt and truncated streams next to good ones, frames conserved", "[gpu][nvdec][pipeline]") {
  require_nvdec();
  TempDir dir("sluice-nvdec");
  const auto read_bytes = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(in), {});
  };
  const auto write_bytes = [](const std::filesystem::path& p, const std::vector<char>& b) {
    std::ofstream(p, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
  };
  std::vector<char> h264 = read_bytes(clip("h264_320x240.h264")), hevc = read_bytes(clip("hevc_320x240.hevc"));
  REQUIRE(h264.size() > 20000);
  std::vector<char> corrupt = h264;  // slice data overwritten in three places past the first picture
  std::mt19937 rng(7);
  for (std::size_t at : {corrupt.size() / 3, corrupt.size() / 2, corrupt.size() * 3 / 4})
    for (std::size_t i = 0; i < 400; ++i) corrupt[at + i] = static_cast<char>(rng());
  std::vector<char> truncated(hevc.begin(), hevc.begin() + static_cast<std::ptrdiff_t>(hevc.size() * 6 / 10));
  std::vector<char> garbage(50000);
  for (auto& c : garbage) c = static_cast<char>(rng());
  write_bytes(dir.path / "good.h264", h264);
  write_bytes(dir.path / "good.hevc", hevc);
  write_bytes(dir.path / "corrupt.h264", corrupt);
  write_bytes(dir.path / "truncated.hevc", truncated);
  write_bytes(dir.path / "garbage.h264", garbage);
  const std::string d = dir.path.string();
  const std::string yaml = "name: nvdec-faults\ndevice: cuda\nbatch_size: 8\nstages:\n"
                           "  - kind: decode\n    decoder: gpu\n    width: 320\n    height: 240\n    format: bgr8\n"
                           "    uri: [" + d + "/good.h264, " + d + "/corrupt.h264, " + d + "/truncated.hevc, " + d +
                           "/garbage.h264, " + d + "/good.hevc]\n"
                           "  - kind: upload\n  - kind: preprocess\n    width: 96\n    height: 64\n"
                           "  - kind: download\n  - kind: sink\n    type: null\n";
  Pipeline p(plan_from(yaml));
  p.start();
  p.wait();
  const auto t = p.ledger().totals();
  CHECK(t.in_flight() == 0);
  CHECK(t.produced == t.delivered + t.failed);
  std::map<std::string, SourceReport> by_name;
  for (const auto& s : p.source_control()->sources()) by_name[s.name] = s;
  REQUIRE(by_name.size() == 5);
  CHECK(by_name.at("good").frames == 30);   // the good ones decode every frame, untouched by the others
  CHECK(by_name.at("good-5").frames == 30);
  const SourceReport& bad = by_name.at("corrupt");
  const SourceReport& cut = by_name.at("truncated");
  std::fprintf(stderr, "corrupt: %llu frames, %llu failed, %s (%s); truncated: %llu frames, %s (%s)\n",
               static_cast<unsigned long long>(bad.frames), static_cast<unsigned long long>(t.failed),
               std::string(to_string(bad.state)).c_str(), bad.reason.c_str(),
               static_cast<unsigned long long>(cut.frames), std::string(to_string(cut.state)).c_str(),
               cut.reason.c_str());
  CHECK(cut.frames >= 10);  // what is there decodes; the cut picture fails or is lost
  CHECK(cut.frames <= 18);
  CHECK(by_name.at("garbage").frames == 0);
  CHECK(by_name.at("garbage").state == SourceState::failed);
  CHECK_FALSE(by_name.at("garbage").reason.empty());
  // The corrupt stream ends (no hang, no crash); pictures NVDEC reports broken are failed with its reason (a
  // corrupt slice header can also make the parser see more pictures than were encoded).
  CHECK((bad.state == SourceState::eos || bad.state == SourceState::failed));
  CHECK(bad.frames >= 3);  // the pictures before the first damage
  CHECK(t.failed >= 1);
  CHECK(bad.errors + cut.errors == t.failed);  // only the damaged sources fail frames (the cut picture may)
  CHECK(t.delivered == 60 + bad.frames + cut.frames);
  for (const auto& e : t.errors) {
    INFO(e);
    CHECK((e.find("source 'corrupt': frame ") != std::string::npos ||
           e.find("source 'truncated': frame ") != std::string::npos));
    CHECK(e.find("NVDEC") != std::string::npos);
  }
}
TEST_CASE("16 NVDEC sources at once through a pipeline: every frame delivered", "[gpu][nvdec][pipeline]") {
  require_nvdec();
  TempDir dir("sluice-nvdec16");
  std::string uris;
  for (int i = 0; i < 16; ++i) {
    const bool hevc = i % 2;
    const auto name = dir.path / ("s" + std::to_string(i) + (hevc ? ".hevc" : ".h264"));
    std::filesystem::copy_file(clip(hevc ? "hevc_320x240.hevc" : "h264_320x240.h264"), name);
    uris += (i ? ", " : "") + name.string();
  }
  const std::string yaml = "name: nvdec16\ndevice: cuda\nbatch_size: 32\nstages:\n"
                           "  - kind: decode\n    decoder: gpu\n    width: 320\n    height: 240\n    format: nv12\n"
                           "    uri: [" + uris + "]\n"
                           "  - kind: upload\n  - kind: preprocess\n    width: 96\n    height: 64\n"
                           "  - kind: download\n  - kind: sink\n    type: null\n";
  Pipeline p(plan_from(yaml));
  p.start();
  p.wait();
  const auto t = p.ledger().totals();
  CHECK(t.produced == 16 * 30);
  CHECK(t.delivered == 16 * 30);
  CHECK(t.failed == 0);
  CHECK(t.in_flight() == 0);
  for (const auto& s : p.source_control()->sources()) {
    INFO(s.name << ": " << s.reason);
    CHECK(s.frames == 30);
    CHECK(s.state == SourceState::eos);
  }
}

// Decoded frames handed over in device memory (frame_memory: device, the default with sources on the GPU):
// the same results, exactly, as through pinned host memory and `upload`, since both run the same conversion.
TEST_CASE("NVDEC frames stay on the GPU and give the results of the host path", "[gpu][nvdec][pipeline][device_frames]") {
  require_nvdec();
  TempDir dir("sluice-nvdec-device");
  const auto yaml = [&](const char* memory, const std::string& path) {
    return "name: nvdec-device\ndevice: cuda\nbatch_size: 8\nstages:\n"
           "  - kind: decode\n    decoder: gpu\n    frame_memory: " + std::string(memory) +
           "\n    width: 320\n    height: 240\n    format: bgr8\n"
           "    uri: [" + clip("h264_320x240.h264") + ", " + clip("hevc10_320x240.hevc") + ", " +
           clip("h264_size_change.h264") + "]\n"
           "  - kind: upload\n  - kind: preprocess\n    width: 96\n    height: 64\n"
           "  - kind: download\n  - kind: sink\n    type: jsonl\n    path: " + path + "\n";
  };
  const std::string on_device = (dir.path / "device.jsonl").string(), via_host = (dir.path / "host.jsonl").string();
  std::map<std::string, std::string> decoders;
  const auto run = [&](const char* memory, const std::string& path) {
    Pipeline p(plan_from(yaml(memory, path)));
    REQUIRE(p.plan().stages.front().output.memory ==
            (std::string(memory) == "device" ? MemoryKind::device : MemoryKind::pinned));
    p.start();
    p.wait();
    for (const auto& s : p.source_control()->sources()) decoders[std::string(memory) + " " + s.name] = s.decoder;
    return p.ledger().totals();
  };
  const auto td = run("device", on_device), th = run("pinned", via_host);
  CHECK(td.failed == 0);
  CHECK(td.in_flight() == 0);
  CHECK(td.delivered == th.delivered);
  CHECK(td.delivered >= 60);
  for (const auto& [key, decoder] : decoders) {
    INFO(key << ": " << decoder);
    CHECK(decoder.find("NVDEC") == 0);
    CHECK((decoder.find("frames stay on the GPU") != std::string::npos) == (key.rfind("device", 0) == 0));
  }
  std::map<std::string, nlohmann::json> device_records, host_records;
  for (const auto& r : read_jsonl(on_device))
    device_records[r["source_name"].get<std::string>() + ":" + std::to_string(r["input_frame"].get<int>())] = r;
  for (const auto& r : read_jsonl(via_host))
    host_records[r["source_name"].get<std::string>() + ":" + std::to_string(r["input_frame"].get<int>())] = r;
  REQUIRE(device_records.size() == td.delivered);
  REQUIRE(host_records.size() == device_records.size());
  for (const auto& [key, r] : host_records) {
    INFO(key);
    REQUIRE(device_records.count(key));
    for (const char* field : {"mean", "min", "max"})
      CHECK(device_records.at(key)["payload"][field].get<double>() == r["payload"][field].get<double>());
  }
}

// The zero-sync proof extended to decode: with NVDEC sources handing frames over in device memory, the pipeline
// allocates nothing and makes the host wait on nothing while frames flow (snapshots between two counts of
// delivered frames; inputs loop, so decoders are opened again meanwhile).
TEST_CASE("NVDEC device frames: no allocation and no host sync in steady state", "[gpu][nvdec][pipeline][device_frames]") {
  require_nvdec();
  const std::string yaml = "name: nvdec-steady\ndevice: cuda\nbatch_size: 16\nstages:\n"
                           "  - kind: decode\n    decoder: gpu\n    loop: true\n    width: 320\n    height: 240\n"
                           "    format: nv12\n    uri: [" + clip("h264_320x240.h264") + ", " + clip("hevc_320x240.hevc") +
                           ", " + clip("h264_320x240.h264") + ", " + clip("hevc_320x240.hevc") + "]\n"
                           "  - kind: upload\n  - kind: preprocess\n    width: 96\n    height: 64\n    dtype: f16\n"
                           "  - kind: download\n  - kind: sink\n    type: \"null\"\n";
  Pipeline p(plan_from(yaml));
  p.start();
  const auto wait_for = [&](std::uint64_t delivered) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (p.ledger().totals().delivered < delivered && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    REQUIRE(p.ledger().totals().delivered >= delivered);
  };
  wait_for(400);
  const auto before = gpu::call_counts();
  const auto delivered_before = p.ledger().totals().delivered;
  wait_for(delivered_before + 1200);
  const auto after = gpu::call_counts();
  const auto delivered_after = p.ledger().totals().delivered;
  p.request_stop();
  p.wait();
  const auto t = p.ledger().totals();
  CHECK(t.failed == 0);
  CHECK(t.in_flight() == 0);
  CHECK(after.device_allocs == before.device_allocs);
  CHECK(after.pinned_allocs == before.pinned_allocs);
  CHECK(after.device_frees == before.device_frees);
  CHECK(after.stream_syncs == before.stream_syncs);
  // Each frame went into its batch by one copy on the GPU (the host path copies none per frame: it memcpys
  // into pinned batches); besides those, one copy of results per batch, which the sink (a host stage) waits
  // for: the host waits once per batch, never per frame (no source thread waits on a slot's copy).
  const auto frames = delivered_after - delivered_before;
  const auto copies = after.async_copies - before.async_copies;
  CHECK(copies >= frames);
  CHECK(copies <= 2 * frames + 16);
  CHECK(after.event_syncs - before.event_syncs <= copies - frames + 16);
}
