// decode: the pipeline's source. Two shapes:
// - `uri:` given: managed sources (runtime/source_set.hpp): files, directories and globs (resumable jobs),
//   image sequences, cameras, streams and test patterns, each decoding on its own thread with its own state,
//   batched together; sources can be added and removed at run time over the control socket.
// - no `uri`: one test pattern rendered straight into the batch's (pinned) memory, costing no copy: the
//   source for benchmarks of the GPU path.
// Frames are grouped into batches of batch_size, or fewer when the next frame would miss batch_timeout.
#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <filesystem>
#include <optional>
#include <set>
#include <tuple>
#include <thread>

#include <spdlog/spdlog.h>

#include "runtime/errors.hpp"
#include "runtime/frame_tap.hpp"
#include "runtime/job_ledger.hpp"
#include "runtime/source_kind.hpp"
#include "runtime/source_set.hpp"
#include "runtime/stage_registrar.hpp"
#include "runtime/stats.hpp"
#include "stages/testsrc.hpp"

namespace sluice {
namespace {

enum class FrameMemory { automatic, device, pinned };
constexpr Choice<FrameMemory> kFrameMemoryChoices[] = {
    {"auto", FrameMemory::automatic}, {"device", FrameMemory::device}, {"pinned", FrameMemory::pinned}};

// `idle`: wait keeps the pipeline up for sources added at run time.
constexpr Choice<bool> kIdleWaitChoices[] = {{"exit", false}, {"wait", true}};

// `source_policy`: whether a source drops frames when the pipeline is behind; nullopt: by the source's kind.
constexpr Choice<std::optional<bool>> kLeakyChoices[] = {{"auto", std::nullopt}, {"leaky", true}, {"block", false}};

constexpr Choice<DecoderChoice> kDecoderChoices[] = {{to_string(DecoderChoice::automatic), DecoderChoice::automatic},
                                                    {to_string(DecoderChoice::gpu), DecoderChoice::gpu},
                                                    {to_string(DecoderChoice::cpu), DecoderChoice::cpu}};

// `rtsp_transport`: true = udp.
constexpr Choice<bool> kRtspTransportChoices[] = {{"tcp", false}, {"udp", true}};

// What every decode stage emits: frames of the declared size and format; on a GPU pipeline pinned (for the
// upload stage to copy) or, with managed sources, in device memory (`frame_memory`).
PayloadDesc frames_desc(const StageInit& init, bool managed) {
  PayloadDesc d;
  d.kind = PayloadKind::frames;
  const FrameMemory where = init.params.choice("frame_memory", kFrameMemoryChoices);
  if (init.device != Device::cuda) {
    if (where == FrameMemory::device) throw ConfigError("'frame_memory: device' needs a pipeline on the GPU");
    d.memory = MemoryKind::host;
  } else if (where == FrameMemory::device && !managed) {
    throw ConfigError("'frame_memory: device' needs managed sources ('uri'): the direct test pattern renders on the host");
  } else {
    d.memory = where == FrameMemory::pinned || !managed ? MemoryKind::pinned : MemoryKind::device;
  }
  d.batch = init.batch_size;
  d.width = static_cast<int>(init.params.integer("width"));
  d.height = static_cast<int>(init.params.integer("height"));
  d.pixel = *parse_pixel_format(init.params.string("format"));
  const bool subsampled = d.pixel == PixelFormat::nv12 || d.pixel == PixelFormat::i420;
  if (subsampled && (d.width % 2 || d.height % 2))
    throw ConfigError("format " + std::string(to_string(d.pixel)) + " needs an even width and height, got " +
                      std::to_string(d.width) + "x" + std::to_string(d.height));
  return d;
}

class TestSourceStage final : public Stage, public SourceControl {
 public:
  explicit TestSourceStage(const StageInit& init)
      : name_(init.name),
        pattern_(*parse_test_pattern(init.params.string("pattern"))),
        source_id_(static_cast<std::uint32_t>(init.params.integer("source_id"))),
        seed_(static_cast<std::uint64_t>(init.params.integer("seed"))),
        fps_(init.params.number("fps")),
        frames_(static_cast<std::uint64_t>(init.params.integer("frames"))),
        animate_(init.params.boolean("animate")),
        batch_timeout_ns_(init.batch_timeout_us * 1000),
        budget_ns_(init.latency_budget_ns),
        shared_(init.shared),
        desc_(frames_desc(init, false)) {}

  PayloadDesc output() const override { return desc_; }

  void open(StageContext& ctx) override {
    renderer_.emplace(pattern_, desc_.pixel, desc_.width, desc_.height, seed_);
    rendered_.assign(static_cast<std::size_t>(ctx.out_pool->slots() * desc_.batch), false);
    start_ns_ = opened_ns_ = now_ns();
    // Records, the frame ledger's summary and the sources view call it by one name: the stage's.
    if (shared_) shared_->inputs.name_source(source_id_, name_);
  }

