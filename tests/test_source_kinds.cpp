// The source-kind table (runtime/source_kind.hpp) and the decoder choice applied once where readers open
// (ReaderRegistry::open). A kind registered only in this file runs through a whole pipeline: a new kind needs
// its own code and one registration, nothing else.
#include <catch2/catch.hpp>

#include <atomic>
#include <set>
#include <string>

#include "runtime/errors.hpp"
#include "runtime/frame_reader.hpp"
#include "runtime/source_kind.hpp"
#include "tests/pipeline_helpers.hpp"

using namespace sluice;

namespace {

// alias://PATTERN?frames=N reads as the test pattern PATTERN: a kind of this file alone.
std::atomic<int> g_alias_expansions{0};

SourceKind alias_source_kind() {
  SourceKind k;
  k.name = "alias";
  k.claims = [](std::string_view uri) { return uri.rfind("alias://", 0) == 0; };
  k.reads_as = InputKind::testsrc;
  k.reach = SourceReach::anywhere;
  k.default_name = [](const std::string& uri) { return "alias-" + uri.substr(8); };
  k.expand = [](const std::string& uri) {
    ++g_alias_expansions;
    ExpandedSource e;
    e.kind = InputKind::testsrc;
    e.inputs.emplace_back("testsrc:" + uri.substr(8), InputKind::testsrc);
    return e;
  };
  k.check = [](const std::string& uri) {
    if (uri.size() == 8) throw std::invalid_argument("alias:// needs a pattern");
  };
  k.check_note = [](const std::string& uri) { return "an alias of testsrc:" + uri.substr(8); };
  return k;
}
SLUICE_REGISTER_SOURCE_KIND(alias_source_kind);

// A reader that says which one it is.
struct NamedReader final : FrameReader {
  explicit NamedReader(std::string backend) { i.backend = std::move(backend); }
  InputInfo i;
  ReadStatus read(const FrameTarget&, std::string&) override { return ReadStatus::end; }
  const InputInfo& info() const override { return i; }
};

}  // namespace

TEST_CASE("source kinds: every URI has exactly the kind its shape says, the file kind takes the rest", "[inputs]") {
  struct Row {
    const char* uri;
    const char* kind;
    bool live;
    SourceReach reach;
  };
  for (const Row& r : {
           Row{"testsrc:bars", "testsrc", false, SourceReach::anywhere},
           Row{"TESTSRC:noise", "testsrc", false, SourceReach::anywhere},
           Row{"rtsp://cam.local:554/x", "stream", true, SourceReach::network},
           Row{"RTSP://cam/x", "stream", true, SourceReach::network},
           Row{"srt://h:9000", "stream", true, SourceReach::network},
           Row{"udp://@:1234", "stream", true, SourceReach::network},
           Row{"redis://h:6379/jobs?group=g", "redis", false, SourceReach::network},
           Row{"rediss://h/jobs?group=g", "redis", false, SourceReach::network},
           Row{"/dev/video0", "camera", true, SourceReach::local_path},
           Row{"v4l2:2", "camera", true, SourceReach::local_path},
           Row{"/dev/v4l/by-id/usb-cam", "camera", true, SourceReach::local_path},
           Row{"frames/img_%04d.png", "image-sequence", false, SourceReach::local_path},
           Row{"a/b.JPG", "image", false, SourceReach::local_path},
           Row{"clip.mp4", "file", false, SourceReach::local_path},
           Row{"clips/", "file", false, SourceReach::local_path},
           Row{"alias://bars", "alias", false, SourceReach::anywhere},
           Row{"ftp://h/x.mp4", "file", false, SourceReach::local_path},  // no kind claims ftp: a (missing) file
       }) {
    INFO(r.uri);
    const SourceKind& k = source_kind_of(r.uri);
    CHECK(k.name == r.kind);
    CHECK(k.live() == r.live);
    CHECK(k.reach == r.reach);
  }
  CHECK(source_kind_of("redis://h/jobs?group=g").fed());
  CHECK_FALSE(source_kind_of("clip.mp4").fed());
  CHECK(source_kind_of("v4l2:2").local_path("v4l2:2") == "/dev/video2");
  CHECK(source_kind_of("v4l2:/dev/video3").local_path("v4l2:/dev/video3") == "/dev/video3");
}

TEST_CASE("source kinds: the table has one entry per name, in order of precedence, file last", "[inputs]") {
  const auto& kinds = source_kinds();
  std::set<std::string> names;
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    INFO(kinds[i].name);
    CHECK(names.insert(kinds[i].name).second);
    CHECK(kinds[i].claims);
    if (i > 0) CHECK(kinds[i - 1].precedence <= kinds[i].precedence);
  }
  REQUIRE_FALSE(kinds.empty());
  CHECK(kinds.back().name == "file");
  for (const char* name : {"file", "image", "image-sequence", "camera", "stream", "testsrc", "redis", "alias"})
    CHECK(names.count(name) == 1);
}

