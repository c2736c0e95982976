// Host CPU time of tracking per frame (issue 29): N sources x F frames of ~B boxes in realistic motion
// (tests/track_scenes.hpp), through
//   reference  the tracker as it was before the rewrite (tests/track_reference.hpp), one thread;
//   tracker    stages/track/tracker.hpp, one thread;
//   stage tN   the track stage, batches of 64 frames taking the sources in turn (as cameras arrive), threads N.
// Prints per frame: CPU time of the process (all threads) and wall time, median [min, max] of R repeats, and
// checks that every way gives the same ids and events.
// --crowd packs the objects in a quarter of the frame; --churn is the tracker's worst case, a detector that sees
// noise (e.g. random weights): half of the detections (--churn-fraction) are boxes at random places, sides up to
// 1000 pixels, scores spread over the thresholds, so that every frame starts tracks that are dropped or lost;
// --max-side 1000 makes the objects large (sides 20..1000 pixels: clusters of overlaps spanning the frame).
//
//   cmake --build build/release --target track_bench && build/release/track_bench [--sources 32] [--frames 200]
//       [--boxes 100] [--repeats 5] [--threads 1,8] [--crowd] [--churn [--churn-fraction 0.5]] [--max-side 200]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/pool.hpp"
#include "runtime/stage.hpp"
#include "stages/track/tracker.hpp"
#include "tests/stage_params.hpp"
#include "tests/track_reference.hpp"
#include "tests/track_scenes.hpp"

using namespace sluice;
using kernels::Detection;