  // One source, not managed: listed for status, but nothing can be added to or removed from it.
  SourceControl* source_control() override { return this; }
  std::vector<SourceReport> sources() const override {
    SourceReport r;
    r.id = source_id_;
    r.name = name_;
    r.uri = std::string("testsrc:") + kTestPatternNames[static_cast<int>(pattern_)];
    r.kind = InputKind::testsrc;
    r.state = ended_ ? SourceState::eos : SourceState::live;
    r.frames = produced_;
    const std::int64_t now = now_ns(), last = last_frame_ns_;
    r.since_last_frame_s = last ? static_cast<double>(now - last) / 1e9 : -1;
    // The rate over the last window; none once it ended, or while nothing came for a while (paused).
    const bool current = last && now - last < 2 * kFpsWindowNs;
    r.fps = ended_ || !current ? 0.0 : measured_fps_.load();
    r.mean_fps = mean_rate(produced_, opened_ns_, last);
    r.stopped = stopped_;
    return {r};
  }
  std::uint32_t add_source(SourceOptions) override {
    throw std::invalid_argument("stage '" + name_ + "' renders one test pattern directly; give it 'uri' (or 'idle: wait') "
                                "to manage sources at run time");
  }
  bool remove_source(const std::string&) override { return false; }

  BatchLease process(Batch*, StageContext& ctx) override {
    BatchLease batch = produce(ctx);
    if (batch) {
      count_frames(static_cast<std::uint64_t>(batch->count));
    } else if (!ctx.pausing()) {
      stopped_ = ctx.stopping() && !(frames_ && next_ >= frames_);  // stopped before its last frame
      ended_ = true;
    }
    return batch;
  }

 private:
  BatchLease produce(StageContext& ctx) {
    if ((frames_ && next_ >= frames_) || ctx.stopping()) return {};
    BatchLease batch = ctx.acquire();
    if (!batch) return {};
    std::int64_t first_due = 0;
    // The first frame's budget deadline, given what batches take downstream: the batch leaves before it.
    std::int64_t budget_deadline = kNoDeadline, render_ns = 0;
    const std::int64_t downstream_ns = shared_ ? shared_->downstream.ns() : 0;
    while (batch->count < desc_.batch && !(frames_ && next_ >= frames_) && !ctx.stopping()) {
      if (ctx.pausing()) break;  // the frames made so far leave now; a frame not yet made waits for the resume
      std::int64_t due = due_ns(next_);
      if (fps_ > 0 && now_ns() - due > kMaxLateNs) {
        // Far behind schedule (the pipeline was paused, or the source stalled): a live source does not
        // replay what it missed, it continues from now.
        start_ns_ = now_ns() - static_cast<std::int64_t>(static_cast<double>(next_) * 1e9 / fps_);
        due = due_ns(next_);
      }
      if (batch->count > 0 && due - first_due > batch_timeout_ns_) break;  // the partial batch leaves now
      // Waiting for this frame (due, or now when behind, plus the time the last one took to render) would break
      // the budget of the first.
      if (batch->count > 0 && std::max(due, now_ns()) + render_ns > budget_deadline) break;
      if (batch->count == 0) first_due = due;
      wait_until(due, ctx);
      if (ctx.stopping() || ctx.pausing()) break;
      const std::int64_t render_start = now_ns();
      if (animate_) {
        renderer_->render(next_, batch->item(batch->count));
      } else {
        // The picture stays in the slot across reuse: render it the first time only.
        const std::size_t item = batch->slot * static_cast<std::size_t>(desc_.batch) + static_cast<std::size_t>(batch->count);
        if (!rendered_[item]) renderer_->render(0, batch->item(batch->count));
        rendered_[item] = true;
      }
      render_ns = now_ns() - render_start;
      FrameMeta meta;
      meta.source_id = source_id_;
      meta.sequence = next_;
      meta.pts_ns = static_cast<std::int64_t>(static_cast<double>(next_) * 1e9 / (fps_ > 0 ? fps_ : 30.0));
      meta.capture_ns = now_ns();
      meta.wall_ns = wall_ns();
      meta.budget_ns = budget_ns_;
      if (batch->count == 0) budget_deadline = dispatch_deadline(meta, downstream_ns);
      if (shared_ && shared_->tap)
        shared_->tap->put(meta, {batch->item(batch->count), desc_.width, desc_.height, desc_.pixel});
      batch->frames.push_back(meta);
      ++batch->count;
      ++next_;
    }
    if (batch->count == 0) return {};
    return batch;
  }

