#include "runtime/source_set.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "runtime/frame_tap.hpp"
#include "runtime/gpu_timer.hpp"
#include "runtime/input_feed.hpp"
#include "runtime/source_kind.hpp"
#include "runtime/inputs.hpp"
#include "runtime/latency_budget.hpp"
#include "runtime/latency_budget_limit.hpp"
#include "runtime/printable.hpp"
#include "runtime/job_ledger.hpp"
#include "runtime/thread_name.hpp"
#include "runtime/utf8.hpp"

namespace sluice {

std::string_view to_string(SourceState s) noexcept {
  switch (s) {
    case SourceState::connecting: return "connecting";
    case SourceState::live: return "live";
    case SourceState::stalled: return "stalled";
    case SourceState::backoff: return "backoff";
    case SourceState::eos: return "eos";
    case SourceState::failed: return "failed";
    case SourceState::removed: return "removed";
  }
  return "?";
}

namespace {
enum class SlotState : std::uint8_t { free, writing, ready, reading };
constexpr std::size_t kBadInputsShown = 8;
}  // namespace

struct SourceSet::Source {
  std::uint32_t id = 0;
  SourceOptions options;
  std::string name;
  const SourceKind* source_kind = nullptr;  // what its URI is (runtime/source_kind.hpp)
  InputKind kind = InputKind::file;         // the reader family of its inputs
  bool live = false, leaky = false, job = false;
  std::optional<std::int64_t> budget_ns;  // its own latency budget; none: the set's
  // Ring of decoded frames: slots are claimed by a decode thread, filled without the lock, published, and
  // taken by the stage in publish order.
  Memory ring;
  // Device batches only: where a GPU decoder writes instead (made when such a reader first opens), which
  // ring each slot's frame is in, and per slot the events of the buffer/event protocol: `written` recorded
  // by the decoder's stream, `read` by the taking stage's stream after its copy out.
  Memory device_ring;
  std::vector<std::uint8_t> slot_on_device, read_recorded;  // bytes, not vector<bool>: slots change concurrently
  std::vector<Event> written, read;
  std::string decoder;  // the open input's decoder, as its reader names it
  std::vector<SlotState> slots;
  std::vector<FrameMeta> slot_meta;
  std::deque<int> ready;
  std::atomic<bool> stop{false};
  std::condition_variable wake;  // backoff waits end early on stop/removal
  std::vector<std::thread> threads;
  int running = 0;  // decode threads not yet finished
  bool joined = false;
  // Inputs of a job (or the one input), handed to decode threads in order.
  std::vector<std::pair<std::string, InputKind>> inputs;
  std::size_t next_input = 0;
  // A job fed while it runs (a fed kind: redis://): where its inputs come from, and its ear on the pipeline's outcomes.
  std::shared_ptr<InputFeed> feed;
  std::shared_ptr<PipelineShared> feed_shared;
  std::uint64_t feed_listener = 0;
  std::uint64_t inputs_fed = 0;
  ~Source() {
    if (feed_shared) feed_shared->outcomes.unlisten(feed_listener);
  }
  // State and counters (under mu_ unless atomic).
  SourceState state = SourceState::connecting;
  std::string reason;
  std::int64_t next_attempt_ns = 0;
  std::atomic<std::uint64_t> frames{0}, dropped{0}, errors{0}, reconnects{0}, sequence{0};
  std::uint64_t inputs_done = 0, inputs_failed = 0, inputs_skipped = 0;
  std::vector<std::string> bad_inputs;
  std::atomic<std::int64_t> last_frame_ns{0};
  std::uint64_t fps_frames = 0;
  std::int64_t fps_at_ns = 0;
  double fps = 0;
  std::int64_t started_ns = 0;  // when it was added: mean_fps counts from here
  bool stopped = false;         // ended by stop_all(), not at its own end
  std::int64_t removed_ns = 0;
  // Since when it is down (stalled, backing off; 0: it is not) and why, for the line that says it recovered.
  std::int64_t down_since_ns = 0;
  std::string down_reason;
  // rate_limit: when the source's next frame is due, shared by all its decode threads and inputs (under mu_).
  std::int64_t next_due_ns = 0;
  // Live sources (one decode thread): pts go on across reconnections. Each connection's timeline is shifted
  // so that its first frame comes one frame interval after the last frame of the connection before.
  std::int64_t pts_shift_ns = 0, last_pts_ns = 0;
  bool has_pts = false;
};

SourceSet::SourceSet(SourceSetSettings settings)
    : settings_(std::move(settings)), frame_bytes_(image_bytes(settings_.pixel, settings_.width, settings_.height)) {
  if (!settings_.shared) settings_.shared = std::make_shared<PipelineShared>();
  // A copy thread per 4 cores, at most 4: on a 2-core machine the stage's thread copies itself.
  const int copiers = settings_.copy_threads >= 0
                          ? settings_.copy_threads
                          : std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 4, 0, 4);
  for (int i = 0; i < copiers; ++i) copiers_.emplace_back([this] { run_copier(); });
  monitor_ = std::thread([this] { monitor(); });
}

