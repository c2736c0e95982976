// A tee: one stage's output to several branches, each ending in a sink (config, `check`, fates, pools).
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "pipeline_helpers.hpp"
#include "runtime/pool.hpp"

using namespace sluice;
using namespace sluice::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// decode -> upload -> preprocess -> tee, then BRANCHES (the tee's `branches:` entries, indented 6).
std::string tee_yaml(int frames, const std::string& branches, const std::string& top = "") {
  return "name: tee\ndevice: cpu\nbatch_size: 8\n" + top +
         "stages:\n"
         "  - kind: decode\n    pattern: shapes\n    width: 64\n    height: 48\n    frames: " + std::to_string(frames) +
         "\n  - kind: upload\n  - kind: preprocess\n    width: 32\n    height: 32\n"
         "  - kind: tee\n    name: split\n    branches:\n" + branches;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("sluice-tee-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Sequence numbers of a jsonl file's records: each must appear once.
std::multiset<std::uint64_t> sequences(const fs::path& file) {
  std::multiset<std::uint64_t> out;
  for (const auto& j : read_jsonl(file.string())) out.insert(j.at("sequence").get<std::uint64_t>());
  return out;
}

std::multiset<std::uint64_t> all_of(int n) {
  std::multiset<std::uint64_t> out;
  for (int i = 0; i < n; ++i) out.insert(static_cast<std::uint64_t>(i));
  return out;
}

// Rows in every .npy file of `dir` (the first number of each header's shape: records too, which nn::read_npy
// does not read).
std::int64_t npy_rows(const fs::path& dir) {
  std::int64_t rows = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".npy") continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::string header(256, '\0');
    in.read(header.data(), static_cast<std::streamsize>(header.size()));
    const auto at = header.find("'shape': (");
    REQUIRE(at != std::string::npos);
    rows += std::stoll(header.substr(at + 10));
  }
  return rows;
}

std::size_t stage_index(const PipelinePlan& plan, const std::string& name) {
  for (std::size_t i = 0; i < plan.stages.size(); ++i)
    if (plan.stages[i].name == name) return i;
  FAIL("no stage " << name);
  return 0;
}

// Runs to the end within a minute (a liveness bound: a batch share never given back would block the source).
FrameLedger::Totals run_bounded(PipelinePlan plan, PipelineSnapshot* snap = nullptr) {
  Pipeline p(std::move(plan));
  p.start();
  for (int i = 0; i < 60'000 && !p.finished(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!p.finished()) {
    p.request_stop();
    FAIL("the pipeline did not finish within a minute (a leaked batch share?)");
  }
  p.wait();
  if (snap) *snap = p.snapshot();
  return p.ledger().totals();
}

}  // namespace

TEST_CASE("tee: branches parse into a flat list with their queues - check prints the graph", "[tee][config]") {
  const std::string yaml = tee_yaml(8,
                                    "      - - kind: sink\n          name: a\n          type: \"null\"\n"
                                    "      - leaky: oldest\n        queue_depth: 2\n        stages:\n"
                                    "          - kind: download\n          - kind: sink\n            name: b\n            type: \"null\"\n");
  const PipelineSpec spec = parse_pipeline(yaml, "t.yaml");
  REQUIRE(spec.tee == 3);
  REQUIRE(spec.stages.size() == 7);
  REQUIRE(spec.branches.size() == 2);
  CHECK(spec.branches[0].first == 4);
  CHECK(spec.branches[0].count == 1);
  CHECK(spec.branches[0].queue_policy == QueuePolicy::block);
  CHECK(spec.branches[1].first == 5);
  CHECK(spec.branches[1].count == 2);
  CHECK(spec.branches[1].queue_depth == 2);
  CHECK(spec.branches[1].queue_policy == QueuePolicy::leaky_oldest);
  CHECK(spec.stages[5].branch == 1);
  CHECK(spec.stages[2].branch == -1);

  const PipelinePlan plan = plan_pipeline(spec);
  CHECK(plan.stages[6].upstream == 5);
  CHECK(plan.stages[5].upstream == 3);  // a branch's first stage is fed by the tee
  CHECK(plan.stages[4].upstream == 3);
  CHECK(plan.stages[5].position == 4);  // its place on its own path: after the tee
  CHECK(plan.stages[4].position == 4);
  const std::string text = describe_plan(plan);
  CHECK_THAT(text, Contains("4. split (tee") && Contains("feeds 2 branches: 'a' (branch 1), 'download' (branch 2)"));
  CHECK_THAT(text, Contains("branch 1 of 'split' (stages 5-5, ending in 'a'), fed by a queue: depth 4, blocking"));
  CHECK_THAT(text, Contains("branch 2 of 'split' (stages 6-7, ending in 'b'), fed by a queue: depth 2, leaky: oldest"));
  CHECK_THAT(text, Contains("      7. b (sink"));
}

