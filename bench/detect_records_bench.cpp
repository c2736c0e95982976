// Host CPU of the detection records path (issue 29: cameras -> detector -> track -> sink jsonl), no GPU: N sources
// x F frames of ~B boxes in realistic motion (tests/track_scenes.hpp), in batches of 16 taking the sources in
// turn (as cameras arrive), through
//   track   the track stage (threads T, 1 by default: its workers' CPU is counted too);
//   sink    the sink stage, type jsonl per run, into DIR/detect_records_bench.jsonl (appended and fsync'ed every
//           batch, as a run does; the file is removed at the end);
//   format  the records alone: RecordFormatter::json per frame, and a json tree dumped compact (the
//           reference the sink's records are held to, tests/record_reference.hpp), for comparison.
// Prints per frame, median [min, max] over R repeats: the stage thread's CPU (CLOCK_THREAD_CPUTIME_ID, as the
// runner counts it) and, for the sink, its wall time (the fsync waits); the record's size; and what reading the
// thread CPU clock costs (the runner reads it twice a step).
//
//   cmake --build build/release --target detect_records_bench && build/release/detect_records_bench
//       [--sources 32] [--frames 150] [--boxes 100] [--repeats 5] [--threads 1] [--dir /tmp]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/pool.hpp"
#include "runtime/sink_records.hpp"
#include "runtime/stage.hpp"
#include "runtime/stats.hpp"
#include "tests/record_reference.hpp"
#include "tests/stage_params.hpp"
#include "tests/track_scenes.hpp"

using namespace sluice;
using kernels::Detection;

