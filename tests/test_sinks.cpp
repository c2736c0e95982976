// The sink's writers, driven directly with batches built here: jsonl per file and per source (rotation),
// the directory sink, output names, atomic commits and temporaries, and writes that fail (blocked, then the
// batch fails with the path and the reason).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include "kernels/topk.hpp"
#include "pipeline_helpers.hpp"
#include "sink_rig.hpp"
#include "stage_params.hpp"
#include "runtime/errors.hpp"
#include "runtime/job_ledger.hpp"
#include "runtime/stage.hpp"
#include "runtime/utf8.hpp"
#include "runtime/sink_outputs.hpp"

using namespace sluice;
namespace fs = std::filesystem;
using sluice::test::params_of;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

using Params = std::map<std::string, std::string>;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("sluice_sinks_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  return dir;
}


using Rig = test::SinkRig;
using TestBatch = test::ClassesBatch;
using test::classes_desc;

FrameMeta frame(std::uint64_t sequence, std::uint32_t input = 0, std::uint64_t input_frame = 0) {
  FrameMeta f;
  f.source_id = 0;
  f.sequence = sequence;
  f.pts_ns = static_cast<std::int64_t>(sequence) * 40'000'000;
  f.input = input;
  f.input_frame = input_frame;
  return f;
}

// Registers an input of source 0 with the tracker and returns its id.
std::uint32_t begin_input(Rig& rig, const std::string& uri, std::uint64_t frames) {
  const std::uint32_t id = rig.shared->inputs.begin(0, uri, InputKind::file, static_cast<std::int64_t>(frames));
  rig.shared->inputs.decoded(id, frames);
  rig.shared->inputs.end(id);
  return id;
}

// Settles `frames` as delivered and finishes every input that completed; returns the outputs committed.
std::vector<std::string> settle_and_finish(Rig& rig, const std::vector<FrameMeta>& frames) {
  rig.shared->inputs.settle(frames, FrameFate::delivered);
  std::vector<std::string> outputs;
  for (const auto& p : rig.shared->inputs.take_completed())
    for (auto& path : rig.stage->finish_input(p, rig.ctx)) outputs.push_back(path);
  return outputs;
}

std::vector<nlohmann::json> read_lines(const fs::path& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// Captures log lines, and the stage's health at the moment each was logged.
class CaptureSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::function<std::string()> probe;
  std::vector<std::string> lines, health;

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    lines.emplace_back(msg.payload.data(), msg.payload.size());
    health.push_back(probe ? probe() : std::string());
  }
  void flush_() override {}
};

struct LogCapture {
  std::shared_ptr<CaptureSink> sink = std::make_shared<CaptureSink>();
  std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  LogCapture() { spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink)); }
  ~LogCapture() { spdlog::set_default_logger(previous); }
  std::size_t count(const std::string& text) const {
    return static_cast<std::size_t>(std::count_if(sink->lines.begin(), sink->lines.end(), [&](const std::string& l) {
      return l.find(text) != std::string::npos;
    }));
  }
};

}  // namespace

TEST_CASE("sink declares its parameters once and rejects ones that do not apply", "[sinks]") {
  const std::string help = describe_stage(test::sink_info());
  for (const char* key : {"type", "path", "per", "rotate_mb", "rotate_s", "write_retry_s", "directory", ".sluice-tmp"})
    CHECK_THAT(help, Contains(key));
  CHECK_THROWS_WITH(Rig(Params{{"type", "npy"}, {"path", "/tmp/x"}, {"per", "file"}}),
                    Contains("'per' applies to type jsonl"));
  CHECK_THROWS_WITH(Rig(Params{{"type", "jsonl"}, {"path", "/tmp/x.jsonl"}, {"rotate_mb", "1"}}),
                    Contains("per: source"));
  CHECK_THROWS_WITH(Rig(Params{{"type", "jsonl"}, {"path", "-"}, {"per", "file"}}), Contains("directory"));
  CHECK_THROWS_WITH(Rig(Params{{"type", "directory"}}), Contains("needs a 'path'"));
}

TEST_CASE("jsonl per file commits each input atomically when it is finished", "[sinks]") {
  const fs::path dir = fresh_dir("per_file");
  {
    Rig rig(Params{{"type", "jsonl"}, {"per", "file"}, {"path", dir.string()}});
    rig.stage->open(rig.ctx);
    const std::uint32_t a = begin_input(rig, "/videos/a/clip.mp4", 3);
    const std::uint32_t b = begin_input(rig, "/videos/b/other.mkv", 2);
    // Interleaved, as two sources would deliver them.
    const std::vector<FrameMeta> first = {frame(0, a, 0), frame(1, b, 0), frame(2, a, 1)};
    const std::vector<FrameMeta> second = {frame(3, a, 2)};
    TestBatch b1(rig.desc, first), b2(rig.desc, second);
    rig.stage->process(&b1.b, rig.ctx);
    rig.stage->process(&b2.b, rig.ctx);

    // Nothing final before finish_input(): only temporaries.
    CHECK(names_in(dir) == std::set<std::string>{".sluice-lock", ".sluice-names", ".clip.jsonl.sluice-tmp",
                                                 ".other.jsonl.sluice-tmp"});

    auto outputs = settle_and_finish(rig, {first[0], first[2], second[0]});
    REQUIRE(outputs == std::vector<std::string>{(dir / "clip.jsonl").string()});
    const auto records = read_lines(dir / "clip.jsonl");
    REQUIRE(records.size() == 3);
    for (std::size_t i = 0; i < 3; ++i) {
      INFO("record " << i);
      CHECK(records[i]["input"] == "/videos/a/clip.mp4");
      CHECK(records[i]["input_frame"] == i);
      CHECK(records[i]["source_name"] == "cam");
      CHECK(records[i]["source"] == 0);
      CHECK(records[i]["classes"].size() == 2);
      CHECK(records[i]["stage_ms"].contains("infer"));
    }
    CHECK(records[1]["sequence"] == 2);
    CHECK(records[1]["classes"][0]["label"] == "noise");

    // The other input never completes: close() keeps its delivered record aside, no output appears.
    rig.stage->close(rig.ctx);
  }
  CHECK(names_in(dir) == std::set<std::string>{".sluice-lock", ".sluice-names", "clip.jsonl", "other.jsonl.partial"});
  fs::remove_all(dir);
}

