// A tee on the GPU path: branches share the device batch by reference, each branch's download runs on its own
// stream and records its own released event; the preprocess pool reuses a slot only after every branch read it.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "../pipeline_helpers.hpp"
#include "runtime/gpu.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

// decode -> upload -> preprocess (device tensor) -> tee -> [download, jsonl] x 2 on `device`, pools of 3 slots
// (queue_depth 1): 400 animated frames reuse every slot many times while both branches read it.
// a and b: files of this test's own (removed first: a rerun starts clean).
std::string tee_chain(const std::string& device, int frames, const std::string& a, const std::string& b) {
  std::remove(a.c_str());
  std::remove(b.c_str());
  return "name: tee-gpu\ndevice: " + device + "\nbatch_size: 8\nqueue_depth: 1\nstages:\n"
         "  - kind: decode\n    pattern: shapes\n    width: 320\n    height: 240\n    format: nv12\n    frames: " +
         std::to_string(frames) +
         "\n  - kind: upload\n  - kind: preprocess\n    width: 96\n    height: 64\n"
         "  - kind: tee\n    branches:\n"
         "      - - kind: download\n          name: dl_a\n        - kind: sink\n          name: a\n          type: jsonl\n"
         "          path: " + a + "\n"
         "      - - kind: download\n          name: dl_b\n        - kind: sink\n          name: b\n          type: jsonl\n"
         "          path: " + b + "\n";
}

}  // namespace

TEST_CASE("GPU tee: every branch reads each shared device batch intact and matches the CPU chain", "[gpu][tee]") {
  const std::string ga = "gpu_tee_a.jsonl", gb = "gpu_tee_b.jsonl", ca = "cpu_tee_a.jsonl", cb = "cpu_tee_b.jsonl";
  auto gpu_plan = plan_from(tee_chain("cuda", 400, ga, gb));
  REQUIRE(gpu_plan.device == Device::cuda);
  const auto tg = run_to_end(std::move(gpu_plan));
  const auto tc = run_to_end(plan_from(tee_chain("cpu", 400, ca, cb)));
  REQUIRE(tg.produced == 400);
  REQUIRE(tg.delivered == 400);  // once per frame, not once per branch
  REQUIRE(tg.in_flight() == 0);
  REQUIRE(tc.delivered == 400);
  const auto c = read_jsonl(ca);
  REQUIRE(c.size() == 400);
  for (const std::string& path : {ga, gb}) {
    INFO(path);
    const auto g = read_jsonl(path);
    REQUIRE(g.size() == 400);
    for (std::size_t k = 0; k < g.size(); ++k) {
      INFO("record " << k);
      REQUIRE(g[k]["sequence"] == c[k]["sequence"]);
      // A slot rewritten before a branch's copy read it would show another frame's numbers here.
      for (const char* field : {"mean", "min", "max"})
        REQUIRE(g[k]["payload"][field].get<double>() ==
                Approx(c[k]["payload"][field].get<double>()).epsilon(1e-4).margin(1e-4));
    }
  }
  for (const std::string& path : {ga, gb, ca, cb}) std::remove(path.c_str());
}

TEST_CASE("GPU tee: no copy per branch, no allocation or host sync while it runs", "[gpu][tee]") {
  const std::string a = "gpu_tee_count_a.jsonl", b = "gpu_tee_count_b.jsonl";
  Pipeline p(plan_from(tee_chain("cuda", 400, a, b)));  // pools, streams, events made here
  const auto before = gpu::call_counts();
  p.start();
  p.wait();
  const auto after = gpu::call_counts();
  const auto t = p.ledger().totals();
  REQUIRE(t.delivered == 400);
  REQUIRE(t.in_flight() == 0);
  CHECK(after.device_allocs == before.device_allocs);
  CHECK(after.pinned_allocs == before.pinned_allocs);
  CHECK(after.device_frees == before.device_frees);
  // Streams are synchronised once each at shutdown (upload, preprocess, dl_a, dl_b), never per batch.
  CHECK(after.stream_syncs - before.stream_syncs == 4);
  // One H2D per batch, and one D2H per branch: the device batch itself is never copied for a branch.
  CHECK(after.async_copies - before.async_copies == 3 * 50);
  for (const std::string& path : {a, b}) std::remove(path.c_str());
}
