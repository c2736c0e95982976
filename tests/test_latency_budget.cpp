// Batching against a latency budget: the downstream estimate, the dispatch deadline, where a late frame's time
// went, and whole pipelines with a stage made slow on purpose. No timing is asserted: the sleeps and budgets are
// chosen so that the counts asserted hold however late the threads of a loaded machine wake.
#include <catch2/catch.hpp>

#include <chrono>
#include <limits>
#include <string>
#include <thread>

#include "pipeline_helpers.hpp"
#include "sleeper_stage.hpp"
#include "runtime/latency_budget.hpp"

using namespace sluice;
using namespace sluice::test;
using Catch::Matchers::Contains;

namespace {

constexpr std::int64_t kMs = 1'000'000;

// decode (direct test pattern) -> upload (made slow) -> preprocess -> download -> null sink.
std::string chain(double fps, int frames, int batch_timeout_ms, double budget_ms) {
  return "name: lb\ndevice: cpu\nbatch_size: 8\nbatch_timeout_ms: " + std::to_string(batch_timeout_ms) +
         "\nlatency_budget_ms: " + std::to_string(budget_ms) +
         "\nstages:\n  - kind: decode\n    pattern: checkerboard\n    width: 64\n    height: 48\n    fps: " +
         std::to_string(fps) + "\n    frames: " + std::to_string(frames) +
         "\n  - kind: upload\n    name: slow\n  - kind: preprocess\n    width: 32\n    height: 32\n"
         "  - kind: download\n  - kind: sink\n    type: \"null\"\n";
}

PipelineSnapshot run_with_slow_stage(const std::string& yaml, int sleep_ms) {
  PipelinePlan plan = plan_from(yaml);
  plan.stages[1].stage = std::make_unique<Sleeper>(plan.stages[1].output, sleep_ms);
  PipelineSnapshot snap;
  run_to_end(std::move(plan), &snap);
  return snap;
}

const StageSnapshot& stage(const PipelineSnapshot& s, const std::string& name) {
  for (const auto& st : s.stages)
    if (st.name == name) return st;
  FAIL("no stage " << name);
  return s.stages.front();
}

}  // namespace

TEST_CASE("the downstream estimate starts with a margin, settles near a steady time and rises after a spike",
          "[latency]") {
  DownstreamEstimate e;
  CHECK(e.ns() == 0);
  e.record(10 * kMs);
  CHECK(e.ns() == 30 * kMs);  // one sample: mean + 4 x half of it
  for (int i = 0; i < 100; ++i) e.record(10 * kMs);
  CHECK(e.ns() >= 10 * kMs);
  CHECK(e.ns() < 11 * kMs);  // the deviation has decayed
  const std::int64_t steady = e.ns();
  e.record(50 * kMs);
  CHECK(e.ns() > steady + 40 * kMs);  // a spike widens the margin at once
  e.record(-5);                       // a clock oddity counts as 0, never as a negative time
  CHECK(e.ns() > 0);
}

