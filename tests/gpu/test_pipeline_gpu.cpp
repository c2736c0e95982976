#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

#include "../pipeline_helpers.hpp"
#include "runtime/gpu.hpp"
#include "runtime/gpu_handles.hpp"
#include "runtime/gpu_timer.hpp"
#include "runtime/source_control.hpp"

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

// Managed sources on the GPU path: rings in pinned memory, frames of three sources in one batch, a source
// added while the pipeline runs; per source the same results as the CPU chain, and nothing lost.
TEST_CASE("GPU chain over several managed sources matches the CPU chain per source", "[gpu][pipeline][sources]") {
  auto yaml = [](const std::string& device, const std::string& path) {
    return "name: multi\ndevice: " + device + "\nbatch_size: 8\nstages:\n"
           "  - kind: decode\n    uri: [testsrc:bars, testsrc:shapes, testsrc:noise]\n    frames: 30\n"
           "    animate: true\n    width: 320\n    height: 240\n    format: nv12\n"
           "  - kind: upload\n  - kind: preprocess\n    width: 96\n    height: 64\n"
           "  - kind: download\n  - kind: sink\n    type: jsonl\n    path: " + path + "\n";
  };
  auto by_source = [](const std::vector<nlohmann::json>& records) {
    std::map<std::string, std::map<std::uint64_t, nlohmann::json>> out;
    for (const auto& r : records) out[r["source_name"].get<std::string>()][r["input_frame"].get<std::uint64_t>()] = r;
    return out;
  };
  const std::string gpu_path = "gpu_multi_gpu.jsonl", cpu_path = "gpu_multi_cpu.jsonl";
  std::remove(gpu_path.c_str());  // per-run jsonl files are appended to: start empty
  std::remove(cpu_path.c_str());
  Pipeline gpu(plan_from(yaml("cuda", gpu_path)));
  REQUIRE(gpu.plan().device == Device::cuda);
  gpu.start();
  REQUIRE(gpu.source_control());
  SourceOptions extra;
  extra.uri = "testsrc:checkerboard";
  extra.name = "added";
  extra.reader.frames = 30;
  gpu.source_control()->add_source(extra);
  gpu.wait();
  const auto tg = gpu.ledger().totals();
  CHECK(tg.produced == 120);
  CHECK(tg.delivered == 120);
  CHECK(tg.in_flight() == 0);
  const auto tc = run_to_end(plan_from(yaml("cpu", cpu_path)));
  CHECK(tc.delivered == 90);
  const auto g = by_source(read_jsonl(gpu_path)), c = by_source(read_jsonl(cpu_path));
  REQUIRE(g.size() == 4);
  CHECK(g.at("added").size() == 30);
  for (const auto& [source, frames] : c) {
    INFO(source);
    REQUIRE(g.count(source));
    REQUIRE(g.at(source).size() == frames.size());
    for (const auto& [index, record] : frames)
      for (const char* field : {"mean", "min", "max"})
        REQUIRE(g.at(source).at(index)["payload"][field].get<double>() ==
                Approx(record["payload"][field].get<double>()).epsilon(1e-4).margin(1e-4));
  }
  std::remove(gpu_path.c_str());
  std::remove(cpu_path.c_str());
}

TEST_CASE("a source's GPU time is its copies, not the waits between them (GpuTimer pieces)", "[gpu][pipeline][timer]") {
  const Stream stream = Stream::create();
  constexpr std::size_t kBytes = std::size_t(8) << 20;
  void* a = gpu::device_alloc(kBytes);
  void* b = gpu::device_alloc(kBytes);
  GpuTimer timer(64);
  // One batch of three copies with 30 ms of waiting for frames between them, then a batch with none.
  for (int piece = 0; piece < 3; ++piece) {
    timer.begin(stream.get(), static_cast<std::uint64_t>(piece), 1);
    gpu::copy_async(b, a, kBytes, stream.get());
    timer.end(stream.get(), false);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  timer.close_batch();
  timer.close_batch();
  gpu::stream_synchronize(stream.get());
  timer.collect(true);
  CHECK(timer.timed_batches() == 2);
  // Three 8 MiB device copies take well under a millisecond each; the 60 ms of waiting between them is not counted.
  CHECK(timer.total_ns() > 0);
  CHECK(timer.total_ns() < 10'000'000);
  // The runner's way for other stages: one pair around the batch.
  GpuTimer whole(8);
  whole.begin(stream.get(), 0, 1);
  gpu::copy_async(b, a, kBytes, stream.get());
  whole.end(stream.get());
  gpu::stream_synchronize(stream.get());
  whole.collect(true);
  CHECK(whole.timed_batches() == 1);
  gpu::device_free(a);
  gpu::device_free(b);
}