TEST_CASE("an interrupted file input commits nothing (its records kept aside) and an input without frames still gets its output", "[sinks]") {
  const fs::path dir = fresh_dir("interrupted");
  Rig rig(Params{{"type", "jsonl"}, {"per", "file"}, {"path", dir.string()}});
  rig.stage->open(rig.ctx);
  const std::uint32_t a = rig.shared->inputs.begin(0, "/videos/cut.mp4", InputKind::file, 10);
  rig.shared->inputs.decoded(a, 1);
  const std::vector<FrameMeta> frames = {frame(0, a, 0)};
  TestBatch batch(rig.desc, frames);
  rig.stage->process(&batch.b, rig.ctx);
  rig.shared->inputs.interrupt(a);
  CHECK(settle_and_finish(rig, frames).empty());

  const std::uint32_t empty = begin_input(rig, "/videos/empty.mp4", 0);
  (void)empty;
  CHECK(settle_and_finish(rig, {}) == std::vector<std::string>{(dir / "empty.jsonl").string()});
  rig.stage->close(rig.ctx);
  CHECK(names_in(dir) == std::set<std::string>{".sluice-lock", ".sluice-names", "cut.jsonl.partial", "empty.jsonl"});
  CHECK(fs::file_size(dir / "empty.jsonl") == 0);
  fs::remove_all(dir);
}

TEST_CASE("inputs sharing a stem get distinct names that the next run reuses", "[sinks]") {
  const fs::path dir = fresh_dir("names");
  std::string second_name;
  {
    Rig rig(Params{{"type", "jsonl"}, {"per", "file"}, {"path", dir.string()}});
    rig.stage->open(rig.ctx);
    const std::uint32_t a = begin_input(rig, "/data/day1/clip.mp4", 1);
    const std::uint32_t b = begin_input(rig, "/data/day2/clip.mp4", 1);
    const std::vector<FrameMeta> frames = {frame(0, a, 0), frame(1, b, 0)};
    TestBatch batch(rig.desc, frames);
    rig.stage->process(&batch.b, rig.ctx);
    const auto outputs = settle_and_finish(rig, frames);
    REQUIRE(outputs.size() == 2);
    CHECK(outputs[0] == (dir / "clip.jsonl").string());
    second_name = fs::path(outputs[1]).filename().string();
    CHECK(second_name == "clip-" + sinks::short_hash("/data/day2/clip.mp4") + ".jsonl");
    rig.stage->close(rig.ctx);
  }
  {
    // A later run (a resumed job) that only sees the second input: it keeps its name, the first one's output
    // is not overwritten.
    Rig rig(Params{{"type", "jsonl"}, {"per", "file"}, {"path", dir.string()}});
    rig.stage->open(rig.ctx);
    const std::uint32_t b = begin_input(rig, "/data/day2/clip.mp4", 1);
    const std::vector<FrameMeta> frames = {frame(0, b, 0)};
    TestBatch batch(rig.desc, frames);
    rig.stage->process(&batch.b, rig.ctx);
    const auto outputs = settle_and_finish(rig, frames);
    REQUIRE(outputs.size() == 1);
    CHECK(fs::path(outputs[0]).filename() == second_name);
    rig.stage->close(rig.ctx);
  }
  CHECK(read_lines(dir / "clip.jsonl")[0]["input"] == "/data/day1/clip.mp4");
  CHECK(sinks::uri_stem("rtsp://cam.local:554/live/main?token=x") == "main");
  CHECK(sinks::uri_stem("/data/frames/%05d.png") == "frames");
  CHECK(sinks::uri_stem("/data/my clip (1).mp4") == "my_clip__1_");
  // A file of a job whose name holds a pattern's characters is named after itself, not after its folder.
  CHECK(sinks::uri_stem("/data/Movie [1080p].mp4") == "Movie__1080p_");
  CHECK(sinks::uri_stem("/data/100%.mp4") == "100_");
  CHECK(sinks::uri_stem("/data/a*b?.png") == "a_b_");
  CHECK(sinks::uri_stem("/data/shots/img_%04d.jpg") == "shots");
  CHECK(sinks::safe_name("..hidden") == "hidden");
  fs::remove_all(dir);
}

TEST_CASE("an http(s) input is named after its path's last segment, never escaping the directory", "[sinks]") {
  CHECK(sinks::uri_stem("https://media.example/x/clip.mp4?sig=abc&exp=9") == "clip");
  CHECK(sinks::uri_stem("http://h:8080/dir/..%2F..%2Fescape.mp4") == "_2F.._2Fescape");
  CHECK(sinks::uri_stem("http://h/a/..") == "input");
  CHECK(sinks::uri_stem("http://h/") == "h");
  CHECK(sinks::uri_stem("https://user:pw@h/.hidden.mp4") == "hidden");
  CHECK(sinks::uri_stem("http://h/%2e%2e") == "_2e_2e");
  CHECK(sinks::uri_stem("https://h/v/my%20clip.mp4") == "my_20clip");  // an escape, not an image-sequence pattern
}