SourceSet::~SourceSet() {
  stop_all();
  {
    std::lock_guard lock(mu_);
    monitor_exit_ = true;
  }
  monitor_wake_.notify_all();
  if (monitor_.joinable()) monitor_.join();
  for (auto& s : sources_)  // the monitor is gone: nothing else touches the threads now
    for (auto& t : s->threads)
      if (t.joinable()) t.join();
  {
    std::lock_guard lock(copy_mu_);
    copy_exit_ = true;
  }
  copy_wake_.notify_all();
  for (auto& t : copiers_) t.join();
}

void SourceSet::stop_all() {
  std::lock_guard lock(mu_);
  stopping_ = true;
  for (auto& s : sources_) {
    s->stop = true;
    if (s->feed) s->feed->stopping();
    s->wake.notify_all();
  }
  space_free_.notify_all();
  frame_ready_.notify_all();
}

bool SourceSet::stop_within(std::chrono::milliseconds bound) {
  stop_all();
  std::unique_lock lock(mu_);
  const auto all_ended = [&] {
    return std::all_of(sources_.begin(), sources_.end(), [](const auto& s) { return s->running == 0; });
  };
  if (frame_ready_.wait_for(lock, bound, all_ended)) return true;
  for (auto& s : sources_) {
    if (s->running == 0) continue;
    char why[160];
    std::snprintf(why, sizeof why, "did not stop within %.1f s (stuck in a blocking open or read); abandoned",
                  std::chrono::duration<double>(bound).count());
    spdlog::error("source '{}' ({}): {}", s->name, shown_uri(s->options.uri), why);
    s->errors++;
    if (s->state != SourceState::removed) {
      s->state = SourceState::failed;
      s->reason = why;
    }
  }
  return false;
}

std::uint32_t SourceSet::add_source(SourceOptions options) {
  if (options.uri.empty()) throw std::invalid_argument("a source needs a 'uri'");
  if (options.rate_limit < 0) throw std::invalid_argument("'rate_limit' must be >= 0");
  if (options.decode_threads < 1 || options.decode_threads > 64)
    throw std::invalid_argument("'decode_threads' must be in 1..64");
  if (options.latency_budget_ms && !(*options.latency_budget_ms >= 0 && *options.latency_budget_ms <= kMaxLatencyBudgetMs))
    throw std::invalid_argument("'latency_budget_ms' must be a number in 0..3600000 (milliseconds, 0 = none)");
  // A name is printed as it is on lines of text (the text sink's records, on the service's stdout: the journal),
  // where a newline would start a forged line and an ESC sequence drive a terminal. A default name is made of
  // safe characters; a given one holding a control or invisible character is refused.
  if (!options.name.empty() && !is_printable(options.name))
    throw std::invalid_argument("the source name '" + printable(options.name) +
                                "' holds a control or invisible character (shown escaped); give a printable name");
  if (!(options.stall_timeout_s > 0) || !(options.backoff_initial_s > 0) || options.backoff_max_s < options.backoff_initial_s)
    throw std::invalid_argument("need stall_timeout_s > 0 and 0 < backoff_initial_s <= backoff_max_s");
  const SourceKind& kind = source_kind_of(options.uri);
  if (kind.check) kind.check(options.uri);
  auto s = std::make_unique<Source>();
  s->source_kind = &kind;
  s->kind = kind.reads_as;
  s->live = kind.live();
  s->leaky = options.leaky.value_or(s->live);
  if (options.latency_budget_ms) s->budget_ns = static_cast<std::int64_t>(*options.latency_budget_ms * 1e6);
  const int threads = std::max(1, options.decode_threads);
  const int slots = std::max(2, settings_.ring_frames) + threads;
  s->ring = Memory(settings_.ring_memory, frame_bytes_ * static_cast<std::size_t>(slots));
  s->slots.assign(static_cast<std::size_t>(slots), SlotState::free);
  s->slot_meta.resize(static_cast<std::size_t>(slots));
  s->options = std::move(options);
  Source& source = *s;
  {
    std::lock_guard lock(mu_);
    if (stopping_) throw std::invalid_argument("the pipeline is stopping");
    source.id = next_id_++;
    std::string name = source.options.name.empty() ? default_source_name(source.options.uri) : source.options.name;
    for (const auto& other : sources_)
      if (other->name == name && other->state != SourceState::removed) {  // a removed one's name is free again
        if (!source.options.name.empty()) throw std::invalid_argument("a source named '" + name + "' exists already");
        name += "-" + std::to_string(source.id);
        break;
      }
    source.name = name;
    source.started_ns = now_ns();
    source.running = 1;
    sources_.push_back(std::move(s));
    if (settings_.shared) settings_.shared->inputs.name_source(source.id, source.name);
    source.threads.emplace_back([this, &source] { run_worker(source, 0); });
  }
  spdlog::info("source '{}' (id {}) added: {} ({}{})", source.name, source.id, shown_uri(source.options.uri), source.source_kind->name,
               source.leaky ? ", leaky" : ", blocking");
  return source.id;
}

bool SourceSet::remove_source(const std::string& id_or_name) {
  std::lock_guard lock(mu_);
  for (auto& s : sources_) {
    const bool by_id = std::to_string(s->id) == id_or_name;
    if (s->name != id_or_name && !by_id) continue;
    if (s->state == SourceState::removed) {
      if (by_id) return true;
      continue;  // a later source may carry the name now
    }
    s->stop = true;
    if (s->feed) s->feed->stopping();
    s->state = SourceState::removed;
    s->reason = "removed at run time";
    s->removed_ns = now_ns();
    s->wake.notify_all();
    space_free_.notify_all();
    spdlog::info("source '{}' (id {}) removed; frames it decoded still flow", s->name, s->id);
    return true;
  }
  return false;
}