  std::int64_t due_ns(std::uint64_t index) const {
    return fps_ > 0 ? start_ns_ + static_cast<std::int64_t>(static_cast<double>(index) * 1e9 / fps_) : 0;
  }
  // Sleeps in short slices so a stop or pause request is seen promptly even at low rates.
  static void wait_until(std::int64_t due, StageContext& ctx) {
    const std::int64_t start = now_ns();
    for (std::int64_t now = start; now < due && !ctx.stopping() && !ctx.pausing(); now = now_ns())
      std::this_thread::sleep_for(std::chrono::nanoseconds(std::min<std::int64_t>(due - now, 50'000'000)));
    ctx.pacing_wait_ns += now_ns() - start;
  }

  // The frames of a batch, and the frame rate the sources view shows: frames per window of about a second
  // (the first window starts at the first batch).
  void count_frames(std::uint64_t n) {
    const std::int64_t now = now_ns();
    produced_ += n;
    last_frame_ns_ = now;
    if (!fps_window_ns_) {
      fps_window_ns_ = now;
      fps_window_frames_ = produced_;
    } else if (now - fps_window_ns_ >= kFpsWindowNs) {
      measured_fps_ = static_cast<double>(produced_ - fps_window_frames_) * 1e9 / static_cast<double>(now - fps_window_ns_);
      fps_window_ns_ = now;
      fps_window_frames_ = produced_;
    }
  }