TEST_CASE("tee: configuration errors name the file, the line and what is wrong", "[tee][config]") {
  const std::string sink_a = "      - - kind: sink\n          name: a\n";
  const std::string sink_b = "      - - kind: sink\n          name: b\n";
  // One branch.
  CHECK_THAT(config_error(tee_yaml(8, sink_a)),
             Contains("test.yaml:17:7:") && Contains("a tee needs at least two branches, got 1"));
  // No branches.
  CHECK_THAT(config_error(tee_yaml(8, "").substr(0, tee_yaml(8, "").size() - 14) + "\n"),
             Contains("test.yaml:") && Contains("missing 'branches'"));
  // A branch that does not end in a sink.
  CHECK_THAT(config_error(tee_yaml(8, sink_a + "      - - kind: download\n")),
             Contains("test.yaml:19:") && Contains("stage 'download' (download): is the last stage of branch 2 of tee "
                                                   "'split' but is a transform (every branch ends in a sink)"));
  // A sink before the end of its branch.
  CHECK_THAT(config_error(tee_yaml(8, sink_a + "      - - kind: sink\n          name: b\n        - kind: download\n")),
             Contains("test.yaml:19:") && Contains("stage 'b' (sink): is a sink before the end of branch 2"));
  // A name used in two branches (or in the trunk and a branch).
  CHECK_THAT(config_error(tee_yaml(8, sink_a + sink_a)),
             Contains("test.yaml:19:") && Contains("stage name 'a' is used twice (names are unique across the trunk "
                                                   "and every branch of a tee"));
  CHECK_THAT(config_error(tee_yaml(8, sink_a + "      - - kind: upload\n        - kind: sink\n          name: b\n")),
             Contains("stage name 'upload' is used twice"));
  // A stage after the tee in the trunk.
  CHECK_THAT(config_error(tee_yaml(8, sink_a + sink_b) + "  - kind: sink\n    name: c\n"),
             Contains("test.yaml:21:5:") && Contains("follows the tee 'split': a tee is the trunk's last stage"));
  // A tee in a branch.
  CHECK_THAT(config_error(tee_yaml(8, sink_a + "      - - kind: tee\n          branches: []\n")),
             Contains("test.yaml:19:") && Contains("a tee inside a branch is not supported"));
  // A branch whose input does not fit: preprocess takes frames, the tee hands on preprocess's tensor.
  CHECK_THAT(config_error(tee_yaml(8, sink_a + "      - - kind: preprocess\n          name: p2\n"
                                               "          width: 16\n          height: 16\n"
                                               "        - kind: sink\n          name: b\n")),
             Contains("test.yaml:19:11: stage 'p2' (preprocess): takes frames, got tensor f32 nchw 3x32x32"));
  // Unknown key in a branch mapping; a branch that is not a list.
  CHECK_THAT(config_error(tee_yaml(8, sink_a + "      - leak: oldest\n        stages:\n          - kind: sink\n")),
             Contains("test.yaml:19:") && Contains("branch 2: unknown key 'leak' (valid: stages, queue_depth, leaky)"));
  CHECK_THAT(config_error(tee_yaml(8, sink_a + "      - leaky: oldest\n")),
             Contains("test.yaml:19:") && Contains("branch 2: missing 'stages'"));
  // A source inside a branch; a sink in the trunk before the tee; serial execution.
  CHECK_THAT(config_error(tee_yaml(8, sink_a + "      - - kind: decode\n          name: d2\n        - kind: sink\n"
                                               "          name: b\n")),
             Contains("test.yaml:19:") && Contains("is a source, which cannot be in branch 2"));
  CHECK_THAT(config_error(tee_yaml(8, sink_a + sink_b, "execution: serial\n")),
             Contains("stage 'split' (tee): a tee needs execution: pipelined"));
}