void SourceSet::set_state(Source& s, SourceState state, std::string reason) {
  std::lock_guard lock(mu_);
  if (s.state == SourceState::removed) return;  // final
  if (s.state != state) {
    if (state == SourceState::backoff || state == SourceState::failed || state == SourceState::stalled)
      spdlog::warn("source '{}': {} -> {}: {}", s.name, to_string(s.state), to_string(state), reason);
    else
      spdlog::debug("source '{}': {} -> {}", s.name, to_string(s.state), to_string(state));
  }
  if ((state == SourceState::backoff || state == SourceState::stalled) && !s.down_since_ns) {
    s.down_since_ns = now_ns();
    s.down_reason = reason;
  }
  s.state = state;
  if (!reason.empty() || state == SourceState::live) s.reason = std::move(reason);
}

void SourceSet::run_worker(Source& s, int worker) {
  name_this_thread(kSourceThreadName);
  if (worker == 0) {
    // Expanding a directory or glob touches the filesystem: done here, not in add_source().
    try {
      std::shared_ptr<InputFeed> feed;
      ExpandedSource expanded;
      const SourceKind& kind = *s.source_kind;
      if (kind.fed()) {
        feed = kind.open_feed(s.options.uri);
        expanded.job = true;
      } else {
        expanded = kind.inputs_of(s.options.uri);
      }
      std::lock_guard lock(mu_);
      s.inputs = std::move(expanded.inputs);
      s.job = expanded.job;
      if (feed) {
        s.feed = feed;
        s.feed_shared = settings_.shared;
        if (s.feed_shared)
          s.feed_listener = s.feed_shared->outcomes.listen(
              s.id, [feed](const InputResult& r) { feed->settled(r); },
              [feed](const InputResult& r) { return feed->still_ours(r.uri, r.options); },
              [feed](const InputResult& r) { return feed->retries(r.uri, r.options); });
      }
      const int extra = s.feed ? s.options.decode_threads - 1
                        : s.job ? std::min<int>(s.options.decode_threads, static_cast<int>(s.inputs.size())) - 1
                                : 0;
      for (int w = 1; w <= extra && !s.stop; ++w) {
        s.running++;
        s.threads.emplace_back([this, &s, w] { run_worker(s, w); });
      }
    } catch (const std::exception& e) {
      s.errors++;
      set_state(s, SourceState::failed, e.what());
      std::lock_guard lock(mu_);
      s.running--;
      frame_ready_.notify_all();
      monitor_wake_.notify_all();
      return;
    }
  }
  if (s.feed) run_feed(s);
  else if (s.live) run_live(s);
  else run_files(s);
  std::lock_guard lock(mu_);
  if (--s.running == 0 && s.state != SourceState::removed && s.state != SourceState::failed) {
    if (!s.live && !s.job && s.inputs_failed > 0 && s.inputs_done == 0) {
      s.state = SourceState::failed;  // its one input could not be read; reason already set
    } else {
      s.state = SourceState::eos;
      s.stopped = s.stop.load();  // a removal is state removed; a stop of the whole set ends it early
      if (s.job)
        s.reason = std::to_string(s.inputs_done) + " done, " + std::to_string(s.inputs_failed) + " failed, " +
                   std::to_string(s.inputs_skipped) + " skipped (done in an earlier run)";
    }
  }
  frame_ready_.notify_all();  // take() may be waiting to learn that everything ended
  monitor_wake_.notify_all();
}

void SourceSet::run_files(Source& s) {
  while (!s.stop) {
    std::pair<std::string, InputKind> input;
    {
      std::lock_guard lock(mu_);
      if (s.next_input >= s.inputs.size()) {
        if (!s.options.loop || s.inputs.empty() || s.inputs_done == 0) break;
        s.next_input = 0;  // loop: start over (only once something could be read)
      }
      input = s.inputs[s.next_input++];
    }
    std::shared_ptr<JobLedger> job;
    if (s.job) {
      std::lock_guard lock(mu_);
      if (settings_.shared) job = settings_.shared->job;
    }
    if (job && job->finished(input.first)) {
      std::lock_guard lock(mu_);
      s.inputs_skipped++;
      continue;
    }
    std::string error;
    if (!read_input(s, input.first, input.second, false, error)) break;
    count_input(s, input.first, error);
  }
}

void SourceSet::count_input(Source& s, const std::string& uri, const std::string& error) {
  // Said when it happens (a service's job may run for days before its summary), not only counted.
  if (!error.empty()) spdlog::warn("source '{}': input {} failed: {}", s.name, shown_uri(uri), to_valid_utf8(error));
  std::lock_guard lock(mu_);
  if (error.empty()) {
    s.inputs_done++;
    return;
  }
  s.inputs_failed++;
  s.errors++;
  s.reason = shown_uri(uri) + ": " + error;
  if (s.bad_inputs.size() < kBadInputsShown) s.bad_inputs.push_back(s.reason);
}