TEST_CASE("shown_uri hides a URL's user info, query and fragment, and leaves paths alone", "[sinks]") {
  CHECK(shown_uri("https://user:pw@media.example:8443/a/b.mp4?sig=x&t=1#frag") ==
        "https://***@media.example:8443/a/b.mp4?***");
  CHECK(shown_uri("http://h/a.mp4#t=10") == "http://h/a.mp4?***");
  CHECK(shown_uri("http://h?token=x") == "http://h?***");
  CHECK(shown_uri("http://h/a.mp4") == "http://h/a.mp4");
  CHECK(shown_uri("rtsp://admin:secret@cam/1") == "rtsp://***@cam/1");
  CHECK(shown_uri("/data/a?b.mp4") == "/data/a?b.mp4");  // a path: a '?' is part of its name
  CHECK(shown_uri(std::string("/data/\xff.mp4")) == "/data/\xef\xbf\xbd.mp4");
}

TEST_CASE("directory sink writes one result per input and names untracked frames after their source", "[sinks]") {
  const fs::path dir = fresh_dir("directory");
  {
    Rig rig(Params{{"type", "directory"}, {"path", dir.string()}});
    rig.stage->open(rig.ctx);
    const std::uint32_t a = begin_input(rig, "/videos/walk.mp4", 3);
    const std::vector<FrameMeta> frames = {frame(0, a, 0), frame(1, a, 1), frame(2), frame(3, a, 2), frame(4)};
    TestBatch batch(rig.desc, frames);
    rig.stage->process(&batch.b, rig.ctx);
    CHECK_FALSE(fs::exists(dir / "walk.json"));
    const auto outputs = settle_and_finish(rig, frames);
    REQUIRE(outputs == std::vector<std::string>{(dir / "walk.json").string()});
    CHECK_FALSE(fs::exists(dir / "cam.json"));  // frames without an input: committed at close()
    rig.stage->close(rig.ctx);
  }
  std::ifstream in(dir / "walk.json");
  const auto result = nlohmann::json::parse(in);
  CHECK(result["input"] == "/videos/walk.mp4");
  CHECK(result["source"] == "cam");
  CHECK(result["frames"] == 3);
  CHECK(result["delivered"] == 3);
  CHECK(result["dropped"] == 0);
  CHECK(result["failed"] == 0);
  CHECK_FALSE(result.contains("error"));
  REQUIRE(result["records"].size() == 3);
  for (std::size_t i = 0; i < 3; ++i) CHECK(result["records"][i]["input_frame"] == i);

  std::ifstream in2(dir / "cam.json");
  const auto untracked = nlohmann::json::parse(in2);
  CHECK(untracked["input"].is_null());
  CHECK(untracked["source"] == "cam");
  REQUIRE(untracked["records"].size() == 2);
  CHECK(untracked["records"][1]["sequence"] == 4);
  CHECK_FALSE(untracked["records"][0].contains("input"));
  CHECK(names_in(dir) == std::set<std::string>{".sluice-lock", ".sluice-names", "walk.json", "cam.json"});
  fs::remove_all(dir);
}

TEST_CASE("jsonl per source rotates by size into numbered UTC-stamped files", "[sinks]") {
  const fs::path dir = fresh_dir("per_source");
  constexpr std::uint64_t kLimit = 1000;  // rotate_mb 0.001
  {
    Rig rig(Params{{"type", "jsonl"}, {"per", "source"}, {"path", dir.string()}, {"rotate_mb", "0.001"}});
    rig.stage->open(rig.ctx);
    for (std::uint64_t batch = 0; batch < 4; ++batch) {
      std::vector<FrameMeta> frames;
      for (std::uint64_t i = 0; i < 5; ++i) frames.push_back(frame(batch * 5 + i));
      TestBatch b(rig.desc, frames);
      rig.stage->process(&b.b, rig.ctx);
    }
    rig.stage->close(rig.ctx);
  }
  std::vector<std::uint64_t> sequences;
  int rotated = 0;
  for (const auto& name : names_in(dir)) {
    INFO(name);
    if (name == ".sluice-lock") continue;
    const auto size = fs::file_size(dir / name);
    CHECK(size <= kLimit);
    CHECK(size > 0);
    if (name != "cam.jsonl") {
      // cam-<yyyymmddThhmmss>-<n>.jsonl
      REQUIRE(name.size() > 25);
      CHECK(name.substr(0, 4) == "cam-");
      CHECK(name[12] == 'T');
      CHECK(name[19] == '-');
      CHECK(name.substr(name.size() - 6) == ".jsonl");
      ++rotated;
    }
    for (const auto& r : read_lines(dir / name)) sequences.push_back(r["sequence"].get<std::uint64_t>());
  }
  CHECK(rotated >= 3);  // 20 records of more than 150 bytes in files of at most 1000
  std::sort(sequences.begin(), sequences.end());
  REQUIRE(sequences.size() == 20);
  for (std::uint64_t i = 0; i < 20; ++i) CHECK(sequences[i] == i);

  // The next run appends to the live file instead of truncating it.
  const auto live_before = fs::file_size(dir / "cam.jsonl");
  {
    Rig rig(Params{{"type", "jsonl"}, {"per", "source"}, {"path", dir.string()}});
    rig.stage->open(rig.ctx);
    TestBatch b(rig.desc, {frame(100)});
    rig.stage->process(&b.b, rig.ctx);
    rig.stage->close(rig.ctx);
  }
  CHECK(fs::file_size(dir / "cam.jsonl") > live_before);
  CHECK(read_lines(dir / "cam.jsonl").back()["sequence"] == 100);
  fs::remove_all(dir);
}

