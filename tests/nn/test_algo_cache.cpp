// The convolution algorithm cache file (no GPU needed): round trip, and damaged or unwritable files never stop
// an engine from starting.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "nn/cuda/algo_cache.hpp"

using namespace sluice::nn::cuda;
namespace fs = std::filesystem;

namespace {
fs::path scratch(const std::string& name) {
  return fs::temp_directory_path() / ("sluice_algo_cache_" + std::to_string(::getpid()) + "_" + name);
}
}  // namespace

TEST_CASE("algorithm cache round-trips through its file", "[nn][algo_cache]") {
  const fs::path path = scratch("roundtrip");
  {
    AlgoCache cache(path.string());
    CHECK(cache.size() == 0);
    cache.put("H200|cudnn 91900|f16|x 1,3,224,224", {ConvMode::fused, 1});
    cache.put("H200|cudnn 91900|f16|x 1,64,56,56", {ConvMode::gemm, 0});
    cache.put("H200|cudnn 91900|f16|x 64,96,56,56|w 96,7,7|g 96", {ConvMode::depthwise, 0});
    REQUIRE(cache.save());
  }
  AlgoCache again(path.string());
  REQUIRE(again.size() == 3);
  CHECK(again.find("H200|cudnn 91900|f16|x 1,3,224,224")->mode == ConvMode::fused);
  CHECK(again.find("H200|cudnn 91900|f16|x 1,3,224,224")->algo == 1);
  CHECK(again.find("H200|cudnn 91900|f16|x 1,64,56,56")->mode == ConvMode::gemm);
  CHECK(again.find("H200|cudnn 91900|f16|x 64,96,56,56|w 96,7,7|g 96")->mode == ConvMode::depthwise);
  CHECK_FALSE(again.find("other"));
  for (const auto& entry : fs::directory_iterator(path.parent_path()))
    CHECK(entry.path().filename().string().rfind(path.filename().string() + ".tmp", 0) != 0);  // no leftovers
  fs::remove(path);
}

TEST_CASE("a damaged algorithm cache is ignored and rewritten", "[nn][algo_cache]") {
  const fs::path path = scratch("damaged");
  std::ofstream(path) << "key\tfused\t1\nhalf a line without tabs\n";
  AlgoCache cache(path.string());
  CHECK(cache.size() == 0);  // nothing of a damaged file is trusted
  cache.put("k", {ConvMode::separate, 6});
  REQUIRE(cache.save());
  AlgoCache again(path.string());
  CHECK(again.size() == 1);
  CHECK(again.find("k")->algo == 6);
  fs::remove(path);
}

TEST_CASE("an unwritable algorithm cache is a warning not an error", "[nn][algo_cache]") {
  AlgoCache cache("/proc/sluice-no-such-dir/algorithms");
  cache.put("k", {ConvMode::fused, 1});
  CHECK_FALSE(cache.save());
  CHECK(cache.find("k"));  // still serves what it measured
}