void SourceSet::run_feed(Source& s) {
  bool troubled = false;
  while (!s.stop) {
    FedInput input;
    const InputFeed::Poll poll = s.feed->next(input, std::chrono::milliseconds(250));
    if (poll == InputFeed::Poll::ended) {
      if (const std::string why = s.feed->failure(); !why.empty()) {
        s.errors++;
        set_state(s, SourceState::failed, why);
      }
      break;
    }
    if (poll == InputFeed::Poll::idle) {
      // The feed's server gone: the source says so (backing off) until it is back.
      if (std::string why = s.feed->trouble(); !why.empty()) {
        troubled = true;
        set_state(s, SourceState::backoff, std::move(why));
      } else if (troubled) {
        troubled = false;
        set_state(s, SourceState::connecting);
      }
      continue;
    }
    std::shared_ptr<JobLedger> job;
    {
      std::lock_guard lock(mu_);
      s.inputs_fed++;
      if (settings_.shared) job = settings_.shared->job;
    }
    // Done in an earlier run with the same options (and unchanged since): settled without doing it again. One
    // that failed is tried again: an entry for it was submitted anew.
    const std::string options = input.options.text();
    if (job) {
      if (const auto finished = job->finished_unchanged(input.uri, options); finished && !finished->failed) {
        s.feed->settled({s.id, input.uri, InputOutcome::done, {}, options, /*earlier=*/true});
        std::lock_guard lock(mu_);
        s.inputs_skipped++;
        continue;
      }
    }
    std::string error;
    if (!read_input(s, input.uri, input.kind, false, error, input.options)) break;
    count_input(s, input.uri, error);
  }
}

void SourceSet::run_live(Source& s) {
  const auto& [uri, kind] = s.inputs.front();
  int attempt = 0;
  while (!s.stop) {
    const std::uint64_t before = s.frames.load();
    std::string error;
    if (!read_input(s, uri, kind, true, error)) return;
    if (s.frames.load() > before) attempt = 0;  // it worked for a while: start the delays over
    ++attempt;
    s.errors++;
    if (error.empty()) error = "the stream ended";
    if (s.options.max_attempts > 0 && attempt > s.options.max_attempts) {
      set_state(s, SourceState::failed,
                error + " (gave up after " + std::to_string(s.options.max_attempts) + " reconnection attempts)");
      return;
    }
    // Jittered exponential backoff: the delay doubles per failed attempt up to the maximum, and each is
    // drawn from [delay/2, delay] so that many cameras behind one outage do not reconnect in lockstep.
    const double ceiling = std::min(s.options.backoff_max_s, s.options.backoff_initial_s * std::pow(2.0, attempt - 1));
    double delay;
    {
      std::lock_guard lock(mu_);
      delay = std::uniform_real_distribution<double>(ceiling / 2, ceiling)(jitter_rng_);
      s.next_attempt_ns = now_ns() + static_cast<std::int64_t>(delay * 1e9);
    }
    set_state(s, SourceState::backoff, error);
    if (!wait_backoff(s, delay)) return;
    s.reconnects++;
  }
}

bool SourceSet::wait_backoff(Source& s, double seconds) {
  std::unique_lock lock(mu_);
  s.wake.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return s.stop.load(); });
  return !s.stop;
}