TEST_CASE("tee: three sinks each get every frame once - the ledger counts each frame once", "[tee][pipeline]") {
  const fs::path dir = fresh_dir("three");
  const std::string yaml =
      tee_yaml(101,
               "      - - kind: download\n          name: dl1\n"
               "        - kind: sink\n          name: records\n          type: jsonl\n          path: " + (dir / "a.jsonl").string() + "\n"
               "      - - kind: sink\n          name: scores\n          type: npy\n          path: " + (dir / "npy").string() + "\n"
               "      - queue_depth: 1\n        stages:\n"
               "          - kind: sink\n            name: copy\n            type: jsonl\n            path: " + (dir / "b.jsonl").string() + "\n");
  PipelineSnapshot snap;
  const auto t = run_bounded(plan_from(yaml), &snap);
  CHECK(t.produced == 101);
  CHECK(t.delivered == 101);  // once per frame, not once per branch
  CHECK(t.dropped == 0);
  CHECK(t.failed == 0);
  CHECK(t.in_flight() == 0);
  CHECK(sequences(dir / "a.jsonl") == all_of(101));
  CHECK(sequences(dir / "b.jsonl") == all_of(101));
  CHECK(npy_rows(dir / "npy") == 101);
  std::map<std::string, std::uint64_t> frames;
  for (const auto& st : snap.stages) frames[st.name] = st.frames;
  CHECK(frames == std::map<std::string, std::uint64_t>{{"decode", 101}, {"upload", 101}, {"preprocess", 101},
                                                        {"split", 101}, {"dl1", 101}, {"records", 101},
                                                        {"scores", 101}, {"copy", 101}});
  // Each record's stage_ms names its own path: the trunk and its branch, not the other branches' stages.
  const auto first = read_jsonl((dir / "a.jsonl").string()).front();
  std::set<std::string> timed;
  for (const auto& [name, ms] : first.at("stage_ms").items()) timed.insert(name);
  CHECK(timed == std::set<std::string>{"decode", "upload", "preprocess", "split", "dl1"});
  fs::remove_all(dir);
}

TEST_CASE("tee: a leaky branch behind a slow stage drops its share - the other branch gets every frame", "[tee][pipeline]") {
  const fs::path dir = fresh_dir("leaky");
  const std::string yaml =
      tee_yaml(400,
               "      - - kind: sink\n          name: all\n          type: jsonl\n          path: " + (dir / "all.jsonl").string() + "\n"
               "      - leaky: oldest\n        queue_depth: 1\n        stages:\n"
               "          - kind: download\n            name: slow\n"
               "          - kind: sink\n            name: some\n            type: jsonl\n            path: " + (dir / "some.jsonl").string() + "\n");
  PipelinePlan plan = plan_from(yaml);
  const std::size_t slow = stage_index(plan, "slow");
  plan.stages[slow].stage = std::make_unique<SlowForward>(plan.stages[slow].output);
  PipelineSnapshot snap;
  const auto t = run_bounded(std::move(plan), &snap);
  CHECK(t.produced == 400);
  CHECK(t.failed == 0);
  REQUIRE(t.dropped > 0);
  CHECK(t.dropped % 8 == 0);  // whole batches
  CHECK(t.delivered + t.dropped == 400);
  CHECK(t.in_flight() == 0);
  REQUIRE(t.drop_reasons.size() == 1);
  CHECK_THAT(t.drop_reasons.begin()->first,
             Contains("branch 2 ('some'): queue into branch 2 ('slow') full (leaky: oldest)"));
  // The lossless branch wrote every frame; the leaky one exactly those not dropped.
  CHECK(sequences(dir / "all.jsonl") == all_of(400));
  const auto some = sequences(dir / "some.jsonl");
  CHECK(some.size() == t.delivered);
  CHECK(std::set<std::uint64_t>(some.begin(), some.end()).size() == some.size());
  CHECK(snap.stages[stage_index(plan_from(yaml), "split")].dropped == t.dropped);
  fs::remove_all(dir);
}

