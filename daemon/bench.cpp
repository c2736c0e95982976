#include "daemon/bench.hpp"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <thread>

#include "config/pipeline_spec.hpp"
#include "config/plan.hpp"
#include "runtime/errors.hpp"
#include "runtime/gpu.hpp"
#include "runtime/pipeline.hpp"

namespace sluice {
namespace {

struct StageWindow {
  std::string name;
  bool on_gpu = false;
  double ms_per_batch = 0;  // GPU ms on the stage's stream for GPU stages, host ms otherwise
  double busy = 0;          // fraction of the window the stage's stream (or thread) was working
  double cpu_cores = 0;     // CPU the stage's thread used, in cores
};

struct BenchRun {
  std::string execution;
  double window_s = 0, fps = 0, frames_per_batch = 0;
  std::uint64_t frames = 0;
  double gpu_stages_cpu_cores = 0;
  double process_cpu_cores = 0;  // every thread of the process (source threads and decoders too)
  std::vector<StageWindow> stages;
  PipelineSnapshot end;
};

// Runs the pipeline until `total_frames` reached the sink (then stops it: looping and live sources never end on
// their own) or until it ends; the window starts once `warmup_frames` reached the sink and closes at the stop.
BenchRun measure(PipelineSpec spec, Execution execution, std::uint64_t warmup_frames, std::uint64_t total_frames,
                 const std::string& trace_path) {
  spec.execution = execution;
  Pipeline p(plan_pipeline(spec));
  const bool trace = !trace_path.empty();
  if (trace) p.record_trace(std::chrono::hours(24 * 365));
  p.start();
  std::optional<PipelineSnapshot> first, last;
  double cpu_at_first = 0, cpu_at_last = 0;
  while (!p.finished()) {
    const std::uint64_t delivered = p.ledger().totals().delivered;
    if (!first && delivered >= warmup_frames) {
      first = p.snapshot();
      cpu_at_first = process_cpu_seconds();
    }
    if (!last && delivered >= total_frames) {
      last = p.snapshot();
      cpu_at_last = process_cpu_seconds();
      p.request_stop();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (!last) cpu_at_last = process_cpu_seconds();
  p.wait();
  BenchRun run;
  run.execution = to_string(execution);
  run.end = p.snapshot();
  if (!first) throw StageError("the run ended before its warm-up did: raise the source's frames or lower --warmup");
  const PipelineSnapshot& a = *first;
  const PipelineSnapshot& b = last ? *last : run.end;
  run.window_s = b.elapsed_s - a.elapsed_s;
  run.frames = b.frames.delivered - a.frames.delivered;
  run.fps = run.window_s > 0 ? static_cast<double>(run.frames) / run.window_s : 0;
  run.process_cpu_cores = run.window_s > 0 ? (cpu_at_last - cpu_at_first) / run.window_s : 0;
  for (std::size_t i = 0; i < b.stages.size(); ++i) {
    const auto &sa = a.stages[i], &sb = b.stages[i];
    StageWindow w;
    w.name = display_name(sb);
    w.on_gpu = sb.on_gpu;
    const double batches = static_cast<double>(sb.batches - sa.batches);
    const double gpu_batches = static_cast<double>(sb.gpu_batches - sa.gpu_batches);
    const double work_ms = sb.on_gpu ? sb.gpu_ms_total - sa.gpu_ms_total : sb.host_ms_total - sa.host_ms_total;
    w.ms_per_batch = work_ms / std::max(1.0, sb.on_gpu ? gpu_batches : batches);
    w.busy = run.window_s > 0 ? work_ms / 1e3 / run.window_s : 0;
    w.cpu_cores = run.window_s > 0 ? (sb.cpu_ms_total - sa.cpu_ms_total) / 1e3 / run.window_s : 0;
    if (sb.on_gpu) run.gpu_stages_cpu_cores += w.cpu_cores;
    if (i == 0 && batches > 0) run.frames_per_batch = static_cast<double>(sb.frames - sa.frames) / batches;
    run.stages.push_back(w);
  }
  if (trace) {
    std::ofstream out(trace_path);
    out << p.trace_json();
    if (!out) throw StageError("cannot write trace to '" + trace_path + "'");
  }
  return run;
}

void print_run(const BenchRun& r) {
  std::printf("%s: %.1f frames/s over %.3f s (%llu frames, %.1f per batch); CPU %.2f cores (GPU stages %.2f)\n",
              r.execution.c_str(), r.fps, r.window_s, static_cast<unsigned long long>(r.frames), r.frames_per_batch,
              r.process_cpu_cores, r.gpu_stages_cpu_cores);
  std::printf("  %-14s %-5s %12s %8s %10s\n", "stage", "where", "ms/batch", "busy", "cpu cores");
  for (const auto& s : r.stages)
    std::printf("  %-14s %-5s %12.3f %7.1f%% %10.2f\n", s.name.c_str(), s.on_gpu ? "gpu" : "host", s.ms_per_batch,
                100 * s.busy, s.cpu_cores);
}

nlohmann::json to_json(const BenchRun& r) {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : r.stages)
    stages.push_back({{"name", s.name}, {"on_gpu", s.on_gpu}, {"ms_per_batch", s.ms_per_batch}, {"busy", s.busy},
                      {"cpu_cores", s.cpu_cores}});
  const auto& f = r.end.frames;
  return {{"execution", r.execution}, {"fps", r.fps}, {"window_s", r.window_s}, {"frames", r.frames},
          {"frames_per_batch", r.frames_per_batch}, {"gpu_stages_cpu_cores", r.gpu_stages_cpu_cores},
          {"process_cpu_cores", r.process_cpu_cores}, {"stages", stages},
          {"ledger", {{"produced", f.produced}, {"delivered", f.delivered}, {"dropped", f.dropped}, {"failed", f.failed}}},
          {"latency_ms", {{"p50", static_cast<double>(r.end.latency_p50_ns) / 1e6},
                          {"p90", static_cast<double>(r.end.latency_p90_ns) / 1e6},
                          {"p99", static_cast<double>(r.end.latency_p99_ns) / 1e6}}}};
}

nlohmann::json machine(Device device, int gpu_index) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string cpu;
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  return {{"host", host}, {"cpu", cpu}, {"cpu_cores", std::thread::hardware_concurrency()},
          {"gpu", device == Device::cuda ? gpu::device_name(gpu_index) : "none"}};
}

// The shipped bench files say `device: cuda`: on a machine without a usable GPU the refusal says how to
// measure on the CPU instead.
PipelinePlan plan_for_bench(const PipelineSpec& spec, const BenchOptions& o) {
  try {
    return plan_pipeline(spec);
  } catch (const ConfigError& e) {
    if (spec.device != DeviceChoice::cuda || gpu::device_count() > spec.gpu) throw;
    throw ConfigError(std::string(e.what()) + "; to measure on the CPU: sluiced bench " + o.file +
                      " --device cpu");
  }
}

}  // namespace

int run_bench(const BenchOptions& o) {
  PipelineSpec spec = load_pipeline(o.file);
  StageSpec& source = spec.stages.front();
  if (!source.params.all().count("frames"))
    throw ConfigError(o.file + ": bench needs a source with a 'frames' parameter");
  const auto total = static_cast<std::int64_t>(o.warmup + o.batches) * spec.batch_size;
  source.params.set("frames", total, true);
  const auto warmup_frames = static_cast<std::uint64_t>(o.warmup) * static_cast<std::uint64_t>(spec.batch_size);
  const auto total_frames = static_cast<std::uint64_t>(total);

  if (!o.device.empty())
    spec.device = o.device == "cpu" ? DeviceChoice::cpu : o.device == "cuda" ? DeviceChoice::cuda : DeviceChoice::automatic;
  const PipelinePlan probe = plan_for_bench(spec, o);
  std::printf("bench %s: %d batches after %d warm-up, batch %d, %s, device %s%s\n", o.file.c_str(), o.batches, o.warmup,
              spec.batch_size, probe.stages.front().output.describe().c_str(), to_string(probe.device),
              probe.device == Device::cuda ? (" (" + gpu::device_name(spec.gpu) + ")").c_str() : "");
  nlohmann::json report = {{"pipeline", spec.name}, {"file", o.file}, {"batch_size", spec.batch_size},
                           {"batches", o.batches}, {"warmup", o.warmup},
                           {"input", probe.stages.front().output.describe()},
                           {"machine", machine(probe.device, spec.gpu)}};
  bool ok = true;
  std::optional<BenchRun> serial;
  double bound_fps = 0;
  if (!o.pipelined_only) {
    // Serial runs one stage at a time with a sync after each: its per-stage times are each stage alone on
    // the same data, and 1 / the slowest of them bounds what overlap can reach.
    serial = measure(spec, Execution::serial, warmup_frames, total_frames, o.serial_only ? o.trace_path : "");
    const StageWindow& slowest =
        *std::max_element(serial->stages.begin(), serial->stages.end(),
                          [](const StageWindow& x, const StageWindow& y) { return x.ms_per_batch < y.ms_per_batch; });
    bound_fps = serial->frames_per_batch * 1e3 / slowest.ms_per_batch;
    print_run(*serial);
    std::printf("bound: slowest stage alone is '%s' at %.3f ms/batch -> %.1f frames/s\n", slowest.name.c_str(),
                slowest.ms_per_batch, bound_fps);
    report["serial"] = to_json(*serial);
    report["bound"] = {{"stage", slowest.name}, {"ms_per_batch", slowest.ms_per_batch}, {"fps", bound_fps}};
    ok = serial->end.frames.in_flight() == 0 && serial->end.frames.failed == 0;
  }
  if (!o.serial_only) {
    const BenchRun pipelined = measure(spec, Execution::pipelined, warmup_frames, total_frames, o.trace_path);
    print_run(pipelined);
    report["pipelined"] = to_json(pipelined);
    if (serial) {
      std::printf("pipelined / bound = %.1f%%; pipelined / serial = %.2fx\n", 100 * pipelined.fps / bound_fps,
                  pipelined.fps / serial->fps);
      report["pipelined_over_bound"] = pipelined.fps / bound_fps;
      report["pipelined_over_serial"] = pipelined.fps / serial->fps;
    }
    ok = ok && pipelined.end.frames.in_flight() == 0 && pipelined.end.frames.failed == 0;
  }
  if (!o.trace_path.empty()) std::printf("trace: %s (open in ui.perfetto.dev or chrome://tracing)\n", o.trace_path.c_str());
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    out << report.dump(2) << '\n';
    if (!out) throw StageError("cannot write '" + o.json_path + "'");
  }
  if (!ok) std::fprintf(stderr, "sluiced bench: frames failed or went missing; see the ledger in the JSON\n");
  return ok ? 0 : 1;
}

}  // namespace sluice