bool SourceSet::read_input(Source& s, const std::string& uri, InputKind kind, bool live, std::string& error,
                           const InputOptions& options) {
  // The pipeline this input's frames go to; a reload may rebind the set to the next one (see below).
  std::shared_ptr<PipelineShared> shared;
  std::uint64_t epoch = 0;
  {
    std::lock_guard lock(mu_);
    shared = settings_.shared ? settings_.shared : std::make_shared<PipelineShared>();
    epoch = epoch_;
  }
  InputTracker* tracker = &shared->inputs;
  set_state(s, SourceState::connecting);
  std::unique_ptr<FrameReader> reader;
  const bool device_batches = settings_.batch_memory == MemoryKind::device;
  ReaderOptions reader_options = s.options.reader;
  options.apply(reader_options);  // the input's own options win over the source's
  const std::string options_text = options.text();
  reader_options.device_frames = device_batches && !shared->tap;  // the tap draws on host copies
  bool device_target = false;
  try {
    reader = ReaderRegistry::global().open(kind, uri, reader_options);
    device_target = reader_options.device_frames && reader->writes_device_memory();
    if (device_batches) prepare_device_slots(s, device_target);
  } catch (const std::exception& e) {
    error = e.what();
    const auto* input_error = dynamic_cast<const InputError*>(&e);
    if (!live)  // listed, recorded failed by a job (or tried again by its feed, when the failure may pass)
      tracker->end(tracker->begin(s.id, uri, kind, 0, options_text), error, input_error && input_error->transient);
    return !s.stop;
  }
  const InputInfo& info = reader->info();
  {
    std::lock_guard lock(mu_);
    s.decoder = info.backend + (device_target ? " (frames stay on the GPU)" : "");
  }
  const std::int64_t frames_total = options.max_frames && info.frames_total >= 0
                                        ? std::min(info.frames_total, static_cast<std::int64_t>(options.max_frames))
                                        : info.frames_total;
  std::uint32_t input = tracker->begin(s.id, uri, kind, frames_total, options_text);
  set_state(s, SourceState::live);
  const double rate = s.options.rate_limit;
  const std::int64_t period_ns = rate > 0 ? static_cast<std::int64_t>(1e9 / rate) : 0;
  const double native_fps = info.fps > 0 ? info.fps : 30.0;
  bool ended = false, transient = false;
  for (std::uint64_t index = 0; !s.stop; ++index) {
    if (options.max_frames && index >= options.max_frames) {  // the input's own limit: done here
      ended = true;
      break;
    }
    if (period_ns && !live) {
      // Files: pace to the rate limit (blocking sources never drop). The limit is the source's: the decode
      // threads of a job take turns at it, each frame one period after the one before.
      std::unique_lock lock(mu_);
      const std::int64_t due = std::max(s.next_due_ns, now_ns());
      s.next_due_ns = due + period_ns;
      if (const std::int64_t wait = due - now_ns(); wait > 0)
        s.wake.wait_for(lock, std::chrono::nanoseconds(wait), [&] { return s.stop.load(); });
      if (s.stop) break;
    }
    const int slot = claim_slot(s);
    if (slot < 0) break;
    const FrameTarget target = slot_target(s, slot, device_target);
    std::string why;
    const ReadStatus status = reader->read(target, why);
    if (status != ReadStatus::frame && status != ReadStatus::failed) {
      release_slot(s, slot);
      ended = true;
      if (status == ReadStatus::error) {
        error = why;
        transient = reader->failed_transiently();
      }
      break;
    }
    {
      // Handed over to a new pipeline (reload): the input goes on in its tracker.
      std::unique_lock lock(mu_);
      if (epoch != epoch_ && settings_.shared) {
        std::shared_ptr<PipelineShared> next = settings_.shared;
        epoch = epoch_;
        lock.unlock();
        tracker->interrupt(input);
        shared = std::move(next);
        tracker = &shared->inputs;
        input = tracker->begin(s.id, uri, kind, frames_total, options_text);
      }
    }
    const std::int64_t now = now_ns();
    FrameMeta meta;
    meta.source_id = s.id;
    meta.sequence = s.sequence++;
    const std::optional<std::int64_t> pts = reader->pts_ns();  // the container's clock where there is one
    meta.pts_ns = pts ? *pts : static_cast<std::int64_t>(static_cast<double>(index) * 1e9 / native_fps);
    if (live) {  // a new connection's clock starts anywhere (often at 0 again): it continues the source's
      if (index == 0 && s.has_pts)
        s.pts_shift_ns = s.last_pts_ns + static_cast<std::int64_t>(1e9 / native_fps) - meta.pts_ns;
      meta.pts_ns += s.pts_shift_ns;
      s.last_pts_ns = meta.pts_ns;
      s.has_pts = true;
    }
    // A live stream's frame counts from when its coded picture arrived, so demuxing and decoding are in its latency.
    const std::optional<std::int64_t> arrived = live ? reader->arrived_ns() : std::nullopt;
    meta.capture_ns = arrived && *arrived <= now ? *arrived : now;
    meta.wall_ns = wall_ns();
    meta.input = input;
    meta.input_frame = index;
    tracker->decoded(input);
    if (status == ReadStatus::failed) {  // this frame is lost (the decoder reported it corrupt); the input goes on
      release_slot(s, slot);
      s.errors++;
      std::lock_guard lock(mu_);
      if (epoch != epoch_) meta.input = 0;
      fail_frame(s, meta, why);
      continue;
    }
    s.last_frame_ns = now;
    if (period_ns && live) {
      bool over;
      {
        std::lock_guard lock(mu_);
        over = now < s.next_due_ns;
        if (!over) s.next_due_ns = std::max(s.next_due_ns + period_ns, now - period_ns);
      }
      if (over) {  // live: over the rate limit, this frame goes
        release_slot(s, slot);
        std::lock_guard lock(mu_);
        if (epoch != epoch_) meta.input = 0;
        drop_frame(s, meta, "rate limit");
        continue;
      }
    }
    if (const auto& tap = shared->tap) tap->put(meta, target);
    publish(s, slot, meta, epoch);
  }
  if (ended) {
    tracker->end(input, error, transient);
  } else {  // stopped (shutdown, removal) before its end
    bool removed;
    {
      std::lock_guard lock(mu_);
      removed = s.state == SourceState::removed;
    }
    tracker->interrupt(input, removed);
  }
  return !s.stop;
}

int SourceSet::claim_slot(Source& s) {
  std::unique_lock lock(mu_);
  while (true) {
    if (s.stop) return -1;
    for (std::size_t i = 0; i < s.slots.size(); ++i)
      if (s.slots[i] == SlotState::free) {
        s.slots[i] = SlotState::writing;
        return static_cast<int>(i);
      }
    if (s.leaky && !s.ready.empty()) {
      // Live and the pipeline is behind: the oldest decoded frame makes room for the newest.
      const int oldest = s.ready.front();
      s.ready.pop_front();
      s.slots[static_cast<std::size_t>(oldest)] = SlotState::writing;
      drop_frame(s, s.slot_meta[static_cast<std::size_t>(oldest)], "pipeline behind (leaky: oldest)");
      return oldest;
    }
    space_free_.wait(lock);
  }
}

