// testsrc:PATTERN as a source URI: the synthetic patterns through the same per-source machinery as files
// and cameras (sources added at run time, multi-source batches), with no media library needed. Registers its
// reader and its source kind.
#include <chrono>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/source_kind.hpp"
#include "runtime/stats.hpp"
#include "runtime/utf8.hpp"
#include "stages/testsrc.hpp"

namespace sluice {
namespace {

class TestPatternReader final : public FrameReader {
 public:
  TestPatternReader(const std::string& uri, TestPattern pattern, const ReaderOptions& options)
      : pattern_(pattern), options_(options) {
    info_.uri = uri;
    info_.kind = InputKind::testsrc;
    info_.frames_total = options.frames ? static_cast<std::int64_t>(options.frames) : -1;
    info_.fps = options.fps;
    info_.backend = "testsrc";
  }

  ReadStatus read(const FrameTarget& target, std::string&) override {
    if (options_.frames && next_ >= options_.frames) return ReadStatus::end;
    if (!renderer_) {
      renderer_.emplace(pattern_, target.pixel, target.width, target.height, options_.seed);
      start_ns_ = now_ns();
    }
    if (options_.fps > 0) {  // a camera's pace: frame n is due n/fps after the first
      const auto due = start_ns_ + static_cast<std::int64_t>(static_cast<double>(next_) * 1e9 / options_.fps);
      if (const std::int64_t wait = due - now_ns(); wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
    }
    if (options_.animate) {
      renderer_->render(next_, target.data);
    } else {
      // The same picture every frame: rendered once, then copied, the cost of a decoder handing over a frame.
      const std::size_t bytes = image_bytes(target.pixel, target.width, target.height);
      if (still_.size() != bytes) {
        still_.resize(bytes);
        renderer_->render(0, reinterpret_cast<std::byte*>(still_.data()));
      }
      std::memcpy(target.data, still_.data(), bytes);
    }
    ++next_;
    return ReadStatus::frame;
  }
  const InputInfo& info() const override { return info_; }

 private:
  TestPattern pattern_;
  ReaderOptions options_;
  InputInfo info_;
  std::optional<TestPatternRenderer> renderer_;
  std::vector<std::uint8_t> still_;  // animate: false
  std::int64_t start_ns_ = 0;
  std::uint64_t next_ = 0;
};

// The pattern a testsrc:PATTERN URI names; empty with `why` saying which patterns there are.
std::optional<TestPattern> pattern_of(const std::string& uri, std::string& why) {
  const std::string name = uri.substr(uri.find(':') + 1);
  const auto pattern = parse_test_pattern(name);
  if (!pattern) {
    std::string known;
    for (const char* p : kTestPatternNames) {
      if (!known.empty()) known += '|';
      known += p;
    }
    why = "'" + to_valid_utf8(uri) + "': unknown test pattern '" + to_valid_utf8(name) + "' (testsrc:" + known + ")";
  }
  return pattern;
}

void register_testsrc_reader(ReaderRegistry& readers) {
  readers.add(InputKind::testsrc, [](const std::string& uri, const ReaderOptions& options) {
    std::string why;
    const auto pattern = pattern_of(uri, why);
    if (!pattern) throw InputError(why);
    return std::unique_ptr<FrameReader>(std::make_unique<TestPatternReader>(uri, *pattern, options));
  });
}
SLUICE_REGISTER_READERS(register_testsrc_reader);

// testsrc:PATTERN: read by the reader above; endless unless `frames` is set.
SourceKind testsrc_source_kind() {
  SourceKind k;
  k.name = "testsrc";
  k.claims = [](std::string_view uri) { return starts_with_icase(uri, "testsrc:"); };
  k.reads_as = InputKind::testsrc;
  k.reach = SourceReach::anywhere;
  k.endless_without_frame_count = true;
  k.check = [](const std::string& uri) {  // at load and at source-add, not at the first frame
    std::string why;
    if (!pattern_of(uri, why)) throw std::invalid_argument(why);
  };
  k.default_name = [](const std::string& uri) { return "testsrc-" + sanitize_source_name(uri.substr(uri.find(':') + 1)); };
  return k;
}
SLUICE_REGISTER_SOURCE_KIND(testsrc_source_kind);

}  // namespace
}  // namespace sluice
