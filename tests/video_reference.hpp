#pragma once
// Reference data of the video tests (tests/data/nvdec/, made by ffmpeg and ffprobe; see its README): the clips,
// per-frame adler32 hashes as `ffmpeg -f framehash -hash adler32` writes them, and ffprobe's presentation times.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/pipeline_helpers.hpp"

namespace sluice::test {

inline std::string clip(const std::string& name) { return source_dir() + "/tests/data/nvdec/" + name; }

inline std::uint32_t adler32(const std::uint8_t* d, std::size_t n) {
  std::uint32_t a = 1, b = 0;
  for (std::size_t i = 0; i < n; ++i) {
    a = (a + d[i]) % 65521;
    b = (b + a) % 65521;
  }
  return (b << 16) | a;
}

struct FrameSum {
  std::size_t bytes;
  std::uint32_t hash;
};

// The frames of an ffmpeg framehash file: "stream, dts, pts, duration, size, hash" per frame.
inline std::vector<FrameSum> read_framehash(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::vector<FrameSum> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> fields;
    std::stringstream ss(line);
    for (std::string f; std::getline(ss, f, ',');) fields.push_back(f);
    REQUIRE(fields.size() == 6);
    out.push_back({std::stoul(fields[4]), static_cast<std::uint32_t>(std::stoul(fields[5], nullptr, 16))});
  }
  return out;
}

// ffprobe's presentation times (X.pts: "num/den", then one pts per frame in display order) in ns, rounded to
// the nearest as libavformat's av_rescale_q does.
inline std::vector<std::int64_t> read_pts_ns(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::string tb;
  REQUIRE(std::getline(in, tb));
  const auto slash = tb.find('/');
  REQUIRE(slash != std::string::npos);
  const __int128 num = std::stoll(tb.substr(0, slash)), den = std::stoll(tb.substr(slash + 1));
  REQUIRE(den > 0);
  std::vector<std::int64_t> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const __int128 scaled = static_cast<__int128>(std::stoll(line)) * num * 1'000'000'000;
    const __int128 half = den / 2;
    out.push_back(static_cast<std::int64_t>(scaled >= 0 ? (scaled + half) / den : -((-scaled + half) / den)));
  }
  return out;
}

}  // namespace sluice::test