TEST_CASE("stale temporaries of a killed run are removed at open", "[sinks]") {
  const fs::path dir = fresh_dir("stale");
  fs::create_directories(dir / ".clip.sluice-tmp");
  std::ofstream(dir / ".clip.sluice-tmp" / "000000.jpg") << "x";
  std::ofstream(dir / ".walk.jsonl.sluice-tmp") << "{}\n";
  std::ofstream(dir / ".walk.sluice-tmp.mp4") << "x";
  std::ofstream(dir / "keep.jsonl") << "{}\n";
  std::ofstream(dir / ".keep-hidden") << "x";
  Rig rig(Params{{"type", "jsonl"}, {"per", "file"}, {"path", dir.string()}});
  rig.stage->open(rig.ctx);
  CHECK(names_in(dir) == std::set<std::string>{".sluice-lock", "keep.jsonl", ".keep-hidden"});
  rig.stage->close(rig.ctx);
  fs::remove_all(dir);
}

TEST_CASE("a sink writing to a full disk fails the batch at once with the path and reason", "[sinks]") {
  // write_retry_s 0 = retry forever: before ENOSPC failed fast, this test never returned (ctest's timeout).
  Rig rig(Params{{"type", "jsonl"}, {"path", "/dev/full"}, {"write_retry_s", "0"}});
  rig.stage->open(rig.ctx);
  LogCapture log;
  log.sink->probe = [&] { return rig.health(); };
  TestBatch batch(rig.desc, {frame(0), frame(1)});
  CHECK(rig.health().empty());
  for (int attempt = 0; attempt < 3; ++attempt) {
    try {
      rig.stage->process(&batch.b, rig.ctx);
      FAIL("the write to /dev/full succeeded");
    } catch (const StageError& e) {
      CHECK_THAT(e.what(), Contains("'/dev/full'") && Contains("No space left on device"));
    }
  }
  // Logged once for the whole spell, and the stage stays unhealthy until a write succeeds.
  CHECK(log.count("No space left on device") == 1);
  CHECK_THAT(rig.health(), StartsWith("failing: writing '/dev/full' failed: No space left on device since "));
  rig.stage->close(rig.ctx);
}

TEST_CASE("a sink whose directory turned into a file blocks then fails and recovers once it is back", "[sinks]") {
  const fs::path dir = fresh_dir("notdir");
  Rig rig(Params{{"type", "directory"}, {"path", dir.string()}, {"write_retry_s", "0.3"}});
  rig.stage->open(rig.ctx);
  fs::remove_all(dir);
  std::ofstream(dir) << "not a directory";

  LogCapture log;
  log.sink->probe = [&] { return rig.health(); };
  const std::uint32_t a = begin_input(rig, "/videos/clip.mp4", 1);
  TestBatch batch(rig.desc, {frame(0, a, 0)});
  CHECK_THROWS_WITH(rig.stage->process(&batch.b, rig.ctx), Contains(dir.string()) && Contains("Not a directory"));
  REQUIRE(log.count("Not a directory") == 1);
  CHECK_THAT(log.sink->health.front(), StartsWith("blocked: "));
  CHECK_THAT(rig.health(), StartsWith("gave up: "));

  // Back again: the next batch goes through and the sink is healthy.
  fs::remove(dir);
  fs::create_directories(dir);
  rig.stage->process(&batch.b, rig.ctx);
  CHECK(rig.health().empty());
  rig.shared->inputs.settle(batch.b.frames, FrameFate::delivered);
  for (const auto& p : rig.shared->inputs.take_completed()) rig.stage->finish_input(p, rig.ctx);
  rig.stage->close(rig.ctx);
  std::ifstream in(dir / "clip.json");
  CHECK(nlohmann::json::parse(in)["records"].size() == 1);
  fs::remove_all(dir);
}

TEST_CASE("directory and per-source sinks run at the end of a whole pipeline", "[sinks][pipeline]") {
  const fs::path dir = fresh_dir("pipeline");
  // 21 frames of a test pattern (no input: the results are named after the source and committed at the end).
  std::string yaml = test::chain_yaml("cpu", "bgr8", 21, "x");
  yaml.replace(yaml.find("type: jsonl\n    path: x"), 23, "type: directory\n    path: " + (dir / "d").string());
  REQUIRE(test::run_to_end(test::plan_from(yaml)).delivered == 21);
  std::vector<fs::path> results;
  for (const auto& e : fs::directory_iterator(dir / "d"))
    if (e.path().extension() == ".json") results.push_back(e.path());
  REQUIRE(results.size() == 1);
  std::ifstream in(results[0]);
  const auto result = nlohmann::json::parse(in);
  CHECK(result["frames"] == 21);
  REQUIRE(result["records"].size() == 21);
  CHECK(result["records"][20]["payload"]["shape"] == "tensor f32 nchw 3x64x96");

  yaml.replace(yaml.find("type: directory"), 15, "type: jsonl\n    per: source\n    rotate_mb: 0.002");
  yaml.replace(yaml.find((dir / "d").string()), (dir / "d").string().size(), (dir / "s").string());
  REQUIRE(test::run_to_end(test::plan_from(yaml)).delivered == 21);
  std::size_t records = 0, files = 0;
  for (const auto& e : fs::directory_iterator(dir / "s")) {
    if (e.path().filename() == ".sluice-lock") continue;
    CHECK(fs::file_size(e.path()) <= 2000);
    records += read_lines(e.path()).size();
    ++files;
  }
  CHECK(records == 21);
  CHECK(files > 2);
  fs::remove_all(dir);
}

