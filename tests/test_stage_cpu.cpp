// Per-stage CPU time: the runner counts the CPU a stage's thread spends on each step, and what a ForkJoin crew's
// workers spend for it; the summary table and the snapshot show it. The stages here burn an exact amount of their
// thread's CPU clock (a loop until it advanced that much) or sleep, so that the checks hold on a loaded machine:
// CPU burned is counted whatever the wall time, and a sleeping stage's CPU stays far below its sleep.
#include <catch2/catch.hpp>

#include <chrono>
#include <latch>
#include <string>
#include <thread>

#include "pipeline_helpers.hpp"
#include "sleeper_stage.hpp"
#include "runtime/fork_join.hpp"
#include "runtime/stats.hpp"

using namespace sluice;
using namespace sluice::test;
using Catch::Matchers::Contains;

namespace {

constexpr std::int64_t kMs = 1'000'000;

// Spins until the calling thread's CPU clock advanced by `ns`.
void burn_cpu(std::int64_t ns) {
  const std::int64_t until = thread_cpu_ns() + ns;
  volatile std::uint64_t sink = 0;
  while (thread_cpu_ns() < until)
    for (int i = 0; i < 1000; ++i) sink = sink + static_cast<std::uint64_t>(i);
}

// Forwards its input after burning `ms` of its thread's CPU per batch.
class Burner final : public Stage {
 public:
  Burner(PayloadDesc d, int ms) : desc_(d), ms_(ms) {}
  PayloadDesc output() const override { return desc_; }
  bool forwards_input() const override { return true; }
  BatchLease process(Batch*, StageContext&) override {
    burn_cpu(ms_ * kMs);
    return {};
  }

 private:
  PayloadDesc desc_;
  int ms_;
};

// Forwards its input after a crew of 3 threads (its own included) burned `ms` each: one task per thread, held
// at a latch until all three run, so that the workers take two of them whatever the scheduling.
class CrewBurner final : public Stage {
 public:
  CrewBurner(PayloadDesc d, int ms) : desc_(d), ms_(ms) {}
  PayloadDesc output() const override { return desc_; }
  bool forwards_input() const override { return true; }
  BatchLease process(Batch*, StageContext& ctx) override {
    std::latch all_in(3);
    crew_.run(3, [&](std::size_t) {
      all_in.arrive_and_wait();
      burn_cpu(ms_ * kMs);
    });
    ctx.helper_cpu_ns = crew_.helpers_cpu_ns();
    return {};
  }

 private:
  PayloadDesc desc_;
  int ms_;
  ForkJoin crew_{3, "test-crew"};
};

// decode (16 frames of a test pattern, batches of 4) -> upload -> preprocess -> download -> null sink, with
// upload and download replaced.
PipelinePlan chain() {
  return plan_from(
      "name: cpu\ndevice: cpu\nbatch_size: 4\nbatch_timeout_ms: 1000\nstages:\n"
      "  - kind: decode\n    pattern: checkerboard\n    width: 64\n    height: 48\n    frames: 16\n"
      "  - kind: upload\n    name: first\n  - kind: preprocess\n    width: 32\n    height: 32\n"
      "  - kind: download\n    name: second\n  - kind: sink\n    type: \"null\"\n");
}

const StageSnapshot& stage(const PipelineSnapshot& s, const std::string& name) {
  for (const auto& st : s.stages)
    if (st.name == name) return st;
  FAIL("no stage " << name);
  return s.stages.front();
}

}  // namespace

TEST_CASE("a ForkJoin counts the CPU its workers spent in calls", "[stage_cpu]") {
  ForkJoin crew(3, "test-crew");
  const std::int64_t before = crew.helpers_cpu_ns();
  std::latch all_in(3);
  crew.run(3, [&](std::size_t) {
    all_in.arrive_and_wait();
    burn_cpu(20 * kMs);
  });
  // Two of the three tasks ran on workers (each thread holds one until all three started).
  CHECK(crew.helpers_cpu_ns() - before >= 40 * kMs);
  // A call the caller runs alone (one task) adds no worker time beyond their wake-ups, none here.
  const std::int64_t after = crew.helpers_cpu_ns();
  crew.run(1, [&](std::size_t) { burn_cpu(20 * kMs); });
  CHECK(crew.helpers_cpu_ns() - after < 20 * kMs);
}

TEST_CASE("the stage table counts each stage's CPU: a burning stage's, not a sleeping one's", "[stage_cpu]") {
  PipelinePlan plan = chain();
  plan.stages[1].stage = std::make_unique<Burner>(plan.stages[1].output, 10);
  plan.stages[3].stage = std::make_unique<Sleeper>(plan.stages[3].output, 40);
  PipelineSnapshot snap;
  const auto totals = run_to_end(std::move(plan), &snap);
  REQUIRE(totals.delivered == 16);
  const StageSnapshot& burner = stage(snap, "first");
  const StageSnapshot& sleeper = stage(snap, "second");
  REQUIRE(burner.batches >= 4);
  REQUIRE(sleeper.batches >= 4);
  CHECK(burner.cpu_ms_total >= 10.0 * static_cast<double>(burner.batches));
  CHECK(burner.cpu_ms_per_batch >= 10.0);
  // 40 ms asleep a batch: its CPU is the runner's bookkeeping, microseconds.
  CHECK(sleeper.cpu_ms_total < 0.25 * 40.0 * static_cast<double>(sleeper.batches));
  CHECK(sleeper.host_ms_per_batch >= 40.0);  // wall time includes the sleep: the columns differ
  const std::string summary = format_summary(snap);
  INFO(summary);
  CHECK_THAT(summary, Contains("host ms/b  cpu ms/b  gpu ms/b"));
  char burner_cpu[32];
  std::snprintf(burner_cpu, sizeof burner_cpu, " %9.3f ", burner.cpu_ms_per_batch);
  CHECK_THAT(summary, Contains(burner_cpu));
}

TEST_CASE("a stage's CPU includes what its crew's workers spent on its batches", "[stage_cpu]") {
  PipelinePlan plan = chain();
  plan.stages[1].stage = std::make_unique<CrewBurner>(plan.stages[1].output, 5);
  PipelineSnapshot snap;
  const auto totals = run_to_end(std::move(plan), &snap);
  REQUIRE(totals.delivered == 16);
  const StageSnapshot& crew = stage(snap, "first");
  REQUIRE(crew.batches >= 4);
  // Three threads burn 5 ms each a batch; the stage's own thread alone would account for 5.
  CHECK(crew.cpu_ms_total >= 15.0 * static_cast<double>(crew.batches));
}