  static constexpr std::int64_t kMaxLateNs = 1'000'000'000;
  static constexpr std::int64_t kFpsWindowNs = 1'000'000'000;
  std::string name_;
  std::atomic<std::uint64_t> produced_{0};
  std::atomic<std::int64_t> last_frame_ns_{0};
  std::atomic<double> measured_fps_{0};
  std::int64_t fps_window_ns_ = 0;  // the stage's thread only
  std::uint64_t fps_window_frames_ = 0;
  std::atomic<bool> ended_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<std::int64_t> opened_ns_{0};  // when it opened (start_ns_ moves with pacing; read by sources())
  TestPattern pattern_;
  std::uint32_t source_id_;
  std::uint64_t seed_;
  double fps_;
  std::uint64_t frames_;
  bool animate_;
  std::int64_t batch_timeout_ns_;
  std::int64_t budget_ns_;
  std::shared_ptr<PipelineShared> shared_;
  std::vector<bool> rendered_;  // animate: false: which pool slot items already hold the picture
  PayloadDesc desc_;
  std::optional<TestPatternRenderer> renderer_;
  std::int64_t start_ns_ = 0;
  std::uint64_t next_ = 0;
};

// The per-source settings the stage's parameters give (sources added at run time start from them too).
SourceOptions source_defaults(const ParamValues& p) {
  SourceOptions o;
  o.leaky = p.choice("source_policy", kLeakyChoices);
  o.rate_limit = p.number("rate_limit");
  o.loop = p.boolean("loop");
  o.decode_threads = static_cast<int>(p.integer("decode_threads"));
  o.stall_timeout_s = p.number("stall_timeout_s");
  o.backoff_initial_s = p.number("backoff_initial_s");
  o.backoff_max_s = p.number("backoff_max_s");
  o.max_attempts = static_cast<int>(p.integer("max_attempts"));
  o.reader.fit = *parse_fit(p.string("fit"));
  o.reader.codec_threads = static_cast<int>(p.integer("codec_threads"));
  o.reader.width = static_cast<int>(p.integer("width"));
  o.reader.height = static_cast<int>(p.integer("height"));
  o.reader.fps = p.number("fps");
  o.reader.fourcc = p.string("camera_fourcc");
  o.reader.decoder = p.choice("decoder", kDecoderChoices);
  o.reader.open_timeout_s = p.number("open_timeout_s");
  o.reader.rtsp_over_udp = p.choice("rtsp_transport", kRtspTransportChoices);
  o.reader.read_timeout_s = p.number("read_timeout_s");
  o.reader.url_max_bytes = p.integer("url_max_mb") << 20;
  o.reader.frames = static_cast<std::uint64_t>(p.integer("frames"));
  o.reader.seed = static_cast<std::uint64_t>(p.integer("seed"));
  o.reader.animate = p.boolean("animate");
  return o;
}

// Source sets whose threads were stuck at close: kept reachable and never freed, since a stuck thread may
// wake up and touch its set at any time.
void abandon(std::unique_ptr<SourceSet> set) {
  static std::mutex mu;
  static auto* abandoned = new std::vector<std::unique_ptr<SourceSet>>;
  std::lock_guard lock(mu);
  abandoned->push_back(std::move(set));
}

// A source added at run time, as it was asked for (a reload carries it over, or adds it again).
struct AddedSource {
  std::uint32_t id;
  std::string name;
  SourceOptions request;
};

// What the decode stage a reload replaces hands to the new generation's: its source set, once its own
// thread has let go of it (close()), and the sources added at run time. The new stage takes it in open().
struct SourceBaton {
  std::mutex mu;
  std::unique_ptr<SourceSet> set;  // null when the old stage never got to hand it over (it was stuck)
  std::vector<AddedSource> added;
  ~SourceBaton() {  // handed over but never taken (stopped during the reload): stopped here, never waited on forever
    if (set && !set->stop_within(std::chrono::seconds(5))) abandon(std::move(set));
  }
};

// Everything that decides how a source reads and what it decodes, its name aside: equal settings let a
// running source go on across a reload without reconnecting.
bool same_settings(const SourceOptions& a, const SourceOptions& b) {
  const auto reading = [](const SourceOptions& o) {
    return std::tie(o.uri, o.leaky, o.rate_limit, o.loop, o.decode_threads, o.stall_timeout_s, o.backoff_initial_s,
                    o.backoff_max_s, o.max_attempts, o.reader.width, o.reader.height, o.reader.fps, o.reader.fourcc,
                    o.reader.decoder, o.reader.open_timeout_s, o.reader.read_timeout_s, o.reader.rtsp_over_udp, o.reader.frames,
                    o.reader.seed, o.reader.animate, o.reader.fit, o.reader.codec_threads, o.reader.url_max_bytes);
  };
  return reading(a) == reading(b);
}

// Streams (cameras, network streams, endless test patterns) go on across a reload. Files and jobs start
// again in the new generation: their per-input outputs and the job ledger belong to one pipeline.
bool carries_over(const SourceOptions& o) { return carries_over_reload(o.uri, o.reader); }

// A directory, a glob pattern or a fed stream of inputs: a batch job, which keeps a ledger when `resume` is on.
bool names_a_job(const std::string& uri) {
  const SourceKind& kind = source_kind_of(uri);
  return kind.names_job && kind.names_job(uri);
}

class ManagedSourceStage final : public Stage, public SourceControl {
 public:
  explicit ManagedSourceStage(const StageInit& init)
      : uris_(init.params.strings("uri")),
        defaults_(source_defaults(init.params)),
        idle_wait_(init.params.choice("idle", kIdleWaitChoices)),
        resume_(init.params.boolean("resume")),
        ring_frames_(static_cast<int>(init.params.integer("ring_frames"))),
        stop_timeout_(std::chrono::milliseconds(static_cast<std::int64_t>(init.params.number("stop_timeout_s") * 1000))),
        batch_timeout_ns_(init.batch_timeout_us * 1000),
        budget_ns_(init.latency_budget_ns),
        shared_(init.shared ? init.shared : std::make_shared<PipelineShared>()),
        desc_(frames_desc(init, true)) {
    if (init.params.was_given("source"))
      throw ConfigError("give either 'source: testsrc' (one pattern rendered directly) or 'uri' (managed sources), not both");
    if (init.params.was_given("source_id"))
      throw ConfigError("'source_id' is for the directly rendered test pattern; managed sources get ids in order");
    for (const auto& uri : uris_) {
      if (uri.empty()) throw ConfigError("'uri' has an empty entry");
      // What the kind checks (a fed job's options) is checked with the file, not at run time.
      if (const SourceKind& kind = source_kind_of(uri); kind.check) {
        try {
          kind.check(uri);
        } catch (const std::invalid_argument& e) {
          throw ConfigError(std::string("'uri': ") + e.what());  // the kind's message never echoes a password
        }
      }
    }
    state_dir_ = init.params.string("state_dir");
    if (state_dir_.empty()) state_dir_ = init.state_dir;
    job_name_ = std::filesystem::path(init.pipeline_file).stem().string();
    if (job_name_.empty()) job_name_ = "pipeline";
    runs_job_ = resume_ && std::any_of(uris_.begin(), uris_.end(), names_a_job);
    if (runs_job_) shared_->job_gate.expect();
  }

  PayloadDesc output() const override { return desc_; }
  // Device batches: each frame is one async copy into the batch on this stage's stream.
  bool uses_gpu() const override { return desc_.memory == MemoryKind::device; }