TEST_CASE("output names come back the same after a reload even for paths that are not UTF-8", "[sinks]") {
  const fs::path dir = fresh_dir("claims");
  fs::create_directories(dir);
  sinks::WriteRetry retry("t", 1);
  const std::string odd = "/z/caf\xe9/clip.mp4";  // Latin-1 bytes in a path
  std::vector<std::string> first;
  {
    sinks::OutputNames names;
    names.open(dir);
    first = {names.for_input("/x/clip.mp4", retry), names.for_input("/y/clip.mp4", retry),
             names.for_input(odd, retry), names.for_source("cam", retry)};
  }
  CHECK(first[0] == "clip");
  CHECK(first[1] != first[2]);
  CHECK(first[3] == "cam");
  // A claim torn by a crash is ignored, and the next claim starts on a line of its own.
  std::ofstream(dir / sinks::OutputNames::kClaimsFile, std::ios::app) << R"({"name":"half)";
  {
    sinks::OutputNames names;
    names.open(dir);
    CHECK(names.for_source("cam", retry) == "cam");
    CHECK(names.for_input(odd, retry) == first[2]);
    CHECK(names.for_input("/y/clip.mp4", retry) == first[1]);
    CHECK(names.for_input("/x/clip.mp4", retry) == "clip");
    CHECK(names.for_input("/w/clip.mp4", retry) == "clip-" + sinks::short_hash("/w/clip.mp4"));
  }
  // Nothing was claimed twice: four claims, the torn line, and /w's claim.
  std::ifstream claims(dir / sinks::OutputNames::kClaimsFile);
  std::vector<std::string> lines;
  for (std::string line; std::getline(claims, line);) lines.push_back(line);
  REQUIRE(lines.size() == 6);
  CHECK_THAT(lines[2], Contains("input_hex"));
  CHECK(lines[4] == R"({"name":"half)");
  sinks::OutputNames again;
  again.open(dir);
  CHECK(again.for_input("/w/clip.mp4", retry) == "clip-" + sinks::short_hash("/w/clip.mp4"));
  fs::remove_all(dir);
}

namespace {

// What a directory holds: name -> (size, mtime ns), recursively.
std::map<std::string, std::pair<std::uintmax_t, std::int64_t>> snapshot_of(const fs::path& dir) {
  std::map<std::string, std::pair<std::uintmax_t, std::int64_t>> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    struct stat st {};
    ::lstat(e.path().c_str(), &st);
    out[fs::relative(e.path(), dir).string()] = {e.is_regular_file() ? e.file_size() : 0,
                                                 st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec};
  }
  return out;
}

// Another process holding the lock file `lock` as a running sluiced does (flock, its pid inside); killed and
// reaped on destruction. Only system calls in the child (forked from a test process).
struct ForeignHolder {
  pid_t pid = -1;
  explicit ForeignHolder(const fs::path& lock) {
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT, 0644);
      if (fd < 0 || ::flock(fd, LOCK_EX) != 0) ::_exit(1);
      char text[32];
      const int n = std::snprintf(text, sizeof text, "%d\n", static_cast<int>(::getpid()));
      if (::ftruncate(fd, 0) != 0 || ::write(fd, text, static_cast<std::size_t>(n)) != n) ::_exit(1);
      if (::write(ready[1], "k", 1) != 1) ::_exit(1);
      for (;;) ::pause();
    }
    ::close(ready[1]);
    char c = 0;
    REQUIRE(::read(ready[0], &c, 1) == 1);
    ::close(ready[0]);
  }
  ~ForeignHolder() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
};

}  // namespace

TEST_CASE("jsonl per run appends across runs and reloads and cuts a torn last line", "[sinks]") {
  const fs::path dir = fresh_dir("per_run_append");
  fs::create_directories(dir);
  const fs::path out = dir / "out.jsonl";
  for (std::uint64_t run = 0; run < 3; ++run) {
    Rig rig(Params{{"type", "jsonl"}, {"path", out.string()}});
    rig.stage->open(rig.ctx);
    TestBatch batch(rig.desc, {frame(run * 2), frame(run * 2 + 1)});
    rig.stage->process(&batch.b, rig.ctx);
    rig.stage->close(rig.ctx);
    if (run == 1) {  // a kill in the middle of a record
      std::ofstream(out, std::ios::app) << "{\"source\": 0, \"seq";
    }
  }
  const auto records = read_lines(out);  // parses every line: no torn one, none glued to the next
  REQUIRE(records.size() == 6);
  for (std::size_t i = 0; i < records.size(); ++i) CHECK(records[i]["sequence"] == i);
  fs::remove_all(dir);
}

