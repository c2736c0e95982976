// decode: the pipeline's source. Frames are written straight into the batch's (pinned) memory and grouped
// into batches of batch_size, or fewer when the next frame would miss batch_timeout.
#include <chrono>
#include <optional>
#include <thread>

#include "runtime/errors.hpp"
#include "runtime/stats.hpp"
#include "stages/builtin.hpp"
#include "stages/testsrc.hpp"

namespace sluice {
namespace {

class TestSourceStage final : public Stage {
 public:
  explicit TestSourceStage(const StageInit& init)
      : pattern_(*parse_test_pattern(init.params.string("pattern"))),
        source_id_(static_cast<std::uint32_t>(init.params.integer("source_id"))),
        seed_(static_cast<std::uint64_t>(init.params.integer("seed"))),
        fps_(init.params.number("fps")),
        frames_(static_cast<std::uint64_t>(init.params.integer("frames"))),
        animate_(init.params.boolean("animate")),
        batch_timeout_ns_(init.batch_timeout_us * 1000) {
    desc_.kind = PayloadKind::frames;
    desc_.memory = init.device == Device::cuda ? MemoryKind::pinned : MemoryKind::host;
    desc_.batch = init.batch_size;
    desc_.width = static_cast<int>(init.params.integer("width"));
    desc_.height = static_cast<int>(init.params.integer("height"));
    desc_.pixel = *parse_pixel_format(init.params.string("format"));
    const bool subsampled = desc_.pixel == PixelFormat::nv12 || desc_.pixel == PixelFormat::i420;
    if (subsampled && (desc_.width % 2 || desc_.height % 2))
      throw ConfigError("format " + std::string(to_string(desc_.pixel)) + " needs an even width and height, got " +
                        std::to_string(desc_.width) + "x" + std::to_string(desc_.height));
  }

  PayloadDesc output() const override { return desc_; }

  void open(StageContext& ctx) override {
    renderer_.emplace(pattern_, desc_.pixel, desc_.width, desc_.height, seed_);
    rendered_.assign(static_cast<std::size_t>(ctx.out_pool->slots() * desc_.batch), false);
    start_ns_ = now_ns();
  }

  BatchLease process(Batch*, StageContext& ctx) override {
    if ((frames_ && next_ >= frames_) || ctx.stopping()) return {};
    BatchLease batch = ctx.acquire();
    if (!batch) return {};
    std::int64_t first_due = 0;
    while (batch->count < desc_.batch && !(frames_ && next_ >= frames_) && !ctx.stopping()) {
      std::int64_t due = due_ns(next_);
      if (fps_ > 0 && now_ns() - due > kMaxLateNs) {
        // Far behind schedule (the pipeline was paused, or the source stalled): a live source does not
        // replay what it missed, it continues from now.
        start_ns_ = now_ns() - static_cast<std::int64_t>(static_cast<double>(next_) * 1e9 / fps_);
        due = due_ns(next_);
      }
      if (batch->count > 0 && due - first_due > batch_timeout_ns_) break;  // the partial batch leaves now
      if (batch->count == 0) first_due = due;
      wait_until(due, ctx);
      if (ctx.stopping()) break;
      if (animate_) {
        renderer_->render(next_, batch->item(batch->count));
      } else {
        // The picture stays in the slot across reuse: render it the first time only.
        const std::size_t item = batch->slot * static_cast<std::size_t>(desc_.batch) + static_cast<std::size_t>(batch->count);
        if (!rendered_[item]) renderer_->render(0, batch->item(batch->count));
        rendered_[item] = true;
      }
      FrameMeta meta;
      meta.source_id = source_id_;
      meta.sequence = next_;
      meta.pts_ns = static_cast<std::int64_t>(static_cast<double>(next_) * 1e9 / (fps_ > 0 ? fps_ : 30.0));
      meta.capture_ns = now_ns();
      batch->frames.push_back(meta);
      ++batch->count;
      ++next_;
    }
    if (batch->count == 0) return {};
    return batch;
  }

 private:
  std::int64_t due_ns(std::uint64_t index) const {
    return fps_ > 0 ? start_ns_ + static_cast<std::int64_t>(static_cast<double>(index) * 1e9 / fps_) : 0;
  }
  // Sleeps in short slices so a stop request is seen promptly even at low rates.
  static void wait_until(std::int64_t due, StageContext& ctx) {
    const std::int64_t start = now_ns();
    for (std::int64_t now = start; now < due && !ctx.stopping(); now = now_ns())
      std::this_thread::sleep_for(std::chrono::nanoseconds(std::min<std::int64_t>(due - now, 50'000'000)));
    ctx.pacing_wait_ns += now_ns() - start;
  }

  static constexpr std::int64_t kMaxLateNs = 1'000'000'000;
  TestPattern pattern_;
  std::uint32_t source_id_;
  std::uint64_t seed_;
  double fps_;
  std::uint64_t frames_;
  bool animate_;
  std::int64_t batch_timeout_ns_;
  std::vector<bool> rendered_;  // animate: false: which pool slot items already hold the picture
  PayloadDesc desc_;
  std::optional<TestPatternRenderer> renderer_;
  std::int64_t start_ns_ = 0;
  std::uint64_t next_ = 0;
};

std::vector<std::string> pattern_choices() { return {std::begin(kTestPatternNames), std::end(kTestPatternNames)}; }

}  // namespace

StageInfo decode_stage() {
  return {"decode",
          StageRole::source,
          "frame source; writes frames straight into pinned batch memory",
          {
              {"source", ParamType::choice, "testsrc", "where frames come from; testsrc: synthetic patterns", {}, {},
               {"testsrc"}},
              {"pattern", ParamType::choice, "bars", "testsrc picture", {}, {}, pattern_choices()},
              {"width", ParamType::integer, "1920", "frame width in pixels", 16.0, 8192.0},
              {"height", ParamType::integer, "1080", "frame height in pixels", 16.0, 8192.0},
              {"format", ParamType::choice, "bgr8", "pixel format of the frames (nv12/i420: BT.601 limited range)", {}, {},
               {"bgr8", "rgb8", "gray8", "nv12", "i420"}},
              {"fps", ParamType::number, "0", "frame rate; 0 = as fast as possible", 0.0, 10000.0},
              {"frames", ParamType::integer, "0", "frames to produce; 0 = endless (until stopped)", 0.0, {}},
              {"source_id", ParamType::integer, "0", "id stamped on every frame of this source", 0.0, 65535.0},
              {"seed", ParamType::integer, "1", "seed of the noise pattern", 0.0, {}},
              {"animate", ParamType::boolean, "true",
               "false: every frame is the first picture, rendered once per pool slot, so the source costs "
               "nothing (to measure the GPU path alone)"},
          },
          [](const StageInit& init) -> std::unique_ptr<Stage> { return std::make_unique<TestSourceStage>(init); }};
}

}  // namespace sluice