namespace {

constexpr int kBatch = 16;
const std::vector<std::string> kStageNames = {"decode", "upload", "preprocess", "infer", "download", "track", "sink"};
constexpr int kTrackIndex = 5, kSinkIndex = 6;

struct Options {
  int sources = 32, frames = 150, boxes = 100, repeats = 5, threads = 1;
  std::string dir = "/tmp";
};

// Per frame, in ms.
struct Sample {
  double track_cpu = 0, sink_cpu = 0, sink_wall = 0, format_cpu = 0, tree_cpu = 0;
  double record_bytes = 0;
};

PayloadDesc detections_desc(int boxes) {
  PayloadDesc d;
  d.kind = PayloadKind::detections;
  d.batch = kBatch;
  d.channels = boxes;
  d.classes = 80;
  std::vector<std::string> labels;  // COCO's length; names as long as its usual ones
  for (int c = 0; c < 80; ++c) labels.push_back("label-" + std::to_string(c));
  d.labels = std::make_shared<const std::vector<std::string>>(std::move(labels));
  return d;
}

using Scenes = std::vector<std::vector<std::vector<Detection>>>;

// The detector's batches, filled before any clock starts.
std::vector<BatchLease> make_batches(const Scenes& scenes, const Options& o, const PayloadDesc& desc,
                                     std::vector<std::unique_ptr<BatchPool>>& pools) {
  std::vector<std::pair<std::size_t, std::size_t>> slots;  // (source, frame) per item, in batch order
  for (std::size_t f = 0; f < static_cast<std::size_t>(o.frames); ++f)
    for (std::size_t s = 0; s < scenes.size(); ++s) slots.emplace_back(s, f);
  std::vector<BatchLease> batches;
  const std::int64_t t0 = now_ns();
  for (std::size_t at = 0; at < slots.size(); at += kBatch) {
    pools.push_back(std::make_unique<BatchPool>("in", desc, 1, false));
    BatchLease b = pools.back()->acquire(nullptr);
    b->count = static_cast<int>(std::min<std::size_t>(kBatch, slots.size() - at));
    b->frames.clear();
    for (int i = 0; i < b->count; ++i) {
      const auto [s, f] = slots[at + static_cast<std::size_t>(i)];
      FrameMeta m;
      m.source_id = static_cast<std::uint32_t>(s + 1), m.sequence = f, m.input_frame = f;
      m.pts_ns = static_cast<std::int64_t>(f) * 33'333'333;
      m.capture_ns = t0 + m.pts_ns;
      m.wall_ns = 1'765'000'000'000'000'000LL + m.pts_ns;
      b->frames.push_back(m);
      const std::vector<Detection>& d = scenes[s][f];
      const auto n = std::min<std::size_t>(d.size(), static_cast<std::size_t>(o.boxes));
      const kernels::DetectionsHeader h{static_cast<std::int32_t>(n), 0, 0, 0};
      std::memcpy(b->item(i), &h, sizeof h);
      std::memcpy(b->item(i) + sizeof h, d.data(), n * sizeof(Detection));
    }
    for (int st = 0; st < kTrackIndex; ++st) b->stage_done_ns[static_cast<std::size_t>(st)] = t0 + st * 1'000'000;
    batches.push_back(std::move(b));
  }
  return batches;
}

Sample run_once(const Scenes& scenes, const Options& o) {
  const PayloadDesc desc = detections_desc(o.boxes);
  std::vector<std::unique_ptr<BatchPool>> pools;
  std::vector<BatchLease> batches = make_batches(scenes, o, desc, pools);

  const StageInfo& track_info = *StageRegistry::builtin().find("track");
  StageInit track_init{"track", test::params_of(track_info, {{"threads", std::to_string(o.threads)}}), desc};
  track_init.shared = std::make_shared<PipelineShared>();
  const std::unique_ptr<Stage> track = track_info.make(track_init);
  BatchPool tracked_pool("tracked", track->output(), 2, false);
  StageContext track_ctx;
  track_ctx.out_pool = &tracked_pool;

  const std::string path = (std::filesystem::path(o.dir) / "detect_records_bench.jsonl").string();
  std::filesystem::remove(path);
  const StageInfo& sink_info = *StageRegistry::builtin().find("sink");
  const PayloadDesc tracked_desc = track->output();
  StageInit sink_init{"sink", test::params_of(sink_info, {{"type", "jsonl"}, {"path", path}}), tracked_desc};
  sink_init.stage_names = kStageNames;
  sink_init.index = kSinkIndex;
  sink_init.shared = std::make_shared<PipelineShared>();
  const std::unique_ptr<Stage> sink = sink_info.make(sink_init);
  StageContext sink_ctx;
  sink->open(sink_ctx);

  const sinks::RecordFormatter formatter(kStageNames, kSinkIndex);
  const sinks::Origin origin{"127.0.0.1-39637-12", "rtsp://127.0.0.1:39637/cam11", "", true, true};

  Sample s;
  std::int64_t track_cpu = 0, sink_cpu = 0, sink_wall = 0, format_cpu = 0, tree_cpu = 0;
  std::size_t frames = 0, bytes = 0;
  for (BatchLease& b : batches) {
    std::int64_t cpu0 = thread_cpu_ns();
    const std::int64_t helpers0 = track_ctx.helper_cpu_ns;
    BatchLease out = track->process(b.get(), track_ctx);
    track_cpu += thread_cpu_ns() - cpu0 + (track_ctx.helper_cpu_ns - helpers0);
    // The runner's hand-on: the frames and times go with the batch.
    out->count = b->count;
    out->frames = b->frames;
    out->stage_done_ns = b->stage_done_ns;
    out->stage_done_ns[kTrackIndex] = now_ns();

    cpu0 = thread_cpu_ns();
    const std::int64_t wall0 = now_ns();
    sink->process(out.get(), sink_ctx);
    sink_cpu += thread_cpu_ns() - cpu0;
    sink_wall += now_ns() - wall0;

    // The same records formatted alone: by the sink's formatter, then by a json tree (the reference).
    const std::int64_t now = now_ns();
    std::size_t formatted = 0, tree_bytes = 0;
    cpu0 = thread_cpu_ns();
    for (int i = 0; i < out->count; ++i) formatted += formatter.json(*out, i, origin, now).size() + 1;
    format_cpu += thread_cpu_ns() - cpu0;
    cpu0 = thread_cpu_ns();
    for (int i = 0; i < out->count; ++i)
      tree_bytes += test::reference_record(kStageNames, kSinkIndex, *out, i, origin, now).size() + 1;
    tree_cpu += thread_cpu_ns() - cpu0;
    if (formatted != tree_bytes) throw std::logic_error("the formatter's records differ from the json tree's");
    bytes += formatted;
    frames += static_cast<std::size_t>(out->count);
  }
  sink->close(sink_ctx);
  std::filesystem::remove(path);
  const double n = static_cast<double>(frames);
  s.track_cpu = static_cast<double>(track_cpu) / 1e6 / n;
  s.sink_cpu = static_cast<double>(sink_cpu) / 1e6 / n;
  s.sink_wall = static_cast<double>(sink_wall) / 1e6 / n;
  s.format_cpu = static_cast<double>(format_cpu) / 1e6 / n;
  s.tree_cpu = static_cast<double>(tree_cpu) / 1e6 / n;
  s.record_bytes = static_cast<double>(bytes) / n;
  return s;
}

void report(const char* what, const std::vector<Sample>& samples, double Sample::*field, const char* unit = "ms") {
  std::vector<double> v;
  for (const Sample& s : samples) v.push_back(s.*field);
  std::sort(v.begin(), v.end());
  std::printf("  %-34s %9.4f %s  [%.4f, %.4f]\n", what, v[v.size() / 2], unit, v.front(), v.back());
}

double clock_read_ns() {
  constexpr int kReads = 1'000'000;
  std::int64_t sum = 0;
  const std::int64_t t0 = now_ns();
  for (int i = 0; i < kReads; ++i) sum += thread_cpu_ns();
  const double ns = static_cast<double>(now_ns() - t0) / kReads;
  return sum == 42 ? 0 : ns;  // uses sum: the loop stays
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--sources") o.sources = std::stoi(value());
    else if (a == "--frames") o.frames = std::stoi(value());
    else if (a == "--boxes") o.boxes = std::stoi(value());
    else if (a == "--repeats") o.repeats = std::stoi(value());
    else if (a == "--threads") o.threads = std::stoi(value());
    else if (a == "--dir") o.dir = value();
    else {
      std::fprintf(stderr, "usage: detect_records_bench [--sources N] [--frames F] [--boxes B] [--repeats R] "
                           "[--threads T] [--dir DIR]\n");
      return 2;
    }
  }
  if (o.sources < 1 || o.frames < 1 || o.boxes < 1 || o.repeats < 1 || o.threads < 1) {
    std::fprintf(stderr, "detect_records_bench: sources, frames, boxes, repeats and threads must be >= 1\n");
    return 2;
  }
  Scenes scenes;
  std::size_t total = 0;
  for (int s = 0; s < o.sources; ++s) {
    test::SceneParams p;
    p.objects = o.boxes;  // with misses and false positives: about `boxes` a frame
    p.frames = o.frames;
    scenes.push_back(test::make_scene(p, static_cast<std::uint32_t>(s + 1)));
    for (auto& f : scenes.back()) {
      f.resize(std::min<std::size_t>(f.size(), static_cast<std::size_t>(o.boxes)));
      total += f.size();
    }
  }
  std::printf("detect_records_bench: %d sources x %d frames, %.1f boxes a frame, batches of %d, track threads %d, "
              "%d repeats, jsonl in %s; per frame:\n",
              o.sources, o.frames, static_cast<double>(total) / (o.sources * o.frames), kBatch, o.threads,
              o.repeats, o.dir.c_str());
  std::vector<Sample> samples;
  for (int r = 0; r < o.repeats; ++r) samples.push_back(run_once(scenes, o));
  report("track stage CPU", samples, &Sample::track_cpu);
  report("sink stage CPU (jsonl, fsync)", samples, &Sample::sink_cpu);
  report("sink stage wall", samples, &Sample::sink_wall);
  report("records: RecordFormatter::json", samples, &Sample::format_cpu);
  report("records: a json tree, dumped", samples, &Sample::tree_cpu);
  report("record size", samples, &Sample::record_bytes, "B ");
  std::printf("  reading the thread CPU clock: %.0f ns\n", clock_read_ns());
  return 0;
}