TEST_CASE("a second sink over the same outputs fails first, names the holder's pid and touches nothing", "[sinks]") {
  const fs::path dir = fresh_dir("locked");
  fs::create_directories(dir);
  const std::vector<Params> kinds = {
      {{"type", "jsonl"}, {"path", (dir / "run.jsonl").string()}},
      {{"type", "jsonl"}, {"per", "file"}, {"path", dir.string()}},
      {{"type", "jsonl"}, {"per", "source"}, {"path", dir.string()}},
      {{"type", "directory"}, {"path", dir.string()}},
      {{"type", "npy"}, {"path", dir.string()}},
  };
  // What a first instance left: results, a live temp of an input it is writing, the index.
  std::ofstream(dir / "run.jsonl") << "{\"sequence\": 0}\n";
  std::ofstream(dir / ".clip.jsonl.sluice-tmp") << "{\"sequence\": 1}\n";
  std::ofstream(dir / "index.jsonl") << "{\"file\": \"batch-00000000.npy\"}\n{\"fi";
  for (const auto& given : kinds) {
    const bool file = given.at("path") == (dir / "run.jsonl").string();
    const fs::path lock = file ? dir / ".run.jsonl.sluice-lock" : dir / ".sluice-lock";
    ForeignHolder first(lock);
    const auto before = snapshot_of(dir);
    Rig rig(given);
    INFO(given.at("type") << " " << (given.count("per") ? given.at("per") : ""));
    CHECK_THROWS_WITH(rig.stage->open(rig.ctx),
                      Contains("in use by another sluiced (pid " + std::to_string(first.pid) + ",") &&
                          Contains(lock.string()));
    CHECK(snapshot_of(dir) == before);
  }
  fs::remove_all(dir);
}

TEST_CASE("a per run file removed mid-run fails its frames and starts anew once the directory is back", "[sinks]") {
  const fs::path dir = fresh_dir("removed");
  fs::create_directories(dir);
  const fs::path out = dir / "out.jsonl";
  Rig rig(Params{{"type", "jsonl"}, {"path", out.string()}, {"write_retry_s", "0.2"}});
  rig.stage->open(rig.ctx);
  TestBatch first(rig.desc, {frame(0), frame(1)}), second(rig.desc, {frame(2)}), third(rig.desc, {frame(3)});
  rig.stage->process(&first.b, rig.ctx);
  fs::remove_all(dir);
  // Before: delivered into the unlinked file. Now: failed, saying why.
  CHECK_THROWS_WITH(rig.stage->process(&second.b, rig.ctx), Contains(out.string()) && Contains("was removed"));
  fs::create_directories(dir);
  rig.stage->process(&third.b, rig.ctx);
  rig.stage->close(rig.ctx);
  const auto records = read_lines(out);
  REQUIRE(records.size() == 1);
  CHECK(records[0]["sequence"] == 3);
  fs::remove_all(dir);
}

TEST_CASE("an input with failed frames is kept aside as .partial, not renamed into place, and counts as failed",
          "[sinks]") {
  const fs::path dir = fresh_dir("partial");
  Rig rig(Params{{"type", "jsonl"}, {"per", "file"}, {"path", dir.string()}});
  rig.stage->open(rig.ctx);
  const std::uint32_t a = begin_input(rig, "/videos/clip.mp4", 3);
  const std::vector<FrameMeta> written = {frame(0, a, 0), frame(1, a, 1)};
  TestBatch batch(rig.desc, written);
  rig.stage->process(&batch.b, rig.ctx);
  rig.shared->inputs.settle(std::vector<FrameMeta>{frame(2, a, 2)}, FrameFate::failed);
  rig.shared->inputs.settle(written, FrameFate::delivered);
  const auto completed = rig.shared->inputs.take_completed();
  REQUIRE(completed.size() == 1);
  CHECK_THROWS_WITH(rig.stage->finish_input(completed[0], rig.ctx),
                    Contains("1 of 3 frames failed") && Contains("clip.jsonl.partial"));
  rig.stage->close(rig.ctx);
  CHECK(names_in(dir) == std::set<std::string>{".sluice-lock", ".sluice-names", "clip.jsonl.partial"});
  CHECK(read_lines(dir / "clip.jsonl.partial").size() == 2);  // the delivered frames' records are on disk
  CHECK(rig.shared->inputs.totals().with_errors == 1);
  fs::remove_all(dir);
}

TEST_CASE("a directory result that cannot be committed keeps its records aside and fails the input", "[sinks]") {
  const fs::path dir = fresh_dir("commit_fails");
  Rig rig(Params{{"type", "directory"}, {"path", dir.string()}, {"write_retry_s", "0.2"}});
  rig.stage->open(rig.ctx);
  fs::create_directories(dir / "clip.json" / "in-the-way");  // the rename into place cannot work
  const std::uint32_t a = begin_input(rig, "/videos/clip.mp4", 2);
  const std::vector<FrameMeta> frames = {frame(0, a, 0), frame(1, a, 1)};
  TestBatch batch(rig.desc, frames);
  rig.stage->process(&batch.b, rig.ctx);
  rig.shared->inputs.settle(frames, FrameFate::delivered);
  const auto completed = rig.shared->inputs.take_completed();
  REQUIRE(completed.size() == 1);
  CHECK_THROWS_WITH(rig.stage->finish_input(completed[0], rig.ctx), Contains("clip.json.records.partial"));
  rig.stage->close(rig.ctx);
  std::ifstream in(dir / "clip.json.records.partial");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(nlohmann::json::parse("[" + text + "]").size() == 2);  // both delivered records
  CHECK(rig.shared->inputs.totals().with_errors == 1);
  fs::remove_all(dir);
}