void SourceSet::publish(Source& s, int slot, FrameMeta meta, std::uint64_t epoch) {
  {
    std::lock_guard lock(mu_);
    if (epoch != epoch_) meta.input = 0;  // decoded for the pipeline before a reload: its input is not here
    meta.budget_ns = s.budget_ns.value_or(settings_.latency_budget_ns);
    s.slots[static_cast<std::size_t>(slot)] = SlotState::ready;
    s.slot_meta[static_cast<std::size_t>(slot)] = meta;
    s.ready.push_back(slot);
    s.frames++;
    if (s.state == SourceState::stalled || s.state == SourceState::connecting) {
      s.state = SourceState::live;
      s.reason.clear();
    }
    if (s.down_since_ns) {  // frames flow again after a stall or a reconnection: one line says so
      spdlog::info("source '{}' recovered: frames again after {:.1f} s down ({} reconnection(s) so far; it went down: {})",
                   s.name, static_cast<double>(now_ns() - s.down_since_ns) / 1e9, s.reconnects.load(), s.down_reason);
      s.down_since_ns = 0;
      s.down_reason.clear();
    }
  }
  frame_ready_.notify_one();
}

void SourceSet::release_slot(Source& s, int slot) {
  {
    std::lock_guard lock(mu_);
    s.slots[static_cast<std::size_t>(slot)] = SlotState::free;
  }
  space_free_.notify_all();
}

void SourceSet::prepare_device_slots(Source& s, bool device_ring) {
  std::lock_guard lock(mu_);  // several decode threads of one job may open inputs at once
  try {
    const std::size_t n = s.slots.size();
    if (s.read.empty()) {
      std::vector<Event> written, read;
      for (std::size_t i = 0; i < n; ++i) {
        written.push_back(Event::create());
        read.push_back(Event::create());
      }
      s.slot_on_device.assign(n, 0);
      s.read_recorded.assign(n, 0);
      s.written = std::move(written);
      s.read = std::move(read);
    }
    if (device_ring && !s.device_ring.data()) s.device_ring = Memory(MemoryKind::device, s.ring.bytes());
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("cannot set up its frame slots on the GPU: ") + e.what());
  }
}

FrameTarget SourceSet::slot_target(Source& s, int slot, bool device) {
  // The slot is this thread's (writing): nothing else touches its entries until it is published.
  const auto i = static_cast<std::size_t>(slot);
  const std::size_t offset = frame_bytes_ * i;
  FrameTarget t{s.ring.data() + offset, settings_.width, settings_.height, settings_.pixel};
  if (s.read.empty()) return t;  // host batches: the stage copied the slot out before freeing it
  s.slot_on_device[i] = device ? 1 : 0;
  if (device) {
    t.data = s.device_ring.data() + offset;
    t.device = true;
    t.written = s.written[i].get();
    if (s.read_recorded[i]) t.reusable = s.read[i].get();
  } else if (s.read_recorded[i]) {
    gpu::event_synchronize(s.read[i].get());  // the copy into the last batch must be done before the host writes
  }
  return t;
}

void SourceSet::enqueue_device_copy(std::byte* dst, Source& from, int slot, gpu::StreamHandle stream,
                                    GpuTimer* timer) {
  const auto i = static_cast<std::size_t>(slot);
  const std::byte* src = (from.slot_on_device[i] ? from.device_ring : from.ring).data() + frame_bytes_ * i;
  if (from.slot_on_device[i]) gpu::stream_wait_event(stream, from.written[i].get());
  // Timed after the wait: the decoder's conversion on the source's own stream is not this stage's work.
  if (timer) timer->begin(stream, from.slot_meta[i].sequence, 1);
  gpu::copy_async(dst, src, frame_bytes_, stream);
  if (timer) timer->end(stream, false);
  gpu::event_record(from.read[i].get(), stream);
  from.read_recorded[i] = 1;
  // Free at once: the next writer orders itself after `read` (slot_target), not the host after the copy.
  from.slots[i] = SlotState::free;
}

// A decoded frame that never enters a batch is produced and settled at once (dropped, or failed with the
// decoder's reason), so the totals still add up.
void SourceSet::drop_frame(Source& s, FrameMeta meta, const char* why) {
  s.dropped++;
  settle_outside_batch(meta, FrameFate::dropped, "source '" + s.name + "': " + why);
}

void SourceSet::fail_frame(Source& s, FrameMeta meta, const std::string& why) {
  settle_outside_batch(meta, FrameFate::failed,
                       "source '" + s.name + "': frame " + std::to_string(meta.input_frame) + ": " + why);
}

void SourceSet::settle_outside_batch(FrameMeta meta, FrameFate fate, const std::string& reason) {
  FrameLedger* ledger = settings_.shared ? settings_.shared->ledger : nullptr;
  if (!ledger) {  // between two pipelines: the next one counts it
    (fate == FrameFate::dropped ? unbound_drops_ : unbound_failures_)[reason].push_back(meta);
    return;
  }
  const std::span<const FrameMeta> frame(&meta, 1);
  ledger->produced(frame);
  if (fate == FrameFate::dropped) ledger->dropped(frame, reason);
  else ledger->failed(frame, reason);
  settings_.shared->inputs.settle(frame, fate);
}

bool SourceSet::compatible(const SourceSetSettings& o) const {
  return o.width == settings_.width && o.height == settings_.height && o.pixel == settings_.pixel &&
         o.ring_memory == settings_.ring_memory && o.batch_memory == settings_.batch_memory &&
         o.ring_frames == settings_.ring_frames &&
         o.copy_threads == settings_.copy_threads;
}