  void open(StageContext&) override {
    {
      // Before any source starts: they skip what the job finished. The sink waits for it (JobGate).
      struct Opened {
        JobGate& gate;
        ~Opened() { gate.opened(); }
      } opened{shared_->job_gate};
      open_job();
    }
    std::unique_ptr<SourceSet> handed;
    std::vector<AddedSource> carried;
    {
      std::lock_guard lock(mu_);  // with the baton's: remove_source sees the sources in the baton or in sources_
      if (baton_in_) {
        std::lock_guard baton_lock(baton_in_->mu);
        handed = std::move(baton_in_->set);
        carried = baton_in_->added;
      }
    }
    if (handed) {
      std::unique_lock lock(mu_);
      if (!sources_) {
        sources_ = std::move(handed);
        sources_->rebind(shared_);
        sources_->set_latency_budget(budget_ns_);  // the new file's
        added_ = std::move(carried);
        take_over_sources();
        return;
      }
      // A source was added while the old generation drained, so a set runs already: the handed-over one
      // stops (its streams reconnect in this one).
      lock.unlock();
      retire(std::move(handed));
    }
    std::lock_guard lock(mu_);
    SourceSet& set = running_set();
    for (const auto& uri : uris_) {
      SourceOptions o = defaults_;
      o.uri = uri;
      set.add_source(std::move(o));
    }
    for (const AddedSource& a : carried) {
      try {
        add_source_locked(a.request);
      } catch (const std::exception& e) {
        spdlog::error("source {} ('{}'), added at run time, could not be carried over the reload: {}", a.request.uri,
                      a.name, e.what());
      }
    }
  }

  // The job ledger of directory/glob sources (taken after the old generation let go of it).
  void open_job() {
    if (runs_job_) {
      if (state_dir_.empty())
        throw StageError("resumable jobs need a state directory: set 'state_dir', run under systemd "
                         "(StateDirectory=), or pass --state-dir; or set 'resume: false'");
      shared_->job = std::make_shared<JobLedger>(job_ledger_path(state_dir_, job_name_, uris_));
      if (shared_->job->resumed_count() > 0)
        spdlog::info("resuming the job: {} inputs finished in earlier runs ({})", shared_->job->resumed_count(),
                     shared_->job->path().string());
    }
  }

  BatchLease process(Batch*, StageContext& ctx) override {
    if (ended_) return {};
    BatchLease batch = ctx.acquire();
    if (!batch) return {};
    static const std::atomic<bool> never{false};
    while (true) {
      const bool stopping = ctx.stopping();
      if (stopping && handing_over()) {  // a reload: the sources go on in the next generation (close())
        ended_ = true;
        return {};
      }
      if (stopping && !stopped_) {
        sources_->stop_all();  // what they decoded already still goes out
        stopped_ = true;
        stop_seen_ns_ = now_ns();
      }
      // Waiting for frames is not work: the runner keeps it out of the stage's host time.
      sources_->take(*batch, batch_timeout_ns_, stopping ? never : *ctx.stop, idle_wait_ && !stopping,
                     &ctx.pacing_wait_ns, ctx.stream, shared_->downstream.ns(), ctx.piece_timer);
      if (batch->count > 0) return batch;
      if (ctx.pausing()) return {};  // nothing made: the runner waits at its pause gate, then calls again
      // A source thread stuck in a blocking open or read must not hold the stop up: past stop_timeout_s
      // nothing more is waited for (close() abandons what is still stuck).
      const bool waited_enough = stopping && now_ns() - stop_seen_ns_ > stop_timeout_.count() * 1'000'000;
      if ((stopping || !idle_wait_) && (sources_->exhausted() || waited_enough)) {
        ended_ = true;
        return {};
      }
    }
  }

  void close(StageContext&) override {
    SourceSet* set = nullptr;
    std::shared_ptr<SourceBaton> baton;
    {
      std::lock_guard lock(mu_);
      closed_ = true;
      set = sources_.get();
      baton = baton_;
    }
    if (!set) return;
    if (baton) {
      std::unique_ptr<SourceSet> handed;
      {
        std::lock_guard lock(mu_);
        final_reports_ = sources_->sources();
        handed = std::move(sources_);
      }
      handed->rebind(nullptr);  // this pipeline's tracker and ledger are going away; the next one binds it
      std::lock_guard lock(baton->mu);
      baton->set = std::move(handed);
      return;
    }
    // Without mu_: status keeps reading the set while its threads end.
    const bool all_stopped = set->stop_within(stop_timeout_);
    std::lock_guard lock(mu_);
    final_reports_ = sources_->sources();  // what status and the run summary show afterwards
    if (all_stopped) {
      sources_.reset();  // joins the decode threads (ended already)
    } else {
      // A thread stuck in open/read still points into the set: it is never freed (one set per stuck stop).
      spdlog::error("stage decode: abandoning {} source thread(s) stuck in a blocking call", 
                    std::count_if(final_reports_.begin(), final_reports_.end(),
                                  [](const SourceReport& r) { return r.state == SourceState::failed; }));
      abandon(std::move(sources_));
    }
    for (auto& r : final_reports_)
      if (r.state != SourceState::failed && r.state != SourceState::removed) r.state = SourceState::eos;
  }