TEST_CASE("a job's sink takes the records of inputs a killed run had started out of shared outputs: exactly once",
          "[sinks]") {
  const std::map<std::string, Params> kinds = {
      {"per run", {{"type", "jsonl"}, {"path", "out.jsonl"}}},
      {"per source", {{"type", "jsonl"}, {"per", "source"}, {"rotate_mb", "0.0005"}, {"path", "by-source"}}},
      {"npy", {{"type", "npy"}, {"path", "npy"}}},
  };
  for (const auto& entry : kinds) {
    const std::string kind = entry.first;  // a copy: lambdas below capture it (not a structured binding)
    const Params& given = entry.second;
    SECTION(kind) {
      const fs::path dir = fresh_dir("job_exactly_once");
      fs::create_directories(dir);
      Params p = given;
      p["path"] = (dir / p["path"]).string();
      const std::string a = (dir / "a.mp4").string(), b = (dir / "b\xe9.mp4").string();  // b is not UTF-8
      auto records = [&] {  // input -> its input_frame numbers, over every file the sink wrote
        std::map<std::string, std::vector<std::uint64_t>> by;
        std::vector<fs::path> files;
        if (kind == "per run") files = {p["path"]};
        if (kind == "npy") files = {fs::path(p["path"]) / "index.jsonl"};
        if (kind == "per source")
          for (const auto& e : fs::directory_iterator(p["path"]))
            if (e.path().extension() == ".jsonl") files.push_back(e.path());
        for (const auto& f : files)
          for (const auto& r : read_lines(f))
            by[r.contains("input_hex") ? *from_hex(r["input_hex"].get<std::string>()) : r["input"].get<std::string>()]
                .push_back(r["input_frame"]);
        for (auto& [input, frames] : by) std::sort(frames.begin(), frames.end());
        return by;
      };
      {  // run 1: a finishes, b is killed after 3 of its 5 frames were delivered
        Rig rig(p);
        rig.shared->job = std::make_shared<JobLedger>(dir / "j.ledger");
        rig.stage->open(rig.ctx);
        const std::uint32_t ia = begin_input(rig, a, 2);
        const std::uint32_t ib = rig.shared->inputs.begin(0, b, InputKind::file, 5);
        rig.shared->inputs.decoded(ib, 3);
        const std::vector<FrameMeta> frames = {frame(0, ia, 0), frame(1, ib, 0), frame(2, ia, 1), frame(3, ib, 1)};
        TestBatch first(rig.desc, frames);
        rig.stage->process(&first.b, rig.ctx);
        TestBatch second(rig.desc, {frame(4, ib, 2)});
        rig.stage->process(&second.b, rig.ctx);
        settle_and_finish(rig, frames);
        rig.shared->job->done(a, 2, {});
        // kill -9: nothing more happens; the stage lets go of its locks as the process would
      }
      REQUIRE(records()[b] == std::vector<std::uint64_t>{0, 1, 2});
      {  // run 2: b is redone from its start
        Rig rig(p);
        rig.shared->job = std::make_shared<JobLedger>(dir / "j.ledger");
        REQUIRE(rig.shared->job->interrupted() == std::set<std::string>{b});
        rig.stage->open(rig.ctx);
        CHECK(records().count(b) == 0);  // taken out before anything of this run was written
        const std::uint32_t ib = begin_input(rig, b, 5);
        std::vector<FrameMeta> frames;
        for (std::uint64_t i = 0; i < 5; ++i) frames.push_back(frame(10 + i, ib, i));
        TestBatch batch(rig.desc, frames);
        rig.stage->process(&batch.b, rig.ctx);
        settle_and_finish(rig, frames);
        rig.shared->job->done(b, 5, {});
        rig.stage->close(rig.ctx);
      }
      const auto by = records();
      CHECK(by.at(a) == std::vector<std::uint64_t>{0, 1});
      CHECK(by.at(b) == std::vector<std::uint64_t>{0, 1, 2, 3, 4});
      CHECK(by.size() == 2);
      fs::remove_all(dir);
    }
  }
}