TEST_CASE("source kinds: reload carry-over, jobs and default names come from the kind", "[inputs]") {
  ReaderOptions endless, counted;
  counted.frames = 10;
  CHECK(carries_over_reload("rtsp://h/x", counted));
  CHECK(carries_over_reload("testsrc:bars", endless));
  CHECK_FALSE(carries_over_reload("testsrc:bars", counted));
  CHECK_FALSE(carries_over_reload("clip.mp4", endless));
  const SourceKind& redis = source_kind_of("redis://h/jobs?group=g");
  CHECK(redis.names_job("redis://h/jobs?group=g"));
  CHECK(source_kind_of("a/*.mp4").names_job("a/*.mp4"));
  CHECK_FALSE(source_kind_of("a/x.mp4").names_job("a/x.mp4"));
  CHECK(default_source_name("alias://bars") == "alias-bars");
  CHECK(default_source_name("rtsp://user@cam.local:554/x") == "cam.local-554");
  CHECK_THROWS_WITH(redis.check("redis://h/jobs"), Catch::Contains("?group="));
}

TEST_CASE("source kinds: a test pattern that does not exist is refused with the file and at source-add", "[inputs]") {
  const SourceKind& testsrc = source_kind_of("testsrc:bogus");
  REQUIRE(testsrc.name == "testsrc");
  CHECK_THROWS_WITH(testsrc.check("testsrc:bogus"), Catch::Contains("unknown test pattern 'bogus' (testsrc:"));
  CHECK_NOTHROW(testsrc.check("testsrc:bars"));
  const std::string bad = "stages:\n  - kind: decode\n    uri: [\"testsrc:bogus\"]\n  - kind: sink\n    type: null\n";
  CHECK_THAT(sluice::test::config_error(bad), Catch::Contains("unknown test pattern 'bogus'"));
}

TEST_CASE("a kind registered beside its code runs a whole pipeline: expanded, named, checked", "[inputs][pipeline]") {
  const int before = g_alias_expansions;
  const std::string yaml =
      "stages:\n  - kind: decode\n    uri: [alias://gradient]\n    frames: 6\n    width: 32\n    height: 32\n"
      "  - kind: sink\n    type: null\n";
  PipelineSnapshot snapshot;
  const auto totals = sluice::test::run_to_end(sluice::test::plan_from(yaml), &snapshot);
  CHECK(totals.produced == 6);
  CHECK(totals.delivered == 6);
  CHECK(g_alias_expansions > before);
  // What the kind checks is checked with the file.
  const std::string bad = "stages:\n  - kind: decode\n    uri: [\"alias://\"]\n  - kind: sink\n    type: null\n";
  CHECK_THAT(sluice::test::config_error(bad), Catch::Contains("alias:// needs a pattern"));
}

TEST_CASE("the decoder choice is applied once, where readers open", "[inputs][reader]") {
  ReaderRegistry registry;
  int gpu_calls = 0;
  registry.add(InputKind::file, [](const std::string&, const ReaderOptions&) {
    return std::unique_ptr<FrameReader>(std::make_unique<NamedReader>("cpu"));
  });
  registry.add_gpu(InputKind::file, [&gpu_calls](const std::string& uri, const ReaderOptions&, std::string& why) {
    ++gpu_calls;
    if (uri.find("yes") != std::string::npos) return std::unique_ptr<FrameReader>(std::make_unique<NamedReader>("gpu"));
    why = "NVDEC unavailable: test";
    return std::unique_ptr<FrameReader>();
  });
  ReaderOptions options;
  std::string declined;
  CHECK(registry.open(InputKind::file, "yes.mp4", options)->info().backend == "gpu");
  CHECK(registry.open(InputKind::file, "no.mp4", options, &declined)->info().backend == "cpu");
  CHECK(declined == "NVDEC unavailable: test");
  options.decoder = DecoderChoice::gpu;
  CHECK(registry.open(InputKind::file, "yes.mp4", options)->info().backend == "gpu");
  CHECK_THROWS_WITH(registry.open(InputKind::file, "no.mp4", options),
                    Catch::Equals("'no.mp4': decoder: gpu, but NVDEC unavailable: test"));
  options.decoder = DecoderChoice::cpu;
  const int calls = gpu_calls;
  CHECK(registry.open(InputKind::file, "yes.mp4", options, &declined)->info().backend == "cpu");
  CHECK(declined == "decoder: cpu");
  CHECK(gpu_calls == calls);  // decoder: cpu never asks the GPU reader
  // A kind with only a GPU reader: declined, the reason is the error.
  registry.add_gpu(InputKind::image, [](const std::string&, const ReaderOptions&, std::string& why) {
    why = "nvJPEG unavailable: test";
    return std::unique_ptr<FrameReader>();
  });
  options.decoder = DecoderChoice::automatic;
  CHECK_THROWS_WITH(registry.open(InputKind::image, "a.jpg", options), Catch::Equals("'a.jpg': nvJPEG unavailable: test"));
  for (const DecoderChoice d : {DecoderChoice::automatic, DecoderChoice::gpu, DecoderChoice::cpu})
    CHECK(parse_decoder_choice(to_string(d)) == d);
  CHECK_FALSE(parse_decoder_choice("GPU"));
}
