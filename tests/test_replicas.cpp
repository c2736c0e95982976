// Replicas of the GPU stages (`gpus:`) on the CPU path: two replicas exercise the dispatch, the merge back into the
// source's order, per-replica statistics, and a replica going down, as two GPUs would.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <set>
#include <unistd.h>

#include "pipeline_helpers.hpp"

using namespace sluice;
using namespace sluice::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

fs::path out_file(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("sluice-replicas-" + name + "-" + std::to_string(::getpid()) + ".jsonl");
  fs::remove(p);
  return p;
}

// Four testsrc sources -> upload -> preprocess -> download -> jsonl, with `top` (gpus:, ...) at the top level and
// `preprocess_extra` in the preprocess stage (its queue settings).
std::string replica_yaml(const std::string& top, int frames, const fs::path& jsonl, const std::string& preprocess_extra = "") {
  return "name: r\ndevice: cpu\nbatch_size: 4\nbatch_timeout_ms: 5\n" + top +
         "stages:\n"
         "  - kind: decode\n    uri: [testsrc:bars, testsrc:shapes, testsrc:gradient, testsrc:checkerboard]\n"
         "    width: 64\n    height: 48\n    frames: " + std::to_string(frames) +
         "\n  - kind: upload\n"
         "  - kind: preprocess\n    width: 32\n    height: 32\n" + preprocess_extra +
         "  - kind: download\n"
         "  - kind: sink\n    type: jsonl\n    path: " + jsonl.string() + "\n";
}

// The records without what differs from run to run (times).
std::vector<nlohmann::json> comparable(const fs::path& jsonl) {
  std::vector<nlohmann::json> out;
  for (auto j : read_jsonl(jsonl.string())) {
    for (const char* key : {"latency_ms", "stage_ms", "time", "wall_ns", "capture_ns"}) j.erase(key);
    out.push_back(std::move(j));
  }
  return out;
}

// Each source's records arrive in its frame order, each frame once.
void require_in_source_order(const std::vector<nlohmann::json>& records) {
  std::map<std::string, std::int64_t> last;
  for (const auto& r : records) {
    const std::string source = r.at("source").dump();
    const auto seq = r.at("sequence").get<std::int64_t>();
    auto it = last.find(source);
    if (it != last.end()) REQUIRE(seq > it->second);
    last[source] = seq;
  }
}

// Frames each replica's stages handled (stage index -> replica), summed over the replica's first stage.
std::map<int, std::uint64_t> frames_by_replica(const PipelinePlan& plan, const PipelineSnapshot& s) {
  std::map<int, std::uint64_t> out;
  for (std::size_t i = 0; i < s.stages.size(); ++i)
    if (plan.stages[i].replica >= 0 && plan.stages[i].upstream == 0) out[plan.stages[i].replica] += s.stages[i].frames;
  return out;
}

// A stage that cannot open (its GPU was gone when the replica started).
class FailingOpen final : public Stage {
 public:
  explicit FailingOpen(PayloadDesc d) : desc_(d) {}
  PayloadDesc output() const override { return desc_; }
  bool forwards_input() const override { return true; }
  void open(StageContext&) override { throw GpuFault("cudaSetDevice failed: cudaErrorDevicesUnavailable (injected)"); }
  BatchLease process(Batch*, StageContext&) override { return {}; }

 private:
  PayloadDesc desc_;
};

}  // namespace

TEST_CASE("replicas: gpus parses - check shows each replica and the merge - refusals name the reason", "[replicas][config]") {
  const fs::path out = out_file("config");
  const PipelinePlan plan = plan_from(replica_yaml("gpus: [0, 0, 0]\n", 8, out));
  REQUIRE(plan.replica_gpus == std::vector<int>{0, 0, 0});
  REQUIRE(plan.replica_length == 3);  // upload, preprocess, download
  REQUIRE(plan.stages.size() == 1 + 3 * 3 + 1);
  for (int r = 0; r < 3; ++r) {
    const std::size_t first = 1 + static_cast<std::size_t>(r) * 3;
    REQUIRE(plan.stages[first].name == "upload");
    REQUIRE(plan.stages[first].upstream == 0);
    REQUIRE(plan.stages[first + 1].upstream == static_cast<int>(first));
    REQUIRE(plan.stages[first + 2].name == "download");
    for (std::size_t k = 0; k < 3; ++k) REQUIRE(plan.stages[first + k].replica == r);
  }
  REQUIRE(plan.stages.back().replica == -1);
  const std::string text = describe_plan(plan);
  REQUIRE_THAT(text, Contains("3 replicas (gpus 0, 0, 0)"));
  REQUIRE_THAT(text, Contains("replica 3 of 3"));
  REQUIRE_THAT(text, Contains("in the order the source made them"));

  // One entry, or `all` without a GPU: one chain, no replicas.
  REQUIRE(plan_from(replica_yaml("gpus: [0]\n", 8, out)).replica_gpus.empty());
  REQUIRE(plan_from(replica_yaml("gpus: all\n", 8, out)).replica_gpus.empty());
  REQUIRE_THAT(config_error(replica_yaml("gpus: [0, x]\n", 8, out)), Contains("gpus: 'x' is not a CUDA device index"));
  REQUIRE_THAT(config_error(replica_yaml("gpus: [0, 64]\n", 8, out)), Contains("gpus: '64'"));
  REQUIRE_THAT(config_error(replica_yaml("gpus: [0, 0, 0, 0, 0, 0, 0, 0, 0]\n", 8, out)), Contains("at most 8"));
  REQUIRE_THAT(config_error(replica_yaml("gpus: [0, 0]\nexecution: serial\n", 8, out)),
               Contains("replicas need execution: pipelined"));
}