// Issue 33: a reload (and a service at start) locks the new pipeline's outputs before anything else; the sink
// that opens them later takes that lock over instead of waiting for it.
TEST_CASE("an output lock reserved for a pipeline is taken over by its sink, or let go with the reservation",
          "[sinks][lock]") {
  const fs::path dir = fresh_dir("reserved_lock");
  fs::create_directories(dir);
  const fs::path lock = OutputLock::for_file(dir / "x.jsonl");
  {
    OutputLockReservation reserved(lock, "output 'x.jsonl'");
    CHECK(reserved.reserved());
    CHECK(OutputLock::holder_pid(lock) == ::getpid());
    // Without the reservation this would wait for "another pipeline of this sluiced" (0 ms here) and throw.
    OutputLock sink(lock, "output 'x.jsonl'", std::chrono::milliseconds(0));
    CHECK(sink.held());
    // Held by this process now (the running generation): a new reservation reserves nothing; the sink waits.
    OutputLockReservation again(lock, "output 'x.jsonl'");
    CHECK_FALSE(again.reserved());
    CHECK_THROWS_WITH(OutputLock(lock, "output 'x.jsonl'", std::chrono::milliseconds(0)),
                      Catch::Contains("in use by another pipeline of this sluiced"));
  }
  {
    OutputLockReservation reserved(lock, "output 'x.jsonl'");  // never taken over: let go when destroyed
  }
  const int fd = ::open(lock.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  CHECK(::flock(fd, LOCK_EX | LOCK_NB) == 0);  // free again
  ::close(fd);
  fs::remove_all(dir);
}

namespace {
std::string file_text(const fs::path& f) {
  std::ifstream in(f, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
ino_t inode_of(const fs::path& f) {
  struct stat st {};
  REQUIRE(::stat(f.c_str(), &st) == 0);
  return st.st_ino;
}
}  // namespace

// Issue 33: resuming a job on a nearly full disk failed, because taking an interrupted input's records out of a
// shared file copied the whole file. It is changed in place now: cut back, or its tail saved and written again.
TEST_CASE("taking records out changes the file in place, without a copy of it", "[sinks][resume]") {
  const fs::path dir = fresh_dir("drop_in_place");
  fs::create_directories(dir);
  const fs::path f = dir / "x.jsonl";
  const std::string a0 = "{\"input\":\"/in/a.mp4\",\"input_frame\":0}\n", a1 = "{\"input\":\"/in/a.mp4\",\"input_frame\":1}\n";
  const std::string b0 = "{\"input\":\"/in/b.mp4\",\"input_frame\":0}\n", b1 = "{\"input\":\"/in/b.mp4\",\"input_frame\":1}\n";
  const std::string live = "{\"source\":3}\n";
  sinks::WriteRetry retry("sink", 1);

  SECTION("records to go after the last one to keep: cut back") {
    std::ofstream(f, std::ios::binary) << a0 << live << a1 << b0 << b1 << "{\"input\":\"/in/b.m";
    const ino_t before = inode_of(f);
    REQUIRE(sinks::drop_records_of(f, {"/in/b.mp4"}, retry, "sink") == 3);
    CHECK(file_text(f) == a0 + live + a1);
    CHECK(inode_of(f) == before);  // the same file, not a copy renamed over it
  }
  SECTION("records to go between records to keep: the tail is written again") {
    std::ofstream(f, std::ios::binary) << a0 << b0 << live << a1 << b1 << a1;
    const ino_t before = inode_of(f);
    REQUIRE(sinks::drop_records_of(f, {"/in/b.mp4"}, retry, "sink") == 2);
    CHECK(file_text(f) == a0 + live + a1 + a1);
    CHECK(inode_of(f) == before);
  }
  SECTION("a redo record left by a run killed half-way is applied at the next open, once") {
    // Killed after the redo record was committed and the file cut back, before the tail was written again.
    std::ofstream(f, std::ios::binary) << a0;
    std::ofstream(dir / ".x.jsonl.sluice-redo", std::ios::binary) << "{\"cut\":" << a0.size() << "}\n" << live << a1;
    CHECK(sinks::drop_records_of(f, {}, retry, "sink") == 0);
    CHECK(file_text(f) == a0 + live + a1);
    CHECK(sinks::drop_records_of(f, {}, retry, "sink") == 0);  // applied once: the record is gone
    CHECK(file_text(f) == a0 + live + a1);
    // Killed before the file was touched: applying it gives the same.
    std::ofstream(f, std::ios::binary) << a0 << b0 << live << a1;
    std::ofstream(dir / ".x.jsonl.sluice-redo", std::ios::binary) << "{\"cut\":" << a0.size() << "}\n" << live << a1;
    CHECK(sinks::drop_records_of(f, {"/in/b.mp4"}, retry, "sink") == 0);
    CHECK(file_text(f) == a0 + live + a1);
  }
  SECTION("a redo record that does not fit the file is kept, and the file is not touched") {
    std::ofstream(f, std::ios::binary) << a0;
    std::ofstream(dir / ".x.jsonl.sluice-redo", std::ios::binary) << "{\"cut\":100000}\n" << live;
    CHECK_THROWS_WITH(sinks::drop_records_of(f, {}, retry, "sink"), Catch::Contains("shorter than its redo record"));
    CHECK(file_text(f) == a0);
    CHECK(fs::exists(dir / ".x.jsonl.sluice-redo"));
    std::ofstream(dir / ".x.jsonl.sluice-redo", std::ios::binary) << std::string(100000, '{');  // no header line
    CHECK_THROWS_WITH(sinks::drop_records_of(f, {}, retry, "sink"), Catch::Contains("cannot read the redo record"));
    CHECK(file_text(f) == a0);
    fs::remove(dir / ".x.jsonl.sluice-redo");
  }
  CHECK_FALSE(fs::exists(dir / ".x.jsonl.sluice-redo"));
  CHECK_FALSE(fs::exists(dir / ".x.jsonl.sluice-tmp"));
  CHECK_FALSE(fs::exists(dir / ".x.jsonl.sluice-redo.sluice-tmp"));
  fs::remove_all(dir);
}

TEST_CASE("taking records out keeps every other line byte for byte and drops a torn last line", "[sinks]") {
  const fs::path dir = fresh_dir("drop_records");
  fs::create_directories(dir);
  const fs::path f = dir / "x.jsonl";
  const std::string keep = "{\"input\":\"/in/a.mp4\",\"input_frame\":0}\n{\"source\":3}\nnot json at all\n"
                           "{\"input\":\"/in/./c.mp4\",\"input_frame\":7}\n";
  std::ofstream(f, std::ios::binary) << "{\"input\":\"/in/b.mp4\",\"input_frame\":0}\n" << keep.substr(0, 38)
                                     << "{\"input\": \"/in/../in/b.mp4\", \"input_frame\": 1}\n" << keep.substr(38)
                                     << "{\"input_hex\":\"2f696e2f622e6d7034\",\"input\":\"x\"}\n{\"input\":\"/in/a.m";
  sinks::WriteRetry retry("sink", 1);
  REQUIRE(sinks::drop_records_of(f, {"/in/b.mp4"}, retry, "sink") == 4);
  std::ifstream in(f, std::ios::binary);
  const std::string after((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(after == keep);
  CHECK(sinks::drop_records_of(f, {"/in/b.mp4"}, retry, "sink") == 0);  // nothing left to take: untouched
  CHECK(sinks::drop_records_of(dir / "missing.jsonl", {"/in/b.mp4"}, retry, "sink") == 0);
  CHECK(names_in(dir) == std::set<std::string>{"x.jsonl"});  // no temporary left
  fs::remove_all(dir);
}