TEST_CASE("tee: a failing sink fails its frames (named) while the other branch delivers every frame", "[tee][pipeline]") {
  const fs::path dir = fresh_dir("failing");
  const std::string yaml =
      tee_yaml(30,
               "      - - kind: sink\n          name: good\n          type: jsonl\n          path: " + (dir / "good.jsonl").string() + "\n"
               "      - - kind: sink\n          name: broken\n          type: jsonl\n          path: /nonexistent-dir/out.jsonl\n"
               "          write_retry_s: 0.01\n");
  const auto t = run_bounded(plan_from(yaml));
  CHECK(t.produced == 30);
  CHECK(t.delivered == 0);
  CHECK(t.failed == 30);
  CHECK(t.in_flight() == 0);
  REQUIRE_FALSE(t.errors.empty());
  CHECK_THAT(t.errors.front(), Contains("branch 2 ('broken'): stage 'broken' (sink)") && Contains("/nonexistent-dir/out.jsonl"));
  CHECK(sequences(dir / "good.jsonl") == all_of(30));
  fs::remove_all(dir);
}

TEST_CASE("tee: a batch shared by branches goes back to its pool once the last share is let go", "[tee][pool]") {
  PayloadDesc desc;
  desc.kind = PayloadKind::frames;
  desc.pixel = PixelFormat::gray8;
  desc.width = 4;
  desc.height = 2;
  desc.batch = 2;
  desc.memory = MemoryKind::host;
  BatchPool pool("p", desc, 1, false, {0, 0, 0});
  BatchLease lease = pool.acquire(nullptr);
  REQUIRE(lease);
  Batch* b = lease.detach();
  b->shared = true;
  b->holders.store(3);
  BatchLease s1 = BatchLease::adopt(b), s2 = BatchLease::adopt(b), s3 = BatchLease::adopt(b);
  CHECK(pool.free_slots() == 0);
  s1.reset();
  CHECK(pool.free_slots() == 0);
  s3.reset();
  CHECK(pool.free_slots() == 0);
  s2.reset();
  CHECK(pool.free_slots() == 1);
  BatchLease again = pool.acquire(nullptr);
  REQUIRE(again.get() == b);
  CHECK_FALSE(again->shared);
  CHECK(again->holders.load() == 1);
  again.reset();
  CHECK(pool.free_slots() == 1);
}

TEST_CASE("tee: many more batches than pool slots pass through branches without a leak", "[tee][pool]") {
  // 50 batches through pools of 3 slots (queue_depth 1 + 2): a share never given back would stop the source.
  const std::string yaml = tee_yaml(400,
                                    "      - - kind: sink\n          name: a\n          type: \"null\"\n"
                                    "      - - kind: download\n        - kind: sink\n          name: b\n          type: \"null\"\n"
                                    "      - - kind: sink\n          name: c\n          type: \"null\"\n",
                                    "queue_depth: 1\n");
  const auto t = run_bounded(plan_from(yaml));
  CHECK(t.delivered == 400);
  CHECK(t.in_flight() == 0);
}

TEST_CASE("tee: the shipped tee.yaml is accepted and runs on the CPU, every sink every frame", "[tee][pipeline]") {
  PipelineSpec spec = load_pipeline(source_dir() + "/config/pipelines/tee.yaml");
  REQUIRE(spec.tee >= 0);
  REQUIRE(spec.branches.size() == 3);
  spec.device = DeviceChoice::cpu;
  const fs::path dir = fresh_dir("shipped");
  std::map<std::string, std::string> sinks;
  for (auto& st : spec.stages) {
    if (st.kind != "sink") continue;
    sinks[st.name] = st.params.string("type");
    if (st.params.string("type") != "stdout") st.params.set("path", (dir / st.name).string(), true);
    else st.params.set("type", std::string("null"), true);  // keep the test's output quiet
  }
  CHECK(sinks == std::map<std::string, std::string>{{"print", "stdout"}, {"records", "jsonl"}, {"scores", "npy"}});
  const PipelinePlan plan = plan_pipeline(spec);
  const std::string check = describe_plan(plan);
  CHECK_THAT(check, Contains("feeds 3 branches"));
  const auto t = run_bounded(plan_pipeline(spec));
  CHECK(t.produced == 64);
  CHECK(t.delivered + t.dropped == 64);  // the npy branch is leaky (it may fall behind on a loaded machine)
  CHECK(t.failed == 0);
  std::int64_t records = 0;
  for (const auto& e : fs::directory_iterator(dir / "records"))  // source0.jsonl (and the output's lock file)
    if (e.path().extension() == ".jsonl") records += static_cast<std::int64_t>(read_jsonl(e.path().string()).size());
  CHECK(records == 64);
  CHECK(npy_rows(dir / "scores") == static_cast<std::int64_t>(t.delivered));
  fs::remove_all(dir);
}