TEST_CASE("replicas: the stages up to a tracker are replicated - the tracker runs once behind them", "[replicas][config]") {
  const fs::path out = out_file("track");
  const std::string yaml =
      "name: r\ndevice: cpu\ngpus: [0, 0]\nstages:\n"
      "  - kind: decode\n    pattern: shapes\n    width: 64\n    height: 48\n    frames: 4\n"
      "  - kind: track\n"
      "  - kind: sink\n    type: jsonl\n    path: " + out.string() + "\n";
  // Nothing lies between the source and the tracker: nothing to replicate.
  REQUIRE_THAT(config_error(yaml), Contains("no stage lies between the source and it"));
}

TEST_CASE("replicas: two replicas deliver every frame once, in each source's order, as one chain does", "[replicas][pipeline]") {
  const fs::path one = out_file("one"), two = out_file("two");
  const int frames = 40;  // per source
  PipelineSnapshot single, replicated;
  const auto totals_one = run_to_end(plan_from(replica_yaml("", frames, one)), &single);
  PipelinePlan plan = plan_from(replica_yaml("gpus: [0, 0]\n", frames, two));
  std::vector<int> replica_of, upstream_of;  // the plan moves into the runner
  for (const auto& ps : plan.stages) replica_of.push_back(ps.replica), upstream_of.push_back(ps.upstream);
  const auto totals = run_to_end(std::move(plan), &replicated);
  REQUIRE(totals_one.delivered == 4u * frames);
  REQUIRE(totals.produced == 4u * frames);
  REQUIRE(totals.delivered == totals.produced);
  REQUIRE(totals.failed == 0);
  REQUIRE(totals.dropped == 0);
  // Per-replica statistics: each replica took a share, together every frame.
  std::uint64_t sum = 0;
  std::set<int> replicas_with_frames;
  for (std::size_t i = 0; i < replicated.stages.size(); ++i) {
    REQUIRE(replicated.stages[i].replica == replica_of[i]);
    if (replica_of[i] >= 0 && upstream_of[i] == 0) {
      sum += replicated.stages[i].frames;
      if (replicated.stages[i].frames > 0) replicas_with_frames.insert(replica_of[i]);
    }
  }
  REQUIRE(sum == totals.produced);
  REQUIRE(replicas_with_frames.size() == 2);
  REQUIRE_THAT(format_summary(replicated), Contains("preprocess@2"));
  // The sink saw what one chain gives it: per source, record for record, in the same order (how the sources'
  // frames interleave into batches differs from run to run, with or without replicas).
  const auto by_source = [](const std::vector<nlohmann::json>& records) {
    std::map<std::string, std::vector<nlohmann::json>> out;
    for (const auto& r : records) out[r.at("source_name").get<std::string>()].push_back(r);
    return out;
  };
  const auto b = comparable(two);
  REQUIRE(b.size() == 4u * frames);
  REQUIRE(by_source(comparable(one)) == by_source(b));
  require_in_source_order(b);
}