void SourceSet::rebind(std::shared_ptr<PipelineShared> shared) {
  std::lock_guard lock(mu_);
  settings_.shared = std::move(shared);
  ++epoch_;
  for (auto& s : sources_) {
    for (const int slot : s->ready) s->slot_meta[static_cast<std::size_t>(slot)].input = 0;
    if (settings_.shared) settings_.shared->inputs.name_source(s->id, s->name);
  }
  if (settings_.shared && settings_.shared->ledger) {
    for (const auto& [reason, frames] : unbound_drops_) {
      settings_.shared->ledger->produced(frames);
      settings_.shared->ledger->dropped(frames, reason + " (during a reload)");
    }
    unbound_drops_.clear();
    for (const auto& [reason, frames] : unbound_failures_) {
      settings_.shared->ledger->produced(frames);
      settings_.shared->ledger->failed(frames, reason + " (during a reload)");
    }
    unbound_failures_.clear();
  }
}

void SourceSet::retain(const std::function<bool(const SourceOptions&, std::uint32_t, bool)>& keep, const std::string& why) {
  std::lock_guard lock(mu_);
  for (auto& s : sources_) {
    if (s->state == SourceState::removed) continue;
    const bool running = s->running > 0 && s->state != SourceState::failed;
    if (keep(s->options, s->id, running)) continue;
    s->stop = true;
    if (s->feed) s->feed->stopping();
    s->state = SourceState::removed;
    s->reason = why;
    s->removed_ns = now_ns();
    s->wake.notify_all();
    spdlog::info("source '{}' (id {}) stopped: {}", s->name, s->id, why);
  }
  space_free_.notify_all();
}

void SourceSet::set_latency_budget(std::int64_t ns) {
  std::lock_guard lock(mu_);
  settings_.latency_budget_ns = ns;
}

int SourceSet::take(Batch& batch, std::int64_t batch_timeout_ns, const std::atomic<bool>& stop, bool wait_when_idle,
                    std::int64_t* waited_ns, gpu::StreamHandle stream, std::int64_t downstream_ns, GpuTimer* timer) {
  const bool device_batch = batch.memory.kind() == MemoryKind::device;
  if (device_batch && !stream) throw std::logic_error("SourceSet::take: a device batch needs a stream");
  int added = 0;
  bool waited = false;
  std::int64_t deadline = 0;
  std::int64_t budget_deadline = kNoDeadline;  // the earliest a frame in the batch must leave to make its budget
  for (const FrameMeta& f : batch.frames) budget_deadline = std::min(budget_deadline, dispatch_deadline(f, downstream_ns));
  std::unique_lock lock(mu_);
  while (batch.count < batch.desc.batch) {
    // The next source with a frame, in turn after the one served last, so one busy source cannot starve others.
    Source* from = nullptr;
    const std::size_t n = sources_.size();
    auto it = sources_.begin();
    std::advance(it, n ? round_robin_ % n : 0);
    for (std::size_t k = 0; k < n; ++k) {
      if (it == sources_.end()) it = sources_.begin();
      if (!(*it)->ready.empty()) {
        from = it->get();
        round_robin_ = (round_robin_ + k + 1) % n;
        break;
      }
      ++it;
    }
    if (from) {
      const int slot = from->ready.front();
      from->ready.pop_front();
      from->slots[static_cast<std::size_t>(slot)] = SlotState::reading;
      batch.frames.push_back(from->slot_meta[static_cast<std::size_t>(slot)]);
      budget_deadline = std::min(budget_deadline, dispatch_deadline(batch.frames.back(), downstream_ns));
      std::byte* const dst = batch.item(batch.count);
      batch.count++;
      if (added++ == 0) deadline = now_ns() + batch_timeout_ns;
      if (device_batch) {
        enqueue_device_copy(dst, *from, slot, stream, timer);
        space_free_.notify_all();
        continue;
      }
      const CopyJob job{dst, from, slot};
      lock.unlock();
      copy_frame(job);  // on a copy thread when there are any: the slot is freed when the copy is done
      lock.lock();
      continue;
    }
    if (added == 0) {
      if (stop.load(std::memory_order_relaxed)) break;
      bool alive = false;
      for (const auto& s : sources_) alive = alive || s->running > 0;
      if (!alive && !wait_when_idle) break;  // nothing can arrive any more
      if (waited) break;                     // the caller looks at stop/pause and calls again
      const std::int64_t t0 = now_ns();
      frame_ready_.wait_for(lock, std::chrono::milliseconds(50));
      if (waited_ns) *waited_ns += now_ns() - t0;
      waited = true;
    } else {
      // A fuller batch is not worth a frame's budget: leave at the timeout or the first frame's deadline.
      const std::int64_t left = std::min(deadline, budget_deadline) - now_ns();
      if (left <= 0) break;
      const std::int64_t t0 = now_ns();
      frame_ready_.wait_for(lock, std::chrono::nanoseconds(left));
      if (waited_ns) *waited_ns += now_ns() - t0;
    }
  }
  lock.unlock();
  std::unique_lock copies(copy_mu_);
  copy_done_.wait(copies, [&] { return copies_pending_ == 0; });  // the batch is whole before it leaves
  return added;
}

