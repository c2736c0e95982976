#include "config/plan.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "runtime/bounded_file.hpp"
#include "runtime/checked_math.hpp"
#include "runtime/errors.hpp"
#include "runtime/frame_tap.hpp"
#include "runtime/gpu.hpp"
#include "runtime/source_kind.hpp"

namespace sluice {
namespace {

Device pick_device(const PipelineSpec& spec) {
  const int devices = gpu::device_count();
  if (spec.device == DeviceChoice::cpu) return Device::cpu;
  if (devices > spec.gpu) return Device::cuda;
  if (spec.device == DeviceChoice::automatic) return Device::cpu;
  const std::string why = !gpu::built_with_cuda() ? "this sluice was built without CUDA"
                          : devices == 0          ? "no CUDA device is visible"
                                                  : std::to_string(devices) + " CUDA device(s) visible";
  throw ConfigError(spec.file + ": device: cuda with gpu: " + std::to_string(spec.gpu) + ", but " + why +
                    " (use device: auto to fall back to the CPU)");
}

const char* role_name(StageRole r) {
  return r == StageRole::source ? "a source" : r == StageRole::sink ? "a sink" : "a transform";
}

std::string mib(std::size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

// One batch of `d` in bytes, computed with checked arithmetic (PayloadDesc::batch_bytes() may wrap for sizes
// that come straight from a pipeline file); nothing when it does not fit in 64 bits or a size is negative.
std::optional<std::uint64_t> checked_batch_bytes(const PayloadDesc& d) {
  std::optional<std::uint64_t> item;
  if (d.kind == PayloadKind::frames) {
    // Bytes per pixel, in halves: NV12 and I420 take 1.5 bytes a pixel.
    const std::int64_t halves = d.pixel == PixelFormat::gray8 ? 2 : (d.pixel == PixelFormat::nv12 || d.pixel == PixelFormat::i420) ? 3 : 6;
    const auto doubled = checked_product<std::uint64_t>(std::array<std::int64_t, 3>{d.width, d.height, halves});
    if (doubled) item = *doubled / 2;
  } else if (d.kind == PayloadKind::classes) {
    item = checked_product<std::uint64_t>(std::array<std::int64_t, 2>{d.channels, 8});
  } else if (d.kind == PayloadKind::detections) {
    std::int64_t per_slot = 32;  // kernels::Detection, then each attribute's k ClassScore entries
    for (const BoxAttribute& a : d.attributes) per_slot += static_cast<std::int64_t>(a.k) * 8;
    item = checked_product<std::uint64_t>(std::array<std::int64_t, 2>{d.channels, per_slot});
    if (item) *item += 16;
  } else {
    item = checked_product<std::uint64_t>(std::array<std::int64_t, 4>{
        d.channels, d.width, d.height, static_cast<std::int64_t>(dtype_bytes(d.dtype))});
  }
  if (!item || d.batch < 0) return std::nullopt;
  return checked_mul<std::uint64_t>(*item, static_cast<std::uint64_t>(d.batch));
}

// Refuses pools that cannot be allocated here: one whose size overflows, and pools of one kind of memory that
// together exceed this machine's (physical RAM for host and pinned pools, the GPU's memory for device pools).
void check_pools_fit(const PipelinePlan& plan, const std::vector<StageSpec>& stages, const std::vector<int>& spec_index) {
  struct Total {
    std::uint64_t bytes = 0;
    std::size_t largest = 0;  // stage index
    std::uint64_t largest_bytes = 0;
  };
  Total host;
  std::map<int, Total> device;  // by GPU
  const auto where_of = [&](std::size_t i) { return stages[static_cast<std::size_t>(spec_index[i])].where.str(); };
  for (std::size_t i = 0; i < plan.stages.size(); ++i) {
    const PlannedStage& ps = plan.stages[i];
    if (ps.pool_slots <= 0) continue;
    const std::string where = where_of(i) + ": stage '" + ps.name + "' (" + ps.kind + "): ";
    const auto batch = checked_batch_bytes(ps.output);
    const auto pool = batch ? checked_mul<std::uint64_t>(*batch, static_cast<std::uint64_t>(ps.pool_slots)) : std::nullopt;
    Total& total = ps.output.memory == MemoryKind::device ? device[ps.gpu] : host;
    const auto sum = pool ? checked_add(total.bytes, *pool) : std::nullopt;
    if (!sum)
      throw ConfigError(where + "its pool of " + std::to_string(ps.pool_slots) + " x " + ps.output.describe() +
                        " is larger than 2^64 bytes");
    total.bytes = *sum;
    if (*pool > total.largest_bytes) total.largest = i, total.largest_bytes = *pool;
  }
  auto refuse_over = [&](const Total& total, std::uint64_t limit, const std::string& memory) {
    if (limit == 0 || total.bytes <= limit) return;
    const PlannedStage& ps = plan.stages[total.largest];
    throw ConfigError(where_of(total.largest) + ": stage '" + ps.name + "' (" + ps.kind + "): its pool of " +
                      std::to_string(ps.pool_slots) + " x " + ps.output.describe() + " takes " +
                      describe_bytes(total.largest_bytes) + "; the pipeline's pools in " + memory + " take " +
                      describe_bytes(total.bytes) + ", more than the " + describe_bytes(limit) +
                      " this machine has (lower the batch, the frame size or queue_depth)");
  };
  refuse_over(host, host_memory_bytes(), "host memory");
  if (plan.device == Device::cuda)
    for (const auto& [gpu_index, total] : device)
      refuse_over(total, gpu::device_memory_bytes(gpu_index), "GPU " + std::to_string(gpu_index) + "'s memory");
}

// Stages that read pictures (StageInit::pictures; a stage without them refused itself) get them from the keeper,
// through every stage between. The keeper is the nearest stage upstream of the reader that made a tensor from
// frames (each replica has its own). The keeper's frames then stay in their pool for longer: that pool gets a slot
// more for each batch that can be between the keeper and the last reader, so the source does not wait for them.
void keep_pictures(PipelinePlan& plan, Execution execution) {
  const auto at = [&](int i) -> PlannedStage& { return plan.stages[static_cast<std::size_t>(i)]; };
  const auto makes_tensor_from_frames = [](const PlannedStage& ps) {
    return ps.input && ps.input->kind == PayloadKind::frames && ps.output.kind != PayloadKind::frames;
  };
  for (int r = static_cast<int>(plan.stages.size()); r-- > 0;) {
    if (!at(r).stage->reads_pictures()) continue;
    int keeper = at(r).upstream;
    while (keeper > 0 && !makes_tensor_from_frames(at(keeper))) keeper = at(keeper).upstream;
    if (keeper <= 0 || at(keeper).keeps_pictures) continue;  // none, or a later reader's
    at(keeper).keeps_pictures = true;
    int held = at(keeper).queue_depth + 1;
    for (int k = at(r).upstream; k != keeper; k = at(k).upstream) {
      at(k).passes_pictures = true;
      held += at(k).queue_depth + 1;
    }
    int owner = at(keeper).upstream;  // whose pool holds the frames (upload of device frames forwards them)
    while (owner > 0 && at(owner).pool_slots == 0) owner = at(owner).upstream;
    if (owner >= 0 && execution == Execution::pipelined) at(owner).pool_slots += held;
  }
}

// The sinks that draw onto the source's pictures get them through their taps: the source puts each frame into
// PipelineShared::tap (one sink's tap, or a fan-out to several).
void wire_frame_taps(PipelinePlan& plan) {
  std::vector<std::shared_ptr<FrameTap>> taps;
  for (const PlannedStage& ps : plan.stages)
    if (auto tap = ps.stage->frame_tap()) taps.push_back(std::move(tap));
  if (taps.size() == 1) plan.shared->tap = taps.front();
  else if (taps.size() > 1) plan.shared->tap = std::make_shared<FanOutTap>(std::move(taps));
}

// The devices of the replicas `gpus:` asks for (empty: none), checked against what this machine has.
std::vector<int> replica_gpus(const PipelineSpec& spec, Device device) {
  if (spec.gpus.empty()) return {};
  std::vector<int> gpus = spec.gpus;
  if (gpus == std::vector<int>{kAllGpus}) {
    gpus.clear();
    const int visible = device == Device::cuda ? gpu::device_count() : 0;
    for (int g = 0; g < std::min(visible, kMaxReplicas); ++g) gpus.push_back(g);
    if (gpus.empty()) gpus.push_back(0);  // on the CPU, `all` is one chain
  } else if (device == Device::cuda) {
    for (int g : gpus)
      if (g >= gpu::device_count())
        throw ConfigError(spec.file + ": gpus: device " + std::to_string(g) + " is not visible (" +
                          std::to_string(gpu::device_count()) + " CUDA device(s))");
  }
  if (spec.execution == Execution::serial && gpus.size() > 1)
    throw ConfigError(spec.file + ": gpus: replicas need execution: pipelined (each runs on its own threads)");
  return gpus;
}

// How many stages after the source the replicas hold: up to the first one that keeps state across batches, the
// tee, or the sink.
int replica_length(const PipelineSpec& spec) {
  const std::size_t trunk_end = spec.tee >= 0 ? static_cast<std::size_t>(spec.tee) : spec.stages.size() - 1;
  std::size_t i = 1;
  while (i < trunk_end && !StageRegistry::builtin().find(spec.stages[i].kind)->keeps_state) ++i;
  return static_cast<int>(i - 1);
}

// With replicas, what they cannot do yet, refused with the reason.
void check_replicas(const PipelinePlan& plan, const std::vector<StageSpec>& specs, const std::vector<int>& spec_index) {
  const std::set<int> devices(plan.replica_gpus.begin(), plan.replica_gpus.end());
  if (plan.device != Device::cuda || devices.size() < 2) return;
  const PlannedStage& source = plan.stages.front();
  if (source.output.memory == MemoryKind::device)
    throw ConfigError(specs.front().where.str() + ": stage '" + source.name +
                      "': it decodes into GPU memory, which replicas on other GPUs cannot read (gpus: lists " +
                      std::to_string(devices.size()) + " GPUs); decode on the CPU (decoder: cpu) or use one GPU");
  for (std::size_t i = plan.after_replicas(); i < plan.stages.size(); ++i)
    if (plan.stages[i].stage->uses_gpu())
      throw ConfigError(specs[static_cast<std::size_t>(spec_index[i])].where.str() + ": stage '" + plan.stages[i].name +
                        "' uses the GPU behind the replicas, whose batches live on " + std::to_string(devices.size()) +
                        " GPUs; move it before '" + plan.stages[plan.after_replicas()].name +
                        "' or use one GPU");
}

}  // namespace

PipelinePlan plan_pipeline(const PipelineSpec& spec) {
  PipelinePlan plan;
  plan.name = spec.name;
  plan.device = pick_device(spec);
  plan.gpu = spec.gpu;
  if (auto gpus = replica_gpus(spec, plan.device); gpus.size() == 1) plan.gpu = gpus.front();  // one chain there
  else if (!gpus.empty()) plan.gpu = gpus.front(), plan.replica_gpus = std::move(gpus);
  plan.execution = spec.execution;
  plan.latency_budget_ns = spec.latency_budget_ns;
  plan.batch_size = spec.batch_size;
  plan.batch_timeout_us = spec.batch_timeout_us;
  if (spec.tee >= 0 && spec.execution == Execution::serial)
    throw ConfigError(spec.stages[static_cast<std::size_t>(spec.tee)].where.str() + ": stage '" +
                      spec.stages[static_cast<std::size_t>(spec.tee)].name +
                      "' (tee): a tee needs execution: pipelined (each branch runs on its own threads)");
  const std::size_t n = spec.stages.size();
  const std::size_t trunk = spec.tee >= 0 ? static_cast<std::size_t>(spec.tee) + 1 : n;
  // Replicas: spec stages [1, length] once per replica, replica by replica; the plan index of spec stage i.
  const int replicas = static_cast<int>(std::max<std::size_t>(plan.replica_gpus.size(), 1));
  const int length = plan.replica_gpus.empty() ? 0 : replica_length(spec);
  plan.replica_length = length;
  if (!plan.replica_gpus.empty() && length == 0)
    throw ConfigError(spec.stages[1].where.str() + ": stage '" + spec.stages[1].name +
                      "': gpus: asks for replicas, but no stage lies between the source and it (it keeps state "
                      "across batches, or it is the tee or the sink)");
  const auto plan_index = [&](std::size_t i, int replica) {
    if (i == 0 || length == 0) return static_cast<int>(i);
    if (i <= static_cast<std::size_t>(length)) return 1 + replica * length + static_cast<int>(i) - 1;
    return static_cast<int>(i) + (replicas - 1) * length;
  };
  plan.tee = spec.tee >= 0 ? plan_index(static_cast<std::size_t>(spec.tee), 0) : -1;
  for (const auto& b : spec.branches)
    plan.branches.push_back({static_cast<std::size_t>(plan_index(b.first, 0)),
                             static_cast<std::size_t>(plan_index(b.first + b.count - 1, 0)), b.queue_depth, b.queue_policy});
  std::vector<PlannedStage> planned(n + static_cast<std::size_t>((replicas - 1) * length));
  std::vector<int> spec_index(planned.size());  // the spec stage of each planned one, for messages
  std::optional<PayloadDesc> upstream, tee_output;
  std::optional<PayloadDesc> pictures;  // on the trunk: the frames the preprocess stage made its tensor from
  for (std::size_t i = 0; i < n; ++i) {
    const StageSpec& ss = spec.stages[i];
    const StageInfo& info = *StageRegistry::builtin().find(ss.kind);
    const std::string where = ss.where.str() + ": stage '" + ss.name + "' (" + ss.kind + "): ";
    // The stage's path from the source: the trunk, then its own branch up to it.
    std::vector<std::string> names;
    std::size_t upstream_spec = i - 1;
    if (ss.branch < 0) {
      const StageRole expected = i == 0 ? StageRole::source : i + 1 == n ? StageRole::sink : StageRole::transform;
      if (info.role != expected)
        throw ConfigError(where + "is " + role_name(info.role) + " but position " + std::to_string(i + 1) + " needs " +
                          role_name(expected) +
                          (spec.tee >= 0 ? " (a pipeline is one source and transforms up to its tee; each branch "
                                           "of the tee ends in a sink)"
                                         : " (a pipeline is one source, transforms, one sink)"));
      for (std::size_t j = 0; j < trunk; ++j) names.push_back(spec.stages[j].name);
    } else {
      const BranchSpec& b = spec.branches[static_cast<std::size_t>(ss.branch)];
      const bool last = i + 1 == b.first + b.count;
      const std::string which = "branch " + std::to_string(ss.branch + 1) + " of tee '" + spec.stages[trunk - 1].name + "'";
      if (info.role == StageRole::source)
        throw ConfigError(where + "is a source, which cannot be in " + which + " (a branch is transforms, then one sink)");
      if (last && info.role != StageRole::sink)
        throw ConfigError(where + "is the last stage of " + which + " but is " + role_name(info.role) +
                          " (every branch ends in a sink)");
      if (!last && info.role == StageRole::sink)
        throw ConfigError(where + "is a sink before the end of " + which +
                          " (a sink is the last stage of its branch; for another sink, add a branch)");
      if (i == b.first) upstream = tee_output, upstream_spec = trunk - 1;
      for (std::size_t j = 0; j < trunk; ++j) names.push_back(spec.stages[j].name);
      for (std::size_t j = b.first; j < b.first + b.count; ++j) names.push_back(spec.stages[j].name);
    }
    const int position = ss.branch < 0 ? static_cast<int>(i)
                                       : static_cast<int>(trunk + (i - spec.branches[static_cast<std::size_t>(ss.branch)].first));
    if (spec.execution == Execution::serial && ss.kind == "decode" && ss.params.all().count("uri"))
      for (const auto& uri : ss.params.strings("uri"))
        if (const SourceKind& kind = source_kind_of(uri); kind.fed())  // serial: an input ends only when a batch passes
          throw ConfigError(where + "a " + kind.name + " source (a job fed while it runs) needs execution: pipelined "
                                    "(serial execution would hold a job's last input, and its entry, until more "
                                    "inputs arrive)");
    std::string params;
    for (const auto& [name, value] : ss.params.all()) {
      const std::string text = format_param(value);
      params += (params.empty() ? "" : " ") + name + "=" + (text.empty() ? "\"\"" : text) +
                (ss.params.was_given(name) ? "" : "*");
    }
    const bool replicated = i >= 1 && i <= static_cast<std::size_t>(length);
    std::optional<PayloadDesc> output;
    for (int r = 0; r < (replicated ? replicas : 1); ++r) {
      PlannedStage& ps = planned[static_cast<std::size_t>(plan_index(i, r))];
      spec_index[static_cast<std::size_t>(plan_index(i, r))] = static_cast<int>(i);
      ps.name = ss.name;
      ps.kind = ss.kind;
      ps.role = info.role;
      ps.input = upstream;
      ps.queue_depth = ss.queue_depth;
      ps.queue_policy = ss.queue_policy;
      ps.branch = ss.branch;
      // The stage after the replicas takes batches from each; its upstream names replica 0's last stage.
      ps.upstream = i == 0 ? -1 : plan_index(upstream_spec, replicated ? r : 0);
      ps.position = position;
      ps.params = params;
      ps.replica = replicated ? r : -1;
      ps.gpu = replicated ? plan.replica_gpus[static_cast<std::size_t>(r)] : plan.gpu;
      StageInit init{ss.name, ss.params, upstream, plan.device, spec.batch_size, spec.batch_timeout_us, names,
                     position, spec.file, plan.shared, spec.state_dir, spec.latency_budget_ns,
                     ss.branch < 0 ? pictures : std::nullopt};
      try {
        ps.stage = info.make(init);
      } catch (const ConfigError& e) {
        throw ConfigError(where + e.what());
      }
      if (info.role != StageRole::sink) {
        ps.output = ps.stage->output();
        // A slot being written, one being read downstream, and a full queue between them.
        const int in_flight = spec.execution == Execution::serial ? 1 : ps.queue_depth + 2;
        ps.pool_slots = ps.stage->forwards_input() ? 0 : in_flight;
        output = ps.output;
      }
    }
    if (output) {
      if (ss.branch < 0 && upstream && upstream->kind == PayloadKind::frames && output->kind != PayloadKind::frames)
        pictures = upstream;
      upstream = output;
      if (static_cast<int>(i) == spec.tee) tee_output = output;
    }
  }
  plan.stages = std::move(planned);
  keep_pictures(plan, spec.execution);
  wire_frame_taps(plan);
  check_replicas(plan, spec.stages, spec_index);
  check_pools_fit(plan, spec.stages, spec_index);
  return plan;
}

std::string describe_batching(const PipelinePlan& plan) {
  char line[400];
  std::snprintf(line, sizeof line, "batching: up to %d frames; a partial batch leaves %.1f ms after its first frame",
                plan.batch_size, static_cast<double>(plan.batch_timeout_us) / 1e3);
  std::string out = line;
  if (plan.latency_budget_ns > 0) {
    std::snprintf(line, sizeof line,
                  ", or sooner once waiting longer would break its oldest frame's latency budget of %.1f ms (capture "
                  "to the sink's end) given the measured time batches take downstream; frames past their budget are "
                  "counted late and delivered\n",
                  static_cast<double>(plan.latency_budget_ns) / 1e6);
    out += line;
  } else {
    out += "; no latency budget (latency_budget_ms: 0; sources added at run time may have their own)\n";
  }
  return out;
}

std::string describe_plan(const PipelinePlan& plan) {
  std::string gpus;
  for (int g : plan.replica_gpus) gpus += (gpus.empty() ? "" : ", ") + std::to_string(g);
  std::string out = "pipeline '" + plan.name + "': device " + to_string(plan.device) +
                    (plan.device == Device::cuda && gpus.empty() ? " (gpu " + std::to_string(plan.gpu) + ": " + gpu::device_name(plan.gpu) + ")" : "") +
                    (gpus.empty() ? "" : ", " + std::to_string(plan.replica_gpus.size()) + " replicas (gpus " + gpus + ")") +
                    ", execution " + to_string(plan.execution) + "\n";
  int stream_no = 0;
  for (std::size_t i = 0; i < plan.stages.size(); ++i) {
    const auto& ps = plan.stages[i];
    std::string stream = "host thread";
    if (plan.device == Device::cuda && ps.stage->uses_gpu())
      stream = plan.execution == Execution::serial ? "shared stream" : "stream " + std::to_string(++stream_no);
    const std::string indent = ps.branch >= 0 || ps.replica >= 0 ? "    " : "";
    if (ps.replica >= 0 && (i - 1) % static_cast<std::size_t>(plan.replica_length) == 0)
      out += "  replica " + std::to_string(ps.replica + 1) + " of " + std::to_string(plan.replica_gpus.size()) +
             (plan.device == Device::cuda ? " on gpu " + std::to_string(ps.gpu) + " (" + gpu::device_name(ps.gpu) + ")"
                                          : std::string(" (on the CPU)")) +
             ": the source hands each batch to the live replica with the fewest batches queued\n";
    if (!plan.replica_gpus.empty() && i == plan.after_replicas())
      out += "  the replicas' batches go on in the order the source made them (a batch failed in a replica is "
             "skipped, not waited for)\n";
    if (ps.branch >= 0 && plan.branches[static_cast<std::size_t>(ps.branch)].first == i) {
      const auto& b = plan.branches[static_cast<std::size_t>(ps.branch)];
      out += "  branch " + std::to_string(ps.branch + 1) + " of '" + plan.stages[static_cast<std::size_t>(plan.tee)].name +
             "' (stages " + std::to_string(b.first + 1) + "-" + std::to_string(b.last + 1) + ", ending in '" +
             plan.stages[b.last].name + "'), fed by a queue: depth " + std::to_string(b.queue_depth) + ", " +
             (b.queue_policy == QueuePolicy::block ? std::string("blocking (lossless)")
                                                   : "leaky: " + std::string(to_string(b.queue_policy))) + "\n";
    }
    out += indent + "  " + std::to_string(i + 1) + ". " + ps.name + " (" + ps.kind + ", " + stream + ")";
    if (ps.role != StageRole::sink) out += " -> " + ps.output.describe();
    out += "\n";
    if (!ps.params.empty()) out += indent + "       params: " + ps.params + "\n";
    if (const std::string note = ps.stage->plan_note(); !note.empty()) out += indent + "       chose: " + note + "\n";
    if (static_cast<int>(i) == plan.tee) {
      std::string heads;
      for (std::size_t b = 0; b < plan.branches.size(); ++b)
        heads += std::string(b ? ", " : "") + "'" + plan.stages[plan.branches[b].first].name + "' (branch " + std::to_string(b + 1) + ")";
      out += "       feeds " + std::to_string(plan.branches.size()) + " branches: " + heads +
             "; each gets every batch by reference (no copy), the batch returns to its pool when the last branch "
             "released it; a frame is delivered once every branch's sink delivered it\n";
    } else if (ps.pool_slots > 0)
      out += indent + "       pool: " + std::to_string(ps.pool_slots) + " x " + mib(ps.output.batch_bytes()) + " " +
             to_string(ps.output.memory) + "\n";
    else if (ps.role != StageRole::sink)
      out += indent + "       forwards its input (no pool)\n";
    if (ps.keeps_pictures)
      out += indent + "       keeps its input frames (by reference) for a stage downstream that reads them; their "
                      "pool has a slot more for each batch in between\n";
    if (ps.role != StageRole::sink && static_cast<int>(i) != plan.tee)
      out += indent + "       queue: depth " + std::to_string(ps.queue_depth) + ", " +
             (ps.queue_policy == QueuePolicy::block ? std::string("blocking (lossless)")
                                                    : "leaky: " + std::string(to_string(ps.queue_policy))) + "\n";
  }
  out += describe_batching(plan);
  std::string warm;
  for (const auto& ps : plan.stages)
    if (const std::string what = ps.stage->warm_up_plan(); !what.empty())
      warm += "  " + ps.name + (ps.replica >= 0 ? "@" + std::to_string(ps.replica + 1) : "") + ": " + what + "\n";
  out += warm.empty() ? "warm-up: none (no stage has lazy work to do before the first frame)\n"
                      : "warm-up (before the source opens and before `ready`; in no frame's latency):\n" + warm;
  out += "(* = default)\nmemory: pinned host " + mib(plan.pool_bytes(MemoryKind::pinned)) + ", device " +
         mib(plan.pool_bytes(MemoryKind::device)) + ", host " + mib(plan.pool_bytes(MemoryKind::host)) + "\n";
  return out;
}

}  // namespace sluice