TEST_CASE("replicas: a replica whose GPU faults goes down - its frames fail named - the other takes the rest", "[replicas][pipeline][fault]") {
  const fs::path out = out_file("fault");
  const int frames = 60;
  PipelinePlan plan = plan_from(replica_yaml("gpus: [0, 0]\n", frames, out));
  inject_fault(plan, stage_of(plan, "download", 1), 3);
  const std::size_t survivor = stage_of(plan, "upload", 0), doomed = stage_of(plan, "upload", 1);
  PipelineSnapshot s;
  const auto totals = run_to_end(std::move(plan), &s);
  REQUIRE(totals.produced == 4u * frames);
  REQUIRE(totals.delivered + totals.failed == totals.produced);  // nothing lost, nothing in flight
  REQUIRE(totals.failed > 0);
  REQUIRE(totals.delivered > totals.produced / 2);  // the survivor took over
  bool named = false;
  for (const auto& e : totals.errors) named = named || e.find("cudaErrorECCUncorrectable") != std::string::npos;
  REQUIRE(named);
  REQUIRE_THAT(s.stages[doomed].down, Contains("replica 2 is down after"));
  REQUIRE(s.stages[survivor].down.empty());
  REQUIRE(s.stages[survivor].frames > s.stages[doomed].frames);
  REQUIRE_THAT(format_summary(s), Contains("replica 2 is down after"));
  const auto records = comparable(out);
  REQUIRE(records.size() == totals.delivered);
  require_in_source_order(records);
}

TEST_CASE("replicas: a replica that cannot open is down from the start - every frame goes through the other", "[replicas][pipeline][fault]") {
  const fs::path out = out_file("open");
  PipelinePlan plan = plan_from(replica_yaml("gpus: [0, 0]\n", 30, out));
  const std::size_t broken = stage_of(plan, "download", 0), other = stage_of(plan, "upload", 1);
  plan.stages[broken].stage = std::make_unique<FailingOpen>(plan.stages[broken].output);
  PipelineSnapshot s;
  const auto totals = run_to_end(std::move(plan), &s);
  REQUIRE(totals.produced == 120);
  REQUIRE(totals.delivered + totals.failed == totals.produced);
  // Batches handed to it before it was known down fail; every other frame went through replica 2.
  REQUIRE(totals.delivered > 0);
  REQUIRE(s.stages[other].frames == totals.delivered);
  REQUIRE_THAT(s.stages[broken].down, Contains("cudaErrorDevicesUnavailable"));
  require_in_source_order(comparable(out));
}

TEST_CASE("replicas: every replica down - the source's frames fail with the reason and the run ends", "[replicas][pipeline][fault]") {
  const fs::path out = out_file("all-down");
  PipelinePlan plan = plan_from(replica_yaml("gpus: [0, 0]\n", 20, out));
  for (int r = 0; r < 2; ++r) inject_fault(plan, stage_of(plan, "download", r), 1);
  const auto totals = run_to_end(std::move(plan));
  REQUIRE(totals.produced == 80);
  REQUIRE(totals.failed == totals.produced - totals.delivered);
  REQUIRE(totals.delivered == 0);
  bool every = false;
  for (const auto& e : totals.errors) every = every || e.find("every replica is down") != std::string::npos;
  REQUIRE(every);
}

TEST_CASE("replicas: a leaky queue inside a replica drops batches - the merge skips them and nothing waits", "[replicas][pipeline]") {
  const fs::path out = out_file("leaky");
  PipelinePlan plan = plan_from(replica_yaml("gpus: [0, 0]\n", 60, out, "    queue_depth: 1\n    leaky: oldest\n"));
  const std::size_t slow = stage_of(plan, "download", 0);  // behind the leaky queue after preprocess
  plan.stages[slow].stage = std::make_unique<SlowForward>(plan.stages[slow].output);
  PipelineSnapshot s;
  const auto totals = run_to_end(std::move(plan), &s);
  REQUIRE(totals.produced == 240);
  REQUIRE(totals.delivered + totals.dropped == totals.produced);
  REQUIRE(totals.dropped > 0);
  require_in_source_order(comparable(out));
}

TEST_CASE("replicas: a slow replica gets fewer batches - its batches still reach the sink in the source's order", "[replicas][pipeline]") {
  const fs::path out = out_file("slow");
  PipelinePlan plan = plan_from(replica_yaml("gpus: [0, 0]\n", 40, out));
  const std::size_t slow = stage_of(plan, "download", 0), slow_first = stage_of(plan, "upload", 0),
                    fast_first = stage_of(plan, "upload", 1);
  plan.stages[slow].stage = std::make_unique<SlowForward>(plan.stages[slow].output);
  PipelineSnapshot s;
  const auto totals = run_to_end(std::move(plan), &s);
  REQUIRE(totals.delivered == 160);
  REQUIRE(s.stages[slow_first].frames > 0);  // it took batches, which the fast one overtook ...
  REQUIRE(s.stages[fast_first].frames > s.stages[slow_first].frames);  // ... and the fast one took more
  require_in_source_order(comparable(out));  // ... yet nothing arrived out of order
}