  SourceControl* source_control() override { return this; }
  std::vector<SourceReport> sources() const override {
    std::lock_guard lock(mu_);
    return sources_ ? sources_->sources() : final_reports_;
  }
  std::uint32_t add_source(SourceOptions options) override {
    std::lock_guard lock(mu_);
    if (ended_ || closed_) throw std::invalid_argument("the pipeline's sources have ended");
    return add_source_locked(std::move(options));
  }
  // mu_ held.
  std::uint32_t add_source_locked(SourceOptions options) {
    SourceOptions o = defaults_;
    o.uri = options.uri;
    o.name = options.name;
    if (options.leaky) o.leaky = options.leaky;
    if (options.rate_limit > 0) o.rate_limit = options.rate_limit;
    o.loop = options.loop || o.loop;
    if (options.latency_budget_ms) o.latency_budget_ms = options.latency_budget_ms;
    SourceSet& set = running_set();  // before open() too: the set starts with it
    const std::uint32_t id = set.add_source(std::move(o));
    std::string name;
    for (const auto& r : set.sources())
      if (r.id == id) name = r.name;
    added_.push_back({id, std::move(name), std::move(options)});
    return id;
  }
  bool remove_source(const std::string& id_or_name) override {
    std::lock_guard lock(mu_);
    auto forget = [&](std::vector<AddedSource>& added) {
      std::erase_if(added, [&](const AddedSource& a) { return a.name == id_or_name || std::to_string(a.id) == id_or_name; });
    };
    if (sources_) {
      if (!sources_->remove_source(id_or_name)) return false;
      forget(added_);
      return true;
    }
    // After a reload's switch and before this stage's open() takes them over, the sources run on in the set
    // the old generation handed over (a remove there used to answer "no source" for a running source).
    if (baton_in_) {
      std::lock_guard baton_lock(baton_in_->mu);  // order: mu_, then the baton's (as open() takes them)
      if (baton_in_->set && baton_in_->set->remove_source(id_or_name)) {
        forget(baton_in_->added);
        return true;
      }
    }
    return false;
  }
  bool hand_over_to(SourceControl& next_control) override {
    auto* next = dynamic_cast<ManagedSourceStage*>(&next_control);
    if (!next || next == this) return false;
    auto baton = std::make_shared<SourceBaton>();
    {
      std::lock_guard lock(mu_);
      if (!sources_ || closed_ || ended_ || baton_ || !sources_->compatible(next->set_settings())) return false;
      baton->added = added_;
      baton_ = baton;
    }
    std::lock_guard lock(next->mu_);
    next->baton_in_ = std::move(baton);
    return true;
  }
  void stop_sources() override {
    std::lock_guard lock(mu_);
    if (sources_) sources_->stop_all();
  }
  std::vector<SourceOptions> added_at_run_time() const override {
    std::lock_guard lock(mu_);
    std::vector<SourceOptions> out;
    for (const auto& a : added_) out.push_back(a.request);
    return out;
  }

 private:
  SourceSetSettings set_settings() const {
    SourceSetSettings settings;
    settings.width = desc_.width;
    settings.height = desc_.height;
    settings.pixel = desc_.pixel;
    settings.ring_memory = desc_.memory == MemoryKind::device ? MemoryKind::pinned : desc_.memory;
    settings.batch_memory = desc_.memory;
    settings.ring_frames = ring_frames_;
    settings.latency_budget_ns = budget_ns_;
    settings.shared = shared_;
    return settings;
  }

  // The set, made on first use (open(), or a source added before it); mu_ held.
  SourceSet& running_set() {
    if (!sources_) sources_ = std::make_unique<SourceSet>(set_settings());
    return *sources_;
  }

  bool handing_over() const {
    std::lock_guard lock(mu_);
    return baton_ != nullptr;
  }

  // A set handed over by the generation before: streams of this file whose settings did not change, and
  // sources added at run time, go on as they are; the others stop, and what is new starts. mu_ held.
  void take_over_sources() {
    std::set<std::uint32_t> added_ids;
    for (const auto& a : added_) added_ids.insert(a.id);
    std::vector<bool> matched(uris_.size(), false);
    std::size_t kept = 0;
    sources_->retain(
        [&](const SourceOptions& o, std::uint32_t id, bool running) {
          if (added_ids.count(id)) return true;
          if (!running || !carries_over(o)) return false;
          for (std::size_t i = 0; i < uris_.size(); ++i) {
            SourceOptions want = defaults_;
            want.uri = uris_[i];
            if (!matched[i] && same_settings(o, want)) {
              matched[i] = true;
              ++kept;
              return true;
            }
          }
          return false;
        },
        "reload: not in the new file, or its settings changed (started again)");
    std::size_t started = 0;
    for (std::size_t i = 0; i < uris_.size(); ++i) {
      if (matched[i]) continue;
      SourceOptions o = defaults_;
      o.uri = uris_[i];
      sources_->add_source(std::move(o));
      ++started;
    }
    spdlog::info("reload: {} source(s) went on without reconnecting, {} added at run time carried over, {} started",
                 kept, added_.size(), started);
  }

