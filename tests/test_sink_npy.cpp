// The npy sink: one .npy per batch in the payload's layout and dtype, and an index line per frame. Its data is
// checked against the jsonl sink's summary of the same frames (the source is deterministic).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>

#include "nn/npy.hpp"
#include "pipeline_helpers.hpp"

using namespace sluice;
using namespace sluice::test;

TEST_CASE("npy sink writes every frame's tensor and an index", "[sink][npy]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("sluice_npy_sink_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string jsonl = (dir.string() + ".jsonl");
  std::string yaml = chain_yaml("cpu", "bgr8", 21, jsonl);  // 21 frames, batch 8: batches of 8, 8, 5
  REQUIRE(run_to_end(plan_from(yaml)).delivered == 21);
  yaml.replace(yaml.find("type: jsonl"), 11, "type: npy");
  yaml.replace(yaml.find(jsonl), jsonl.size(), dir.string());
  REQUIRE(run_to_end(plan_from(yaml)).delivered == 21);

  const auto summaries = read_jsonl(jsonl);
  const auto index = read_jsonl((dir / "index.jsonl").string());
  REQUIRE(index.size() == 21);
  REQUIRE(summaries.size() == 21);
  for (std::size_t i = 0; i < index.size(); ++i) {
    INFO("frame " << i);
    CHECK(index[i]["sequence"] == i);
    CHECK(index[i]["row"] == i % 8);
    const nn::NpyArray a = nn::read_npy((dir / index[i]["file"].get<std::string>()).string());
    const std::int64_t rows = i < 16 ? 8 : 5;
    REQUIRE(a.shape == nn::Shape{rows, 3, 64, 96});  // chain_yaml's preprocess: 96x64, f32 NCHW
    const std::size_t item = 3 * 64 * 96, row = index[i]["row"].get<std::size_t>();
    const double mean = std::accumulate(a.data.begin() + static_cast<std::ptrdiff_t>(row * item),
                                        a.data.begin() + static_cast<std::ptrdiff_t>((row + 1) * item), 0.0) / item;
    CHECK(mean == Approx(summaries[i]["payload"]["mean"].get<double>()).epsilon(1e-6));
  }
  // Written under a temporary name, then renamed: none is left behind.
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename() != ".sluice-lock") CHECK(entry.path().filename().string()[0] != '.');
  fs::remove_all(dir);
  fs::remove(jsonl);
}

TEST_CASE("npy sink fails its frames when it cannot create the directory", "[sink][npy]") {
  const std::string yaml = chain_yaml("cpu", "bgr8", 8, "x");
  std::string bad = yaml;
  bad.replace(bad.find("type: jsonl"), 11, "type: npy");
  bad.replace(bad.find("path: x"), 7, "path: /proc/nope/out");
  const auto totals = run_to_end(plan_from(bad));
  CHECK(totals.failed == 8);
  CHECK(totals.delivered == 0);
}

TEST_CASE("npy sink keeps earlier runs' batches and index lines: numbers go on, a torn index line is cut",
          "[sink][npy]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("sluice_npy_append_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::string yaml = chain_yaml("cpu", "bgr8", 21, "x");
  yaml.replace(yaml.find("type: jsonl"), 11, "type: npy");
  yaml.replace(yaml.find("path: x"), 7, "path: " + dir.string());
  REQUIRE(run_to_end(plan_from(yaml)).delivered == 21);
  { std::ofstream((dir / "index.jsonl").string(), std::ios::app) << "{\"file\": \"batch-0"; }  // a kill mid-line
  REQUIRE(run_to_end(plan_from(yaml)).delivered == 21);  // a reload or restart over the same directory

  const auto index = read_jsonl((dir / "index.jsonl").string());
  REQUIRE(index.size() == 42);
  std::set<std::string> files;
  for (std::size_t i = 0; i < index.size(); ++i) {
    INFO("line " << i);
    CHECK(index[i]["sequence"] == i % 21);
    const std::string file = index[i]["file"];
    files.insert(file);
    CHECK(nn::read_npy((dir / file).string()).shape[0] == (i % 21 < 16 ? 8 : 5));
  }
  CHECK(files.size() == 6);  // 3 batches per run, none overwritten
  fs::remove_all(dir);
}