TEST_CASE("the dispatch deadline is capture + budget - downstream, none without a budget", "[latency]") {
  FrameMeta f;
  f.capture_ns = 1000 * kMs;
  CHECK(dispatch_deadline(f, 5 * kMs) == kNoDeadline);
  f.budget_ns = 40 * kMs;
  CHECK(dispatch_deadline(f, 15 * kMs) == 1025 * kMs);
  CHECK(dispatch_deadline(f, 0) == 1040 * kMs);
  CHECK(dispatch_deadline(f, 100 * kMs) == 940 * kMs);  // past already: the batch leaves with what it has
  CHECK_FALSE(is_late(f, 1040 * kMs));
  CHECK(is_late(f, 1040 * kMs + 1));
  f.budget_ns = 0;
  CHECK_FALSE(is_late(f, 99'000 * kMs));
}

TEST_CASE("a late frame's time is put on the stage with the largest share, queue wait before it included",
          "[latency]") {
  FrameMeta f;
  f.capture_ns = 100;
  std::array<std::int64_t, kMaxStages> done{};
  done[0] = 110;  // source: 10
  done[1] = 150;  // 40 (waited in the queue, then worked)
  done[2] = 160;  // 10
  done[3] = 165;  // sink: 5
  CHECK(dominant_stage(f, done, 4) == 1);
  done[3] = 300;  // the sink took 135
  CHECK(dominant_stage(f, done, 4) == 3);
  CHECK(dominant_stage(f, done, 2) == 1);  // only the stages asked about
}

TEST_CASE("latency_budget_ms: hostile values are refused naming the key and the file", "[latency][config]") {
  for (const char* bad : {"-1", ".nan", "nan", "1e300", "3600001", "[1, 2]", "fast", ".inf"}) {
    INFO(bad);
    const std::string yaml = std::string("latency_budget_ms: ") + bad +
                             "\nstages:\n  - kind: decode\n    frames: 1\n  - kind: sink\n    type: \"null\"\n";
    REQUIRE_THROWS_WITH(parse_pipeline(yaml, "cams.yaml"), Contains("cams.yaml:1:") && Contains("latency_budget_ms"));
  }
  const auto spec = parse_pipeline("latency_budget_ms: 25.5\nstages:\n  - kind: decode\n    frames: 1\n  - kind: sink\n"
                                   "    type: \"null\"\n", "ok.yaml");
  CHECK(spec.latency_budget_ns == 25'500'000);
  const auto plan = plan_pipeline(spec);
  CHECK_THAT(describe_plan(plan), Contains("latency budget of 25.5 ms"));
  CHECK_THAT(describe_plan(plan_from("stages:\n  - kind: decode\n    frames: 1\n  - kind: sink\n    type: \"null\"\n")),
             Contains("no latency budget"));
}

TEST_CASE("frames made late by a slow stage are delivered, counted late, and the slow stage is named", "[latency][pipeline]") {
  // 200 ms a batch against a 20 ms budget: every frame is late whatever the machine's load.
  const auto s = run_with_slow_stage(chain(0, 12, 10, 20), 200);
  CHECK(s.frames.produced == 12);
  CHECK(s.frames.delivered == 12);  // late is counted, never dropped
  CHECK(s.frames.dropped == 0);
  CHECK(s.frames.late == 12);
  CHECK(stage(s, "slow").late == 12);
  for (const auto& st : s.stages)
    if (st.name != "slow") CHECK(st.late == 0);
  REQUIRE(s.frames.sources.size() == 1);
  CHECK(s.frames.sources.begin()->second.late == 12);
  CHECK(s.downstream_ns >= 200 * kMs);  // the estimate learned the slow stage
  CHECK_THAT(format_summary(s), Contains("late: 12 delivered past their latency budget") && Contains("slow 12"));

  // The same run without a budget: nothing is late.
  const auto none = run_with_slow_stage(chain(0, 12, 10, 0), 200);
  CHECK(none.frames.delivered == 12);
  CHECK(none.frames.late == 0);
  CHECK(stage(none, "slow").late == 0);
}

TEST_CASE("under a budget the batcher sends partial batches, without one it waits for the full batch",
          "[latency][pipeline]") {
  // 20 frames/s (50 ms apart), batches of 8, a 60 s timeout: only a full batch (350 ms of frames) or the budget
  // ends a batch. With a 250 ms budget and a 60 ms stage, no batch can hold 8 frames: its first would be 350 ms
  // old when the last arrived.
  const auto budget = run_with_slow_stage(chain(20, 16, 60000, 250), 60);
  CHECK(budget.frames.delivered == 16);
  CHECK(stage(budget, "sink").batches > 2);
  const auto full = run_with_slow_stage(chain(20, 16, 60000, 0), 60);
  CHECK(full.frames.delivered == 16);
  CHECK(stage(full, "sink").batches == 2);  // two full batches of 8
}

namespace {

// Forwards its input; its warm-up sleeps and notes when it ended.
class SlowWarmUp final : public Stage {
 public:
  explicit SlowWarmUp(PayloadDesc d) : desc_(d) {}
  PayloadDesc output() const override { return desc_; }
  bool forwards_input() const override { return true; }
  std::string warm_up_plan() const override { return "sleeps 100 ms"; }
  void warm_up(StageContext&) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    warmed_at = now_ns();
  }
  BatchLease process(Batch*, StageContext&) override { return {}; }
  std::atomic<std::int64_t> warmed_at{0};

 private:
  PayloadDesc desc_;
};

// Forwards its input and notes the earliest capture time it saw.
class FirstCapture final : public Stage {
 public:
  explicit FirstCapture(PayloadDesc d) : desc_(d) {}
  PayloadDesc output() const override { return desc_; }
  bool forwards_input() const override { return true; }
  BatchLease process(Batch* in, StageContext&) override {
    for (const auto& f : in->frames) first = std::min(first.load(), f.capture_ns);
    return {};
  }
  std::atomic<std::int64_t> first{std::numeric_limits<std::int64_t>::max()};

 private:
  PayloadDesc desc_;
};

}  // namespace

TEST_CASE("stages warm up before the source opens: no frame is captured before the warm-up ended", "[latency][warmup]") {
  for (const char* execution : {"pipelined", "serial"}) {
    INFO(execution);
    std::string yaml = chain(0, 16, 10, 0);
    yaml.insert(yaml.find("device:"), std::string("execution: ") + execution + "\n");
    PipelinePlan plan = plan_from(yaml);
    auto warm = std::make_unique<SlowWarmUp>(plan.stages[1].output);
    auto probe = std::make_unique<FirstCapture>(plan.stages[3].output);
    SlowWarmUp* warm_stage = warm.get();
    FirstCapture* probe_stage = probe.get();
    plan.stages[1].stage = std::move(warm);
    plan.stages[3].stage = std::move(probe);
    CHECK_THAT(describe_plan(plan), Contains("slow: sleeps 100 ms"));
    Pipeline p(std::move(plan));
    p.start();  // returns once warm
    CHECK(p.warm());
    const std::int64_t warmed_at = warm_stage->warmed_at.load();
    CHECK(warmed_at > 0);
    p.wait();
    const auto s = p.snapshot();
    CHECK(s.frames.delivered == 16);
    CHECK(s.warmup_ns >= 100 * kMs);
    CHECK(probe_stage->first.load() >= warmed_at);  // the first frame's latency clock started after the warm-up
    CHECK_THAT(format_summary(s), Contains("warm-up: "));
  }
}

TEST_CASE("the CPU infer stage prepares every batch size before frames flow", "[latency][warmup]") {
  PipelineSpec spec = load_pipeline(source_dir() + "/config/pipelines/default.yaml");
  spec.device = DeviceChoice::cpu;
  spec.stages.back().params.set("type", std::string("null"), true);
  PipelinePlan plan = plan_pipeline(spec);
  CHECK_THAT(describe_plan(plan), Contains("infer: the CPU engine for each batch size 1..8, one zero batch through each"));
  REQUIRE(plan.stages[4].kind == "download");
  auto probe = std::make_unique<FirstCapture>(plan.stages[4].output);
  FirstCapture* first = probe.get();
  plan.stages[4].stage = std::move(probe);
  const std::int64_t t0 = now_ns();
  Pipeline p(std::move(plan));
  p.start();
  p.wait();
  const auto s = p.snapshot();
  CHECK(s.frames.delivered == 64);
  CHECK(s.warmup_ns > 0);
  // The warm-up began after t0 and ended before the source opened: no frame was captured within it, so no
  // frame's latency holds any of it.
  CHECK(first->first.load() >= t0 + s.warmup_ns);
}

TEST_CASE("a stage whose warm-up fails is reported, and the source never opens", "[latency][warmup]") {
  class FailingWarmUp final : public Stage {
   public:
    explicit FailingWarmUp(PayloadDesc d) : desc_(d) {}
    PayloadDesc output() const override { return desc_; }
    bool forwards_input() const override { return true; }
    std::string warm_up_plan() const override { return "fails"; }
    void warm_up(StageContext&) override { throw std::runtime_error("no engine today"); }
    BatchLease process(Batch*, StageContext&) override { return {}; }

   private:
    PayloadDesc desc_;
  };
  PipelinePlan plan = plan_from(chain(0, 16, 10, 0));
  plan.stages[1].stage = std::make_unique<FailingWarmUp>(plan.stages[1].output);
  Pipeline p(std::move(plan));
  p.begin_warm_up();
  p.wait_warm();
  CHECK_THAT(p.warm_error(), Contains("stage 'slow': no engine today"));
  p.request_stop();  // what a refused reload does: the source never opened, nothing was produced
  p.wait();
  CHECK(p.ledger().totals().produced == 0);
}