  // Stops a set nobody will take (its threads end, or are abandoned when stuck).
  void retire(std::unique_ptr<SourceSet> set) {
    set->rebind(nullptr);
    if (set->stop_within(stop_timeout_)) return;  // destroyed here: its threads ended
    abandon(std::move(set));
  }

  std::vector<std::string> uris_;
  SourceOptions defaults_;
  bool idle_wait_, resume_;
  bool runs_job_ = false;  // a directory or glob with resume on: keeps a job ledger
  int ring_frames_;
  std::chrono::milliseconds stop_timeout_;
  std::int64_t batch_timeout_ns_;
  std::int64_t budget_ns_;
  std::shared_ptr<PipelineShared> shared_;
  PayloadDesc desc_;
  std::string state_dir_, job_name_;
  mutable std::mutex mu_;  // sources_ against the control thread
  std::unique_ptr<SourceSet> sources_;
  std::vector<SourceReport> final_reports_;
  std::vector<AddedSource> added_;  // added at run time and not removed
  std::shared_ptr<SourceBaton> baton_;     // set: this stage hands its sources to the next generation
  std::shared_ptr<SourceBaton> baton_in_;  // set: this stage takes the sources of the generation before
  std::int64_t stop_seen_ns_ = 0;
  bool stopped_ = false, closed_ = false;
  std::atomic<bool> ended_{false};
};

std::vector<std::string> pattern_choices() { return {std::begin(kTestPatternNames), std::end(kTestPatternNames)}; }

}  // namespace

static StageInfo decode_stage() {
  return {"decode",
          StageRole::source,
          "frame source: files, directories and globs (resumable jobs), jobs fed from a Redis stream, image "
          "sequences, V4L2 cameras, network streams and test patterns, several at once, each with its own state; on the GPU frames land in device batch "
          "memory (GPU-decoded ones without leaving it)",
          {
              {"uri", ParamType::strings, "[]",
               "sources, each its own: a video or image file, a directory or glob (a batch job: every file once), an "
               "image sequence (frames/%04d.png), /dev/videoN, rtsp:// http(s):// tcp:// udp:// URLs, testsrc:PATTERN, "
               "redis://HOST:PORT/STREAM?group=G (a job shared by many daemons: each stream entry names one input, "
               "with its own fit, decoder or max_frames if it likes; "
               "options consumer, count, block_ms, claim_idle_s, max_deliveries, dead, until_empty; docs/scale-out.md); "
               "empty: one test pattern (`pattern`) rendered directly into the batch"},
              {"source", ParamType::choice, "testsrc", "without `uri`: testsrc, the directly rendered pattern", {}, {},
               {"testsrc"}},
              {"pattern", ParamType::choice, "bars", "testsrc picture", {}, {}, pattern_choices()},
              {"width", ParamType::integer, "1920", "frame width in pixels", 16.0, 8192.0},
              {"height", ParamType::integer, "1080", "frame height in pixels", 16.0, 8192.0},
              {"format", ParamType::choice, "bgr8", "pixel format of the frames (nv12/i420: BT.601 limited range)", {}, {},
               {"bgr8", "rgb8", "gray8", "nv12", "i420"}},
              {"fit", ParamType::choice, "stretch",
               "frames of another aspect ratio (portrait video, rotated phone clips): stretch scales each axis on its "
               "own; letterbox fits the whole frame, centred on black bars; crop covers the target with the frame's "
               "centre", {}, {}, {"stretch", "letterbox", "crop"}},
              {"fps", ParamType::number, "0",
               "test patterns: frame rate (0 = as fast as possible); cameras: the rate to request (0 = its default)",
               0.0, 10000.0},
              {"frames", ParamType::integer, "0", "test patterns: frames to produce; 0 = endless (until stopped)", 0.0, {}},
              {"source_id", ParamType::integer, "0", "without `uri`: id stamped on every frame", 0.0, 65535.0},
              {"seed", ParamType::integer, "1", "seed of the noise pattern", 0.0, {}},
              {"animate", ParamType::boolean, "true",
               "false: every frame is the first picture, rendered once per pool slot, so the source costs "
               "nothing (to measure the GPU path alone)"},
              {"idle", ParamType::choice, "exit",
               "when every source has ended: exit ends the pipeline; wait keeps it up for sources added at run time",
               {}, {}, choice_names(kIdleWaitChoices)},
              {"source_policy", ParamType::choice, "auto",
               "per source, when the pipeline is behind: leaky drops the oldest decoded frame (counted), block waits; "
               "auto: cameras and streams leaky, files block", {}, {}, choice_names(kLeakyChoices)},
              {"rate_limit", ParamType::number, "0",
               "per source, frames/s; 0 = off. Files are paced, live sources drop (counted) what comes faster", 0.0,
               10000.0},
              {"loop", ParamType::boolean, "false", "files: start again at the end (demo loops, soak tests)"},
              {"decode_threads", ParamType::integer, "2", "directories/globs/redis jobs: files decoded at once", 1.0, 64.0},
              {"codec_threads", ParamType::integer, "0",
               "video files and streams: decoder threads per source; 0 = one per core, at most 16 (files) or 4 "
               "(streams, on a frame's slices only: frame threads would hold frames back)", 0.0, 64.0},
              {"ring_frames", ParamType::integer, "4",
               "decoded frames each source may hold before the pipeline takes them (pinned memory: this x frame size "
               "per source)", 1.0, 256.0},
              {"resume", ParamType::boolean, "true",
               "directories/globs/redis jobs: keep a ledger in the state directory and skip inputs finished in an "
               "earlier run (a redis job acknowledges an entry once the ledger recorded its input)"},
              {"state_dir", ParamType::string, "",
               "where job ledgers live; empty: $STATE_DIRECTORY (systemd) or --state-dir"},
              {"stall_timeout_s", ParamType::number, "5", "live: no frame for this long = stalled", 0.01, 3600.0},
              {"backoff_initial_s", ParamType::number, "0.5", "live: first reconnection delay (doubles, jittered)",
               0.01, 3600.0},
              {"backoff_max_s", ParamType::number, "30", "live: longest reconnection delay", 0.01, 86400.0},
              {"max_attempts", ParamType::integer, "0", "live: failed reconnections before giving up; 0 = never", 0.0, {}},
              {"open_timeout_s", ParamType::number, "10",
               "streams and http(s) job inputs: how long opening may take (its probe of the first pictures: 1 s + "
               "read_timeout_s at most)",
               0.1, 600.0},
              {"rtsp_transport", ParamType::choice, "tcp",
               "rtsp:// streams: tcp = RTP inside the RTSP connection (the network loses nothing); udp = RTP over UDP "
               "(lower latency). Either way a lost RTP packet (a sequence gap) fails the pictures it damages, up to "
               "the next keyframe",
               {}, {}, choice_names(kRtspTransportChoices)},
              {"stop_timeout_s", ParamType::number, "5",
               "on stop or reload: how long a source thread may take to end; one stuck longer in a blocking open or "
               "read (a FIFO without a writer, a hung mount) is reported failed and abandoned", 0.05, 600.0},
              {"read_timeout_s", ParamType::number, "5", "streams and http(s) job inputs: how long one read may block",
               0.1, 600.0},
              {"url_max_mb", ParamType::integer, "4096",
               "redis jobs: an http(s):// input larger than this many MiB fails (what is read of it counts)", 1.0,
               1048576.0},
              {"camera_fourcc", ParamType::string, "", "cameras: pixel format to request (MJPG, YUYV, ...); empty: its default"},
              {"frame_memory", ParamType::choice, "auto",
               "GPU pipelines: where the stage's batches live. device: each frame goes into the batch by one async "
               "copy on the GPU (a GPU decoder's frames never leave it; CPU-decoded ones cross PCIe once, and "
               "`upload` passes batches through); pinned: frames are copied into pinned host batches that `upload` "
               "copies. auto: device with `uri` sources, pinned for the direct test pattern", {}, {},
               choice_names(kFrameMemoryChoices)},
              {"decoder", ParamType::choice, "auto",
               "inputs a GPU decoder reads: video on NVDEC (H.264/HEVC 4:2:0 in any container or network stream FFmpeg "
               "reads, and Annex-B .h264/.264/.h265/.hevc/.265; turned upright and fitted on the GPU), .jpg/.jpeg "
               "images on nvJPEG: auto = the GPU decoder where the codec, the file and "
               "the GPU allow, else the CPU decoder (the reason logged once); gpu = the GPU decoder only (other inputs "
               "fail with the reason); cpu = never the GPU decoders", {}, {}, choice_names(kDecoderChoices)},
          },
          [](const StageInit& init) -> std::unique_ptr<Stage> {
            if (!init.params.strings("uri").empty() || init.params.choice("idle", kIdleWaitChoices))
              return std::make_unique<ManagedSourceStage>(init);
            return std::make_unique<TestSourceStage>(init);
          }};
}
SLUICE_REGISTER_STAGE(decode_stage);

}  // namespace sluice