// One frame from a ring slot into the batch. With copy threads the copies of a batch run in parallel and
// overlap the wait for its next frames: a single thread copying 1080p frames tops out near 850 frames/s.
void SourceSet::copy_frame(const CopyJob& job) {
  if (copiers_.empty()) return finish_copy(job);
  {
    std::lock_guard lock(copy_mu_);
    copy_jobs_.push_back(job);
    copies_pending_++;
  }
  copy_wake_.notify_one();
}

void SourceSet::finish_copy(const CopyJob& job) {
  std::memcpy(job.dst, job.from->ring.data() + frame_bytes_ * static_cast<std::size_t>(job.slot), frame_bytes_);
  {
    std::lock_guard lock(mu_);
    job.from->slots[static_cast<std::size_t>(job.slot)] = SlotState::free;
  }
  space_free_.notify_all();
}

void SourceSet::run_copier() {
  name_this_thread(kSourceThreadName);
  std::unique_lock lock(copy_mu_);
  while (true) {
    copy_wake_.wait(lock, [&] { return copy_exit_ || !copy_jobs_.empty(); });
    if (copy_jobs_.empty()) return;  // exit requested and nothing left
    const CopyJob job = copy_jobs_.front();
    copy_jobs_.pop_front();
    lock.unlock();
    finish_copy(job);
    lock.lock();
    if (--copies_pending_ == 0) copy_done_.notify_all();
  }
}

bool SourceSet::exhausted() const {
  std::lock_guard lock(mu_);
  for (const auto& s : sources_)
    if (s->running > 0 || !s->ready.empty()) return false;
  return true;
}

SourceReport SourceSet::report(const Source& s, std::int64_t now) const {
  SourceReport r;
  r.id = s.id;
  r.name = s.name;
  r.uri = s.options.uri;
  r.kind = s.kind;
  r.state = s.state;
  r.reason = s.reason;
  r.leaky = s.leaky;
  r.frames = s.frames;
  r.dropped = s.dropped;
  r.errors = s.errors;
  r.reconnects = s.reconnects;
  r.inputs_total = s.inputs.size() + s.inputs_fed;
  r.inputs_done = s.inputs_done;
  r.inputs_failed = s.inputs_failed;
  r.inputs_skipped = s.inputs_skipped;
  r.fps = s.fps;
  r.stopped = s.stopped;
  const std::int64_t last = s.last_frame_ns;
  r.mean_fps = mean_rate(s.frames, s.started_ns, last);
  r.since_last_frame_s = last ? static_cast<double>(now - last) / 1e9 : -1;
  if (s.state == SourceState::backoff) r.next_attempt_in_s = std::max(0.0, static_cast<double>(s.next_attempt_ns - now) / 1e9);
  r.bad_inputs = s.bad_inputs;
  r.decoder = s.decoder;
  return r;
}

std::vector<SourceReport> SourceSet::sources() const {
  const std::int64_t now = now_ns();
  std::lock_guard lock(mu_);
  std::vector<SourceReport> out;
  for (const auto& s : sources_) out.push_back(report(*s, now));
  return out;
}

// Four times a second (or when woken): the stall watchdog, frame rates, and joining decode threads that
// finished; removed sources whose frames were all taken are forgotten (a 24/7 service adds and removes many).
void SourceSet::monitor() {
  name_this_thread(kSourceThreadName);
  std::unique_lock lock(mu_);
  while (!monitor_exit_) {
    const std::int64_t now = now_ns();
    for (auto it = sources_.begin(); it != sources_.end();) {
      Source& s = **it;
      if (now - s.fps_at_ns >= 1'000'000'000) {
        const std::uint64_t frames = s.frames;
        if (s.fps_at_ns) s.fps = static_cast<double>(frames - s.fps_frames) * 1e9 / static_cast<double>(now - s.fps_at_ns);
        s.fps_frames = frames;
        s.fps_at_ns = now;
      }
      const std::int64_t last = s.last_frame_ns;
      const auto stall_ns = static_cast<std::int64_t>(s.options.stall_timeout_s * 1e9);
      if (s.live && s.state == SourceState::live && last && now - last > stall_ns) {
        s.state = SourceState::stalled;
        char why[96];
        std::snprintf(why, sizeof why, "no frame for %.1f s", static_cast<double>(now - last) / 1e9);
        s.reason = why;
        if (!s.down_since_ns) {
          s.down_since_ns = last;  // down since its last frame
          s.down_reason = why;
        }
        spdlog::warn("source '{}': live -> stalled: {}", s.name, s.reason);
      }
      if (s.running == 0 && !s.joined) {
        std::vector<std::thread> threads = std::move(s.threads);
        lock.unlock();
        for (auto& t : threads)
          if (t.joinable()) t.join();  // finished already: returns at once
        lock.lock();
        s.joined = true;
      }
      const bool drained = s.ready.empty() &&
                           std::all_of(s.slots.begin(), s.slots.end(), [](SlotState st) { return st == SlotState::free; });
      if (s.joined && drained && s.state == SourceState::removed) {
        // Its ring memory goes with it; outside the lock: a feed's thread may take a moment to end.
        std::unique_ptr<Source> gone = std::move(*it);
        it = sources_.erase(it);  // only this thread erases: `it` stays valid while unlocked
        lock.unlock();
        gone.reset();
        lock.lock();
        continue;
      }
      ++it;
    }
    monitor_wake_.wait_for(lock, std::chrono::milliseconds(250));
  }
}

}  // namespace sluice
