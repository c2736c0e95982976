#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <thread>

#include "../pipeline_helpers.hpp"
#include "runtime/gpu.hpp"

using namespace sluice;
using namespace sluice::test;

TEST_CASE("GPU chain delivers every frame and matches the CPU chain", "[gpu][pipeline]") {
  for (const char* format : {"bgr8", "nv12"}) {
    for (const char* exec : {"pipelined", "serial"}) {
      INFO(format << " " << exec);
      const std::string cpu_path = "gpu_test_cpu.jsonl", gpu_path = "gpu_test_gpu.jsonl";
      std::string gpu_yaml = chain_yaml("cuda", format, 45, gpu_path);
      gpu_yaml.replace(gpu_yaml.find("batch_size"), 0, std::string("execution: ") + exec + "\n");
      auto gpu_plan = plan_from(gpu_yaml);
      REQUIRE(gpu_plan.device == Device::cuda);
      auto tg = run_to_end(std::move(gpu_plan));
      auto tc = run_to_end(plan_from(chain_yaml("cpu", format, 45, cpu_path)));
      REQUIRE(tg.produced == 45);
      REQUIRE(tg.delivered == 45);
      REQUIRE(tg.in_flight() == 0);
      REQUIRE(tc.delivered == 45);
      auto g = read_jsonl(gpu_path), c = read_jsonl(cpu_path);
      REQUIRE(g.size() == 45);
      REQUIRE(c.size() == 45);
      for (std::size_t k = 0; k < g.size(); ++k) {
        REQUIRE(g[k]["sequence"] == c[k]["sequence"]);
        // f32 through the same math on both sides: summaries agree to float rounding.
        for (const char* field : {"mean", "min", "max"})
          REQUIRE(g[k]["payload"][field].get<double>() ==
                  Approx(c[k]["payload"][field].get<double>()).epsilon(1e-4).margin(1e-4));
      }
      std::remove(cpu_path.c_str());
      std::remove(gpu_path.c_str());
    }
  }
}

TEST_CASE("GPU pipeline allocates and syncs nothing while it runs", "[gpu][pipeline]") {
  const std::string yaml = R"(name: steady
device: cuda
batch_size: 16
stages:
  - kind: decode
    pattern: gradient
    width: 640
    height: 480
    format: nv12
    frames: 800
  - kind: upload
  - kind: preprocess
    layout: nhwc
    dtype: f16
  - kind: download
  - kind: sink
    type: "null"
)";
  Pipeline p(plan_from(yaml));  // every pool, stream and event is made here
  const auto before = gpu::call_counts();
  p.start();
  p.wait();
  const auto after = gpu::call_counts();
  const auto t = p.ledger().totals();
  REQUIRE(t.delivered == 800);
  REQUIRE(t.in_flight() == 0);
  CHECK(after.device_allocs == before.device_allocs);
  CHECK(after.pinned_allocs == before.pinned_allocs);
  CHECK(after.device_frees == before.device_frees);
  // Streams are synchronised once each at shutdown (upload, preprocess, download), never per batch.
  CHECK(after.stream_syncs - before.stream_syncs == 3);
  CHECK(after.async_copies - before.async_copies == 2 * 50);  // one H2D and one D2H per batch
}

TEST_CASE("GPU pipeline drains on stop", "[gpu][pipeline]") {
  std::string yaml = chain_yaml("cuda", "bgr8", 0, "/dev/null");
  Pipeline p(plan_from(yaml));
  p.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  p.request_stop();
  p.wait();
  auto t = p.ledger().totals();
  REQUIRE(t.produced > 0);
  REQUIRE(t.delivered == t.produced);
}