namespace {

constexpr int kBatch = 64;

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

struct Sample {
  double cpu_ms, wall_ms;  // per frame
};

// Output of one way: per source, per frame, the boxes then the events.
using Output = std::vector<std::vector<std::vector<Detection>>>;

using Scenes = std::vector<std::vector<std::vector<Detection>>>;

template <class Tracker>
Sample run_trackers(const Scenes& scenes, std::size_t frames, Output& out) {
  std::vector<Tracker> trackers;
  for (std::size_t s = 0; s < scenes.size(); ++s) trackers.emplace_back(track::TrackerParams{});
  Scenes work = scenes;  // copied before the clock starts
  std::vector<Detection> events;
  const double cpu0 = cpu_seconds();
  const auto wall0 = std::chrono::steady_clock::now();
  for (std::size_t f = 0; f < frames; ++f)
    for (std::size_t s = 0; s < scenes.size(); ++s) {
      events.clear();
      trackers[s].update(work[s][f], events);
      work[s][f].insert(work[s][f].end(), events.begin(), events.end());
    }
  const double cpu = cpu_seconds() - cpu0;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  out = std::move(work);
  const double n = static_cast<double>(frames * scenes.size());
  return {cpu * 1e3 / n, wall * 1e3 / n};
}

Sample run_stage(const Scenes& scenes, std::size_t frames, int boxes, int threads, Output& out) {
  PayloadDesc in_desc;
  in_desc.kind = PayloadKind::detections;
  in_desc.batch = kBatch;
  in_desc.channels = boxes;
  in_desc.classes = 80;
  const StageInfo& info = *StageRegistry::builtin().find("track");
  StageInit init{"track", test::params_of(info, {{"threads", std::to_string(threads)}}), in_desc};
  init.shared = std::make_shared<PipelineShared>();
  const std::unique_ptr<Stage> stage = info.make(init);
  // Every batch filled before the clock starts: the stage's own work is what is timed.
  std::vector<std::unique_ptr<BatchPool>> in_pools;
  std::vector<BatchLease> batches;
  std::vector<std::pair<std::size_t, std::size_t>> slots;  // (source, frame) per item, in batch order
  for (std::size_t f = 0; f < frames; ++f)
    for (std::size_t s = 0; s < scenes.size(); ++s) slots.emplace_back(s, f);
  for (std::size_t at = 0; at < slots.size(); at += kBatch) {
    in_pools.push_back(std::make_unique<BatchPool>("in", in_desc, 1, false));
    BatchLease b = in_pools.back()->acquire(nullptr);
    b->count = static_cast<int>(std::min<std::size_t>(kBatch, slots.size() - at));
    b->frames.clear();
    for (int i = 0; i < b->count; ++i) {
      const auto [s, f] = slots[at + static_cast<std::size_t>(i)];
      FrameMeta m;
      m.source_id = static_cast<std::uint32_t>(s + 1), m.sequence = f, m.input_frame = f;
      b->frames.push_back(m);
      const std::vector<Detection>& d = scenes[s][f];
      const auto n = std::min<std::size_t>(d.size(), static_cast<std::size_t>(boxes));
      const kernels::DetectionsHeader h{static_cast<std::int32_t>(n), 0, 0, 0};
      std::memcpy(b->item(i), &h, sizeof h);
      std::memcpy(b->item(i) + sizeof h, d.data(), n * sizeof(Detection));
    }
    batches.push_back(std::move(b));
  }
  BatchPool out_pool("out", stage->output(), 2, false);
  StageContext ctx;
  ctx.out_pool = &out_pool;
  out.assign(scenes.size(), std::vector<std::vector<Detection>>(frames));
  double cpu = 0, wall = 0;
  std::size_t at = 0;
  for (BatchLease& b : batches) {
    const double cpu0 = cpu_seconds();
    const auto wall0 = std::chrono::steady_clock::now();
    BatchLease result = stage->process(b.get(), ctx);
    cpu += cpu_seconds() - cpu0;
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    for (int i = 0; i < b->count; ++i, ++at) {
      kernels::DetectionsHeader h;
      std::memcpy(&h, result->item(i), sizeof h);
      const auto* d = reinterpret_cast<const Detection*>(result->item(i) + sizeof h);
      out[slots[at].first][slots[at].second].assign(d, d + h.count + h.events);
    }
  }
  const double n = static_cast<double>(frames * scenes.size());
  return {cpu * 1e3 / n, wall * 1e3 / n};
}

bool same(const Output& a, const Output& b) {
  for (std::size_t s = 0; s < a.size(); ++s)
    for (std::size_t f = 0; f < a[s].size(); ++f)
      if (a[s][f].size() != b[s][f].size() ||
          (!a[s][f].empty() && std::memcmp(a[s][f].data(), b[s][f].data(), a[s][f].size() * sizeof(Detection)) != 0))
        return false;
  return true;
}

void report(const char* name, std::vector<Sample> samples) {
  const auto line = [&](const char* what, auto get) {
    std::vector<double> v;
    for (const Sample& s : samples) v.push_back(get(s));
    std::sort(v.begin(), v.end());
    std::printf("  %-7s %9.4f ms  [%.4f, %.4f]", what, v[v.size() / 2], v.front(), v.back());
  };
  std::printf("%-12s", name);
  line("cpu", [](const Sample& s) { return s.cpu_ms; });
  line("wall", [](const Sample& s) { return s.wall_ms; });
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  int sources = 32, frames = 200, boxes = 100, repeats = 5;
  bool crowd = false;
  float churn = 0, max_side = 0;
  std::vector<int> threads = {1, std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 2, 1, 8)};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--sources") sources = std::stoi(value());
    else if (a == "--frames") frames = std::stoi(value());
    else if (a == "--boxes") boxes = std::stoi(value());
    else if (a == "--repeats") repeats = std::stoi(value());
    else if (a == "--crowd") crowd = true;
    else if (a == "--churn") churn = churn > 0 ? churn : 0.5f;
    else if (a == "--churn-fraction") churn = std::stof(value());
    else if (a == "--max-side") max_side = std::stof(value());
    else if (a == "--threads") {
      threads.clear();
      const std::string list = value();
      for (std::size_t p = 0; p <= list.size();) {
        const std::size_t q = std::min(list.find(',', p), list.size());
        threads.push_back(std::stoi(list.substr(p, q - p)));
        p = q + 1;
      }
    } else {
      std::fprintf(stderr, "usage: track_bench [--sources N] [--frames F] [--boxes B] [--repeats R] [--threads 1,8] [--crowd]\n"
                   "                   [--churn] [--churn-fraction F] [--max-side PIXELS]\n");
      return 2;
    }
  }
  if (sources < 1 || frames < 1 || boxes < 1 || repeats < 1 || !(churn >= 0 && churn <= 1) ||
      !(max_side >= 0 && max_side <= 1000)) {
    std::fprintf(stderr, "track_bench: sources, frames, boxes and repeats must be >= 1, the churn fraction in [0, 1]\n");
    return 2;
  }
  Scenes scenes;
  std::size_t total = 0;
  for (int s = 0; s < sources; ++s) {
    test::SceneParams p;
    p.objects = boxes;  // with misses and false positives: about `boxes` a frame
    p.frames = frames;
    p.crowd = crowd;
    p.churn = churn;
    p.churn_side = 1000;
    if (max_side > 0) p.max_side = max_side;
    scenes.push_back(test::make_scene(p, static_cast<std::uint32_t>(s + 1)));
    for (auto& f : scenes.back()) {
      f.resize(std::min<std::size_t>(f.size(), static_cast<std::size_t>(boxes)));
      total += f.size();
    }
  }
  char churned[80] = "";
  if (churn > 0) std::snprintf(churned, sizeof churned, " (churn %.2f)", static_cast<double>(churn));
  if (max_side > 0)
    std::snprintf(churned + std::strlen(churned), sizeof churned - std::strlen(churned), " (sides to %.0f)",
                  static_cast<double>(max_side));
  std::printf("track_bench: %d sources x %d frames, %.1f boxes a frame%s%s, %d repeats, %u cores; per frame:\n",
              sources, frames, static_cast<double>(total) / (sources * frames), crowd ? " (crowd)" : "", churned,
              repeats, std::thread::hardware_concurrency());
  const auto n = static_cast<std::size_t>(frames);
  Output want, got;
  std::vector<Sample> samples;
  for (int r = 0; r < repeats; ++r) samples.push_back(run_trackers<track::reference::Tracker>(scenes, n, want));
  report("reference", samples);
  samples.clear();
  bool ok = true;
  for (int r = 0; r < repeats; ++r) samples.push_back(run_trackers<track::Tracker>(scenes, n, got));
  ok = ok && same(want, got);
  report("tracker", samples);
  for (const int t : threads) {
    samples.clear();
    for (int r = 0; r < repeats; ++r) samples.push_back(run_stage(scenes, n, boxes, t, got));
    ok = ok && same(want, got);
    report(("stage t" + std::to_string(t)).c_str(), samples);
  }
  std::printf("same ids and events as the reference: %s\n", ok ? "yes" : "NO");
  return ok ? 0 : 1;
}
