#include "daemon/service.hpp"

#include <grp.h>
#include <unistd.h>
#include <pwd.h>
#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio.hpp>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include "config/pipeline_spec.hpp"
#include "config/plan.hpp"
#include "daemon/access_policy.hpp"
#include "daemon/control_protocol.hpp"
#include "daemon/console_handler.hpp"
#include "daemon/control_server.hpp"
#include "daemon/trace_recorder.hpp"
#include "daemon/instance_lock.hpp"
#include "daemon/metrics.hpp"
#include "daemon/output_check.hpp"
#include "daemon/output_preflight.hpp"
#include "daemon/decoder_check.hpp"
#include "daemon/process_stats.hpp"
#include "daemon/thread_cpu.hpp"
#include "daemon/progress.hpp"
#include "daemon/watchdog.hpp"
#include "runtime/errors.hpp"
#include "runtime/gpu.hpp"
#include "runtime/source_kind.hpp"
#include "runtime/pipeline.hpp"
#include "runtime/frame_tap.hpp"
#include "runtime/thumbnail_tap.hpp"
#include "runtime/source_control.hpp"
#include "runtime/utf8.hpp"
#include "version.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;

// Why a source-add of a local file or image cannot be read, if so: it is missing, or sluiced may not read it
// (access(2), no open). Globs, image sequences, cameras (plugged in later) and URLs are left to the source.
std::optional<std::string> unreadable_local_input(const std::string& uri) {
  if (!source_kind_of(uri).local_files || has_glob_chars(uri)) return std::nullopt;
  if (::access(uri.c_str(), R_OK) == 0) return std::nullopt;
  return "source-add " + to_valid_utf8(uri) + " refused: " + std::strerror(errno);
}

// Per stage, frames per second and GPU busy fraction over the last 1/10/60 s, from one sample per second.
class RateWindows {
 public:
  void sample(const PipelineSnapshot& s) {
    Sample x{std::chrono::steady_clock::now(), {}, {}};
    for (const auto& st : s.stages) {
      x.frames.push_back(static_cast<double>(st.frames));
      x.gpu_s.push_back(st.gpu_ms_total / 1e3);
    }
    samples_.push_back(std::move(x));
    while (samples_.size() > 61) samples_.pop_front();
  }
  void reset() { samples_.clear(); }
  // Over the last `seconds` (or as much of it as was sampled); nullopt before two samples.
  std::optional<double> fps(std::size_t stage, int seconds) const { return rate(&Sample::frames, stage, seconds); }
  std::optional<double> busy(std::size_t stage, int seconds) const { return rate(&Sample::gpu_s, stage, seconds); }

 private:
  struct Sample {
    std::chrono::steady_clock::time_point at;
    std::vector<double> frames, gpu_s;
  };
  std::optional<double> rate(std::vector<double> Sample::*field, std::size_t stage, int seconds) const {
    if (samples_.size() < 2) return std::nullopt;
    const Sample& now = samples_.back();
    const Sample& then = samples_[samples_.size() - 1 - std::min<std::size_t>(static_cast<std::size_t>(seconds), samples_.size() - 1)];
    const double dt = std::chrono::duration<double>(now.at - then.at).count();
    if (dt <= 0 || stage >= (now.*field).size() || stage >= (then.*field).size()) return std::nullopt;
    return ((now.*field)[stage] - (then.*field)[stage]) / dt;
  }
  std::deque<Sample> samples_;
};

std::string join_lines(const std::vector<std::string>& lines) {
  std::string all;
  for (const auto& l : lines) all += (all.empty() ? "" : "; ") + l;
  return all;
}

nlohmann::json source_json(const SourceReport& r) {
  // The URI as logs show it: a camera's user:password and a signed URL's query are for FFmpeg, not for every
  // peer that may read status (TCP peers without a token among them).
  return {{"id", r.id}, {"name", r.name}, {"uri", shown_uri(r.uri)}, {"kind", to_string(r.kind)}, {"state", to_string(r.state)},
          {"reason", r.reason}, {"leaky", r.leaky}, {"frames", r.frames}, {"dropped", r.dropped},
          {"errors", r.errors}, {"reconnects", r.reconnects}, {"fps", r.fps},
          {"since_last_frame_s", r.since_last_frame_s}, {"next_attempt_in_s", r.next_attempt_in_s},
          {"inputs", {{"total", r.inputs_total}, {"done", r.inputs_done}, {"failed", r.inputs_failed},
                      {"skipped", r.inputs_skipped}}},
          {"bad_inputs", r.bad_inputs}, {"decoder", r.decoder}};
}

class Service {
 public:
  explicit Service(const ServiceOptions& o)
      : options_(o), signals_(io_, SIGINT, SIGTERM, SIGHUP), tick_(io_), reload_timer_(io_),
        started_(std::chrono::steady_clock::now()) {}
  ~Service() {
    // Their threads are stuck in blocking calls and still point into them: never destroyed (see abandon()).
    for (auto& p : abandoned_) (void)p.release();
  }

  // Start order: everything that can refuse (the instance lock, the control socket, the TCP and metrics
  // listeners) is taken before the pipeline is built, so a second sluiced beside a running one fails
  // first, names the holder, and touches none of its outputs.
  int run() {
    config_path_ = std::filesystem::absolute(options_.config).string();
    const PipelineSpec spec = load_spec(config_path_);  // reads the file only: where to listen
    settings_ = spec.service;
    apply_settings(settings_);
    setup_access();  // refuses a bad token file or an exposed TCP listener before anything starts
    instance_lock_.emplace(options_.socket);
    ControlLimits limits;
    limits.client_timeout = std::chrono::milliseconds(static_cast<long>(options_.client_timeout_s * 1000));
    control_.emplace(io_, options_.socket, limits,
                     [this](const ControlRequest& r, const PeerCredentials& p, ControlServer::Reply reply) {
                       dispatch(r, p, std::move(reply));
                     },
                     [this](const PeerCredentials& p) { return policy_->peer_class(p); });
    std::string tcp_address;
    if (!options_.control_tcp.empty()) tcp_address = control_->listen_tcp(options_.control_tcp);
    if (!options_.metrics.empty())
      metrics_.emplace(io_, options_.metrics, [this] { return render_metrics(); });
    if (!options_.console.empty()) {
      // Its own listener (not the metrics one): the tap it needs turns off device frames on a GPU host, so the
      // console is asked for by name; and browsers never take a Prometheus scraper's connection slots.
      thumbnails_ = make_thumbnail_tap();
      ConsoleHandler handler(
          [this](const ControlRequest& r, const PeerCredentials& p, ControlServer::Reply reply) {
            dispatch(r, p, std::move(reply));
          },
          thumbnails_);
      console_.emplace(io_, options_.console, [this] { return render_metrics(); }, std::move(handler), "console");
    }
    // The outputs too: one that cannot be written is a configuration error (exit 2, as `check` says), one that
    // another sluiced writes (the same config on another socket) stops the start naming its pid (exit 1).
    try {
      ready_outputs_ = prepare_outputs(spec);
    } catch (const OutputInUse& e) {
      throw std::runtime_error(std::string(e.what()) + "; not starting");
    }
    start_pipeline(plan_pipeline(spec));  // requests are served from io_.run() on: the pipeline exists then
    setup_watchdog();
    state_ = "running";
    spdlog::info("sluiced {} ready: pipeline '{}' on {}, control socket {}{}{}{}", SLUICE_VERSION, plan_name_,
                 to_string(pipeline_->plan().device), options_.socket,
                 tcp_address.empty() ? "" : ", control on tcp " + tcp_address,
                 options_.metrics.empty() ? "" : ", metrics on " + metrics_->address(),
                 options_.console.empty() ? "" : ", console on http://" + console_->address() + "/");
    sd_notify(0, "READY=1");  // after the line: whoever waits for READY finds the addresses in the log
    wait_signal();
    schedule_tick();
    io_.run();
    return exit_status_;
  }

 private:
  // The command line wins; what it leaves empty comes from the pipeline file, then the defaults.
  void apply_settings(const ServiceSettings& file) {
    auto pick = [](std::string& option, const std::string& from_file) {
      if (option.empty()) option = from_file;
    };
    pick(options_.socket, file.control_socket);
    pick(options_.socket, "/run/sluice/control.sock");
    pick(options_.control_tcp, file.control_tcp);
    pick(options_.metrics, file.metrics);
    if (options_.allow_users.empty()) options_.allow_users = file.allow_users;
    if (options_.allow_groups.empty()) options_.allow_groups = file.allow_groups;
    pick(options_.control_token, file.control_token);
    if (options_.config_roots.empty()) options_.config_roots = file.config_roots;
    if (options_.input_roots.empty()) options_.input_roots = file.input_roots;
    if (options_.output_roots.empty()) options_.output_roots = file.output_roots;
    if (options_.allow_source_hosts.empty()) options_.allow_source_hosts = file.allow_source_hosts;
  }

  // The access policy (docs/THREAT_MODEL.md): a token file that others can read, a root that does not
  // exist, or a TCP listener off loopback without a token stop the start with a message naming them.
  void setup_access() {
    AccessSettings a;
    a.allow_users = options_.allow_users;
    a.allow_groups = options_.allow_groups;
    a.config_file = config_path_;
    a.config_roots = options_.config_roots;
    a.input_roots = options_.input_roots;
    a.output_roots = options_.output_roots;
    a.allow_source_hosts = options_.allow_source_hosts;
    try {
      if (!options_.control_token.empty()) a.control_token = load_control_token(options_.control_token);
      if (!options_.control_tcp.empty() && !a.control_token && !listen_is_loopback(options_.control_tcp))
        throw std::invalid_argument("--control-tcp " + options_.control_tcp +
                                    " is not a loopback address: refusing to serve control off this host without "
                                    "a shared secret (--control-token FILE, or control_token: in the pipeline file)");
      if (!options_.console.empty() && !a.control_token && !listen_is_loopback(options_.console))
        throw std::invalid_argument("--console " + options_.console +
                                    " is not a loopback address: refusing to show the cameras off this host without "
                                    "a shared secret (--control-token FILE, or control_token: in the pipeline file)");
      policy_.emplace(std::move(a));
    } catch (const std::invalid_argument& e) {
      throw ConfigError(e.what());
    } catch (const std::runtime_error& e) {  // a malformed --control-tcp address
      throw ConfigError(e.what());
    }
  }

  // The console's pictures: its tap beside the sinks' taps (it costs nothing while nobody watches). Every plan
  // that becomes the running pipeline (start, reload) passes here.
  void wire_console(PipelinePlan& plan) const {
    if (!thumbnails_) return;
    if (plan.shared->tap)
      plan.shared->tap = std::make_shared<FanOutTap>(std::vector<std::shared_ptr<FrameTap>>{plan.shared->tap, thumbnails_});
    else
      plan.shared->tap = thumbnails_;
  }

  void start_pipeline(PipelinePlan plan) {
    plan_name_ = plan.name;
    wire_console(plan);
    auto p = std::make_unique<Pipeline>(std::move(plan));
    p->start();
    pipeline_ = std::move(p);
    ++generation_;
    windows_.reset();
  }

  PipelineSpec load_spec(const std::string& path) const {
    PipelineSpec spec = load_pipeline(path);
    if (!options_.state_dir.empty()) spec.state_dir = options_.state_dir;
    return spec;
  }

  // --- signals ---------------------------------------------------------------------------------------
  void wait_signal() {
    signals_.async_wait([this](boost::system::error_code ec, int sig) {
      if (ec) return;
      if (sig == SIGHUP) {
        spdlog::info("SIGHUP: reloading {}", config_path_);
        auto r = reload(config_path_);
        if (!r.value("ok", false)) spdlog::error("reload failed, the running pipeline stays: {}", r.value("error", ""));
      } else {
        spdlog::info("{}: draining and exiting", strsignal(sig));
        begin_stop();
      }
      wait_signal();
    });
  }

  // --- requests ------------------------------------------------------------------------------------------
  // Every request passes here: the access policy (the token; for a mutating request, the peer's right to
  // change things), then its handler. The switch has no default: a request added to the table
  // (protocol.hpp) without a handler here is a compiler warning.
  void dispatch(const ControlRequest& request, const PeerCredentials& peer, ControlServer::Reply reply) {
    const std::string_view name = request_name(request.kind);
    if (auto why = policy_->check_request(peer, request.kind, request.token)) {
      control_->log_refusal(peer, "control: " + std::string(name) + " refused for " + peer.remote + ": " + *why);
      return reply(error(*why));
    }
    if (is_mutating(request.kind)) {
      spdlog::info("control: {} from {}", name, peer.remote);
      if (state_ == "stopping") {
        spdlog::warn("control: {} refused: sluiced is stopping", name);
        return reply(error("sluiced is stopping"));
      }
    }
    switch (request.kind) {
      case RequestKind::version:
        return reply({{"ok", true}, {"version", SLUICE_VERSION}, {"cuda", gpu::built_with_cuda()}});
      case RequestKind::status:
        return reply(status());
      case RequestKind::sources:
        return reply({{"ok", true}, {"sources", sources_json()}, {"inputs", inputs_json()}});
      case RequestKind::trace:
        return trace(*request.number(arg::seconds), peer.peer_class, std::move(reply));
      case RequestKind::pause:
        pipeline_->set_paused(true);
        state_ = "paused";
        return reply_once_paused({{"ok", true}, {"state", state_}}, std::move(reply),
                                 std::chrono::steady_clock::now() + kPauseHoldWait);
      case RequestKind::resume:
        pipeline_->set_paused(false);
        state_ = "running";
        return reply({{"ok", true}, {"state", state_}});
      case RequestKind::reload:
        return reply(reload_request(request.text(arg::path)));
      case RequestKind::stop:
        asio::post(io_, [this] { begin_stop(); });  // after this reply is on its way
        return reply({{"ok", true}, {"state", "stopping"}});
      case RequestKind::source_add:
        return reply(add_source(request));
      case RequestKind::source_remove:
        return reply(remove_source(*request.text(arg::source)));
    }
  }

  // The reply to `pause` comes once the pause holds (Pipeline::pause_taken): a batch the source was making has
  // left it, so a client that then sees nothing in flight sees a settled pipeline. A source blocked on a full
  // pipeline is waited for kPauseHoldWait at most; the state is paused either way.
  static constexpr std::chrono::seconds kPauseHoldWait{2};
  void reply_once_paused(nlohmann::json answer, ControlServer::Reply reply, std::chrono::steady_clock::time_point until) {
    if (pipeline_->pause_taken() || !pipeline_->paused() || std::chrono::steady_clock::now() >= until)
      return reply(std::move(answer));
    auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(2));
    timer->async_wait([this, timer, until, answer = std::move(answer), reply = std::move(reply)](
                          boost::system::error_code) mutable { reply_once_paused(std::move(answer), std::move(reply), until); });
  }

  static nlohmann::json error(const std::string& what) { return error_reply(what); }

  // A peer's reload: only the configured file or one under a config root, decided before it is opened;
  // the reply names path:line:col and the problem but no excerpt of the file (the journal has them).
  nlohmann::json reload_request(const std::optional<std::string>& requested) {
    std::string path = config_path_;
    if (requested) {
      std::error_code ec;
      const std::string absolute = std::filesystem::absolute(*requested, ec).lexically_normal().string();
      if (auto why = policy_->check_reload_path(absolute, path)) {
        spdlog::warn("control: {}", *why);
        return error(*why);
      }
    }
    if (auto busy = reload_refusal()) {  // nothing of the file in it: no redaction
      spdlog::warn("control: reload {} refused: {}", to_valid_utf8(path), *busy);
      return error(*busy);
    }
    nlohmann::json r = reload(path);
    if (!r.value("ok", false)) {
      const std::string full = r.value("error", "");
      spdlog::error("reload {} failed, the running pipeline stays: {}", path, full);
      r["error"] = redact_file_excerpts(full) + " (quoted parts are in sluiced's log)";
    }
    return r;
  }

  // A source-remove names a source by id or name; a name that is not UTF-8 is shown with U+FFFD, and that
  // shown form finds it too.
  nlohmann::json remove_source(const std::string& which) {
    if (auto why = sources_changing()) {
      spdlog::warn("control: source-remove {} refused: {}", to_valid_utf8(which), *why);
      return error(*why);
    }
    SourceControl* control = pipeline_->source_control();
    if (!control) return error("no source '" + which + "'");
    std::string target = which;
    bool exact = false;
    std::vector<std::uint32_t> shown_matches;
    for (const auto& r : control->sources()) {
      if (r.name == which || std::to_string(r.id) == which) exact = true;
      else if (to_valid_utf8(r.name) == which) shown_matches.push_back(r.id);
    }
    if (!exact && shown_matches.size() == 1) target = std::to_string(shown_matches[0]);
    if (!exact && shown_matches.size() > 1)
      return error("'" + which + "' names " + std::to_string(shown_matches.size()) + " sources; remove them by id");
    if (!control->remove_source(target)) return error("no source '" + which + "'");
    return {{"ok", true}};
  }

  // While a reload's old generation drains, its sources are being handed over and the new one has not
  // started: an added or removed source could land in neither. The caller tries again (the drain is bounded).
  std::optional<std::string> sources_changing() const {
    if (!draining_) return std::nullopt;
    return "a reload is in progress: generation " + std::to_string(draining_->generation) +
           " is draining; sources can be added or removed once `status` shows draining: null (try again)";
  }

  // Starts a source in the running pipeline; the others are not touched (no lock they wait on is held
  // while it opens: opening happens on the new source's own thread). What it may read or connect to is the
  // access policy's: input roots and allowed hosts.
  nlohmann::json add_source(const ControlRequest& request) {
    const std::string uri = *request.text(arg::uri);
    SourceControl* control = pipeline_->source_control();
    if (!control)
      return error("pipeline '" + plan_name_ + "' has no run-time sources: its decode stage renders one test pattern "
                   "directly; give it 'uri' (or 'idle: wait') to manage sources");
    if (auto why = policy_->check_source_uri(uri)) {
      spdlog::warn("control: {}", *why);
      return error(*why);
    }
    if (auto why = sources_changing()) {
      spdlog::warn("control: source-add {} refused: {}", shown_uri(uri), *why);
      return error(*why);
    }
    // A local file that is not there (or not readable) is refused now: accepted, it would only show up as a
    // failed source. Asked after the policy, so nothing is said about paths outside the input roots.
    if (auto why = unreadable_local_input(uri)) {
      spdlog::warn("control: {}", *why);
      return error(*why);
    }
    SourceOptions o;
    o.uri = uri;
    if (auto name = request.text(arg::name)) o.name = *name;
    if (auto leaky = request.flag(arg::leaky)) o.leaky = *leaky;
    if (auto rate = request.number(arg::rate_limit)) o.rate_limit = *rate;
    if (auto loop = request.flag(arg::loop)) o.loop = *loop;
    if (auto budget = request.number(arg::latency_budget_ms)) o.latency_budget_ms = *budget;
    try {
      const std::uint32_t id = control->add_source(std::move(o));
      for (const auto& r : control->sources())
        if (r.id == id) return {{"ok", true}, {"id", id}, {"name", r.name}};
      return {{"ok", true}, {"id", id}};
    } catch (const std::exception& e) {
      spdlog::warn("control: source-add {} refused: {}", shown_uri(uri), e.what());
      return error(e.what());
    }
  }

  nlohmann::json sources_json() const {
    nlohmann::json out = nlohmann::json::array();
    if (SourceControl* control = pipeline_->source_control())
      for (const auto& r : control->sources()) {
        out.push_back(source_json(r));
        const bool producing = r.state == SourceState::live || r.state == SourceState::stalled;
        if (producing && pipeline_->paused()) out.back()["state"] = "paused";
      }
    return out;
  }
  nlohmann::json inputs_json() const { return progress_json(pipeline_->inputs().snapshot(), now_ns()); }

  // `trace SECONDS`: records the live pipeline, then replies with the Chrome/Perfetto trace. Only the
  // requesting connection waits; the pipeline keeps running as before. One trace at a time (trace_recorder.hpp).
  void trace(double seconds, PeerClass asker, ControlServer::Reply reply) {  // seconds: within arg::seconds' bounds
    if (state_ == "stopping") return reply(error("sluiced is stopping"));
    const std::uint64_t generation = generation_;
    traces_.record(
        seconds, asker, [this](std::chrono::nanoseconds duration) { pipeline_->record_trace(duration); },
        [this, generation, seconds]() -> nlohmann::json {
          if (generation_ != generation) return error("the pipeline was reloaded while tracing; trace again");
          return {{"ok", true}, {"seconds", seconds}, {"trace", nlohmann::json::parse(pipeline_->trace_json())}};
        },
        std::move(reply));
  }

  // Validates first and builds the new pipeline (pools allocated), so any failure leaves the old one
  // running. Then swaps: the old generation drains off the control thread (poll_reload) within the same
  // --drain-timeout as stop, while control, metrics and signals keep answering; the new one starts once the
  // old one has let go of its sources, outputs and job ledger.
  // A drain that outlasts the timeout counts the old generation's frames in flight failed ("drain
  // timeout"), leaves its stuck threads behind (never freed) and starts the new one; the process stays up.
  nlohmann::json reload(const std::string& path) {
    if (auto busy = reload_refusal()) return error(*busy);
    std::optional<PipelinePlan> plan;
    std::optional<PipelineSpec> spec;
    try {
      spec.emplace(load_spec(path));
      // Its own words first: a peer's reply keeps only what comes before the path quoted from the file.
      if (auto why = policy_->check_output_paths(*spec)) return error("refused by --output-root: " + *why);
      // What `sluiced check` refuses is refused here too, before anything is built: an output that cannot be
      // written would fail every frame of the new generation once the working one is gone.
      if (const auto problems = output_problems(*spec); !problems.empty())
        return error("an output of the new pipeline cannot be written: " + join_lines(problems));
      if (!(spec->service == settings_))
        spdlog::warn("reload {}: control_socket/control_tcp/metrics/control_allow_* changed; they apply at the next start",
                     path);
      plan.emplace(plan_pipeline(*spec));
      // So is an input that cannot be read (a missing file or folder, a glob matching nothing, a file that is no
      // video): its source would fail at once, and a service whose sources all ended exits. The inputs are named
      // in quotes: they are the file's words (the reply redacts them; the log has them).
      if (const auto inputs = describe_decoders(*spec, *plan); !inputs.unreadable.empty())
        return error("an input of the new pipeline cannot be read: '" + join_lines(inputs.unreadable) + "'");
    } catch (const std::exception& e) {
      return error(e.what());
    }
    std::unique_ptr<Pipeline> next;
    try {
      wire_console(*plan);
      next = std::make_unique<Pipeline>(std::move(*plan));
    } catch (const std::exception& e) {
      return error(std::string("cannot build the new pipeline: ") + e.what());
    }
    // The new generation warms up (engines for every batch size) while the old one keeps serving; one whose
    // stage cannot open or warm up is refused, and the old one goes on.
    const auto warm_start = std::chrono::steady_clock::now();
    next->begin_warm_up();
    next->wait_warm();
    if (auto why = next->warm_error(); !why.empty()) {
      next->request_stop();
      return error("the new pipeline could not warm up: " + why);
    }
    if (next->snapshot().warmup_ns > 0)
      spdlog::info("reload {}: the new pipeline warmed up in {:.3f} s while the old one served", path,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - warm_start).count());
    // Last, so that nothing can refuse the reload after it: the new outputs are made and locked for the new
    // generation (held until its sinks open), or the reload is refused and the old generation goes on untouched.
    ReadyOutputs outputs;
    try {
      outputs = prepare_outputs(*spec);
    } catch (const std::exception& e) {
      next->request_stop();
      return error(std::string("the outputs of the new pipeline are not ready: ") + e.what());
    }
    if (pipeline_->paused()) next->set_paused(true);
    // Streams whose settings did not change go on in the new generation without reconnecting, and sources
    // added at run time carry over; when the stages cannot hand over (another frame size), the old sources
    // stop and the run-time ones are added again once the new generation starts.
    SourceControl* old_sources = pipeline_->source_control();
    SourceControl* next_sources = next->source_control();
    const bool handed_over = old_sources && next_sources && old_sources->hand_over_to(*next_sources);
    if (old_sources && !handed_over) carried_sources_ = old_sources->added_at_run_time();
    if (old_sources)
      spdlog::info("reload: {}", handed_over ? "the running sources are handed over to the new generation"
                                             : "the sources cannot be handed over (frame size, format or ring changed); "
                                               "they stop and start again");
    pipeline_->request_stop();
    draining_.emplace(Draining{std::move(pipeline_), generation_, std::chrono::steady_clock::now(),
                               std::chrono::steady_clock::now() + drain_timeout()});
    pipeline_ = std::move(next);
    ready_outputs_ = std::move(outputs);  // the old generation's reservations were taken over or are not needed
    config_path_ = path;
    plan_name_ = pipeline_->plan().name;
    ++generation_;
    windows_.reset();
    state_ = "reloading";
    spdlog::info("reloading {}: pipeline '{}' generation {} starts once generation {} has drained", path, plan_name_,
                 generation_, draining_->generation);
    poll_reload();
    return {{"ok", true}, {"config", path}, {"generation", generation_}, {"state", state_},
            {"draining_generation", draining_ ? nlohmann::json(draining_->generation) : nlohmann::json()}};
  }

  // Why no reload can start now (before any file is read), if so.
  std::optional<std::string> reload_refusal() const {
    if (state_ == "stopping") return "sluiced is stopping";
    if (draining_)
      return "a reload is in progress: generation " + std::to_string(draining_->generation) +
             " is still draining (at most " + fmt::format("{:g}", options_.drain_timeout_s) +
             " s); try again once `status` shows draining: null";
    return std::nullopt;
  }

  std::chrono::steady_clock::duration drain_timeout() const {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(options_.drain_timeout_s));
  }

  // On the io_context, every 10 ms while an old generation drains after a reload.
  void poll_reload() {
    if (!draining_ || state_ == "stopping") return;  // a stop drains it together with the current one
    Draining& d = *draining_;
    if (d.pipeline->finished()) {
      d.pipeline->wait();  // its threads have ended: returns at once
      account_finished(*d.pipeline);
      d.pipeline->release_job();
      spdlog::info("generation {} drained in {:.3f} s", d.generation,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - d.since).count());
      draining_.reset();
    } else if (std::chrono::steady_clock::now() > d.deadline) {
      abandon_draining();
    } else {
      reload_timer_.expires_after(std::chrono::milliseconds(10));
      reload_timer_.async_wait([this](boost::system::error_code ec) {
        if (!ec) poll_reload();
      });
      return;
    }
    start_next_generation();
  }

  std::string drain_timeout_reason(std::uint64_t generation) const {
    return fmt::format("drain timeout: generation {} did not drain within {:g} s (a stage or source stuck in a "
                       "blocking call)", generation, options_.drain_timeout_s);
  }

  // The old generation did not drain in time: its frames in flight are counted failed, never silently lost.
  void abandon_draining() {
    Draining& d = *draining_;
    // Its decode stage may be stuck too (behind a stuck sink) and never stop its sources or hand them over.
    if (SourceControl* sources = d.pipeline->source_control()) sources->stop_sources();
    const std::uint64_t failed = d.pipeline->abandon(drain_timeout_reason(d.generation));
    spdlog::error("{}; {} of its frames in flight counted failed; its stuck threads are left behind", 
                  drain_timeout_reason(d.generation), failed);
    account_finished(*d.pipeline);
    abandoned_.push_back(std::move(d.pipeline));
    draining_.reset();
  }

  void start_next_generation() {
    if (SourceControl* control = pipeline_->source_control())
      for (const SourceOptions& o : carried_sources_) {
        try {
          control->add_source(o);
        } catch (const std::exception& e) {
          spdlog::error("source {} ('{}'), added at run time, could not be carried over the reload: {}", shown_uri(o.uri), o.name,
                        e.what());
        }
      }
    carried_sources_.clear();
    pipeline_->start();
    if (state_ == "reloading") state_ = pipeline_->paused() ? "paused" : "running";
    spdlog::info("reloaded {}: pipeline '{}' generation {}", config_path_, plan_name_, generation_);
  }

  void account_finished(const Pipeline& p) {
    const auto t = p.ledger().totals();
    before_.produced += t.produced;
    before_.delivered += t.delivered;
    before_.dropped += t.dropped;
    before_.failed += t.failed;
    failed_frames_redone_ += p.inputs().totals().handed_back_failed_frames;
    if (t.in_flight() != 0) spdlog::critical("frame conservation violated: {} frames unaccounted for", t.in_flight());
  }

  // Stops the sources and lets frames in flight drain on their own threads, polling from the io_context so
  // control clients (status, the reply to `stop`) are still served meanwhile. A generation still draining
  // after a reload drains under the same deadline.
  void begin_stop(bool ended_by_itself = false) {
    if (state_ == "stopping") return;
    state_ = "stopping";
    ended_by_itself_ = ended_by_itself;
    sd_notify(0, "STOPPING=1");
    signals_.cancel();
    tick_.cancel();
    reload_timer_.cancel();
    traces_.cancel("sluiced is stopping");
    pipeline_->request_stop();
    if (draining_) draining_->pipeline->request_stop();
    drain_deadline_ = std::chrono::steady_clock::now() + drain_timeout();
    poll_drain();
  }

  bool drained() const { return pipeline_->finished() && (!draining_ || draining_->pipeline->finished()); }

  void poll_drain() {
    if (drained()) return finish();
    if (std::chrono::steady_clock::now() > drain_deadline_) {
      // What is still in flight is counted failed with the reason; the stuck threads are not waited for.
      std::uint64_t failed = 0;
      if (draining_ && !draining_->pipeline->finished()) failed += draining_->pipeline->abandon(drain_timeout_reason(draining_->generation));
      if (!pipeline_->finished()) failed += pipeline_->abandon(drain_timeout_reason(generation_));
      spdlog::error("drain did not finish within {:g} s; {} frames in flight counted failed (drain timeout); exiting",
                    options_.drain_timeout_s, failed);
      if (draining_) account_finished(*draining_->pipeline);
      const auto snap = pipeline_->snapshot();
      account_finished(*pipeline_);
      std::fprintf(stderr, "%s", format_summary(snap).c_str());
      if (control_) control_->stop();
      std::fflush(nullptr);
      std::_Exit(1);  // stuck threads still run: no destructor may wait for them
    }
    tick_.expires_after(std::chrono::milliseconds(10));
    tick_.async_wait([this](boost::system::error_code) { poll_drain(); });
  }

  void finish() {
    if (draining_) {
      draining_->pipeline->wait();
      account_finished(*draining_->pipeline);
      draining_.reset();
    }
    pipeline_->wait();  // every thread has ended: returns at once
    const auto snap = pipeline_->snapshot();
    account_finished(*pipeline_);
    std::fprintf(stderr, "%s", format_summary(snap).c_str());
    if (control_) control_->stop();
    if (metrics_) metrics_->stop();
    if (console_) console_->stop();
    // Like `sluiced run`: a pipeline that ended by itself with a source or input that failed exits 1. An attempt
    // a shared job (Redis) took back to do again, here or elsewhere, is not its input's outcome: its failed frames
    // and its error do not count.
    bool source_failed = false;
    if (ended_by_itself_) {
      if (SourceControl* control = pipeline_->source_control())
        for (const auto& r : control->sources()) source_failed = source_failed || r.state == SourceState::failed;
      const auto inputs = pipeline_->inputs().totals();
      source_failed = source_failed || inputs.with_errors > inputs.handed_back_with_errors;
      if (source_failed) spdlog::error("the pipeline ended with a source or input that failed (see above)");
    }
    exit_status_ = before_.failed <= failed_frames_redone_ && !source_failed ? 0 : 1;
    io_.stop();
  }

  // --- periodic: rate windows, STATUS=, watchdog ---------------------------------------------------------
  void schedule_tick() {
    tick_.expires_after(std::chrono::seconds(1));
    tick_.async_wait([this](boost::system::error_code ec) {
      if (ec || state_ == "stopping") return;
      on_tick();
      if (state_ == "stopping") return;
      schedule_tick();
    });
  }

  void on_tick() {
    const auto snap = pipeline_->snapshot();
    windows_.sample(snap);
    if (!snap.running && !draining_ && pipeline_->started() && state_ == "running") {
      spdlog::info("the pipeline's sources ended; exiting");
      begin_stop(true);
      return;
    }
    const std::size_t sink = snap.stages.size() - 1;
    char status[256];
    std::snprintf(status, sizeof status, "STATUS=%s: %s, %.1f frames/s (10 s), %llu delivered, %llu dropped, %llu failed",
                  plan_name_.c_str(), state_.c_str(), windows_.fps(sink, 10).value_or(0),
                  static_cast<unsigned long long>(before_.delivered + snap.frames.delivered),
                  static_cast<unsigned long long>(before_.dropped + snap.frames.dropped),
                  static_cast<unsigned long long>(before_.failed + snap.frames.failed));
    sd_notify(0, status);
    watchdog(snap);
  }

  void setup_watchdog() {
    std::uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) <= 0) return;
    const double interval_s = static_cast<double>(usec) / 1e6;
    const double stall_s = options_.watchdog_stall_s > 0 ? options_.watchdog_stall_s : interval_s / 2;
    watchdog_.emplace(std::chrono::duration<double>(stall_s));
    spdlog::info("watchdog: every {:.1f} s; wedged = frames in flight with no stage progress for {:.1f} s", interval_s,
                 stall_s);
  }

  void watchdog(const PipelineSnapshot& snap) {
    if (!watchdog_) return;
    std::uint64_t progress = 0;
    for (const auto& st : snap.stages) progress += st.frames + st.errors + st.dropped;
    const auto now = std::chrono::steady_clock::now();
    if (watchdog_->healthy(progress, snap.frames.in_flight(), state_ == "running", now))
      sd_notify(0, "WATCHDOG=1");
    else
      spdlog::error("watchdog: {} frames in flight and no progress for {:.0f} s; not pinging", snap.frames.in_flight(),
                    watchdog_->stalled_s(now));
  }

  // --- reports ---------------------------------------------------------------------------------------------
  nlohmann::json status() const {
    const auto s = pipeline_->snapshot();
    nlohmann::json stages = nlohmann::json::array();
    for (std::size_t i = 0; i < s.stages.size(); ++i) {
      const auto& st = s.stages[i];
      stages.push_back({{"name", st.name}, {"kind", st.kind}, {"on_gpu", st.on_gpu}, {"frames", st.frames},
                        {"batches", st.batches}, {"fps_1s", windows_.fps(i, 1).value_or(0)},
                        {"fps_10s", windows_.fps(i, 10).value_or(0)}, {"fps_60s", windows_.fps(i, 60).value_or(0)},
                        {"gpu_ms_per_batch", st.gpu_ms_per_batch},
                        {"busy", windows_.busy(i, 10).value_or(st.gpu_busy)}, {"host_ms_per_batch", st.host_ms_per_batch},
                        {"cpu_ms_per_batch", st.cpu_ms_per_batch},
                        {"queue_depth", st.queue_depth}, {"queue_capacity", st.queue_capacity},
                        {"dropped", st.dropped}, {"late", st.late}, {"errors", st.errors}, {"health", st.health}});
      stages.back()["branch"] = branch_of(st.name);
      if (st.replica >= 0)  // a replica's stage (gpus:): which one, on which GPU, and why it is down
        stages.back().update({{"replica", st.replica + 1}, {"gpu", st.gpu}, {"down", st.down}});
    }
    const auto& f = s.frames;
    return {{"ok", true}, {"state", state_},
            {"uptime_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count()},
            {"config", config_path_}, {"pipeline", s.name}, {"device", s.device}, {"execution", s.execution},
            {"generation", generation_},
            {"frames", {{"produced", f.produced}, {"delivered", f.delivered}, {"dropped", f.dropped},
                        {"failed", f.failed}, {"in_flight", f.in_flight()}, {"drop_reasons", f.drop_reasons},
                        {"errors", f.errors}, {"late", f.late}, {"late_by_source", late_by_source(s)}}},
            {"latency_budget_ms", static_cast<double>(s.latency_budget_ns) / 1e6},
            {"downstream_estimate_ms", static_cast<double>(s.downstream_ns) / 1e6},
            {"warmup_ms", static_cast<double>(s.warmup_ns) / 1e6},
            {"frames_before_reload", {{"produced", before_.produced}, {"delivered", before_.delivered},
                                      {"dropped", before_.dropped}, {"failed", before_.failed}}},
            {"draining", draining_json()},
            {"latency_ms", {{"p50", static_cast<double>(s.latency_p50_ns) / 1e6},
                            {"p90", static_cast<double>(s.latency_p90_ns) / 1e6},
                            {"p99", static_cast<double>(s.latency_p99_ns) / 1e6}}},
            {"stages", stages},
            {"sources", sources_json()},
            {"inputs", inputs_json()}};
  }

  // The tee branch a stage lies on (1, 2, ...; 0: the trunk, before and including the tee): what the console
  // needs to draw the graph as `check` prints it.
  int branch_of(const std::string& stage) const {
    for (const auto& ps : pipeline_->plan().stages)
      if (ps.name == stage) return ps.branch + 1;
    return 0;
  }

  // Late frames per source name (sources that had none are left out).
  static nlohmann::json late_by_source(const PipelineSnapshot& s) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [id, n] : s.frames.sources) {
      if (!n.late) continue;
      auto it = s.source_names.find(id);
      const std::string name = it != s.source_names.end() && !it->second.empty() ? it->second : std::to_string(id);
      out[to_valid_utf8(name)] = n.late;
    }
    return out;
  }

  // The generation a reload replaced, while it drains (null otherwise): its frames are in no other count yet.
  nlohmann::json draining_json() const {
    if (!draining_) return nullptr;
    const auto now = std::chrono::steady_clock::now();
    const auto t = draining_->pipeline->ledger().totals();
    return {{"generation", draining_->generation},
            {"elapsed_s", std::chrono::duration<double>(now - draining_->since).count()},
            {"deadline_in_s", std::max(0.0, std::chrono::duration<double>(draining_->deadline - now).count())},
            {"frames", {{"produced", t.produced}, {"delivered", t.delivered}, {"dropped", t.dropped},
                        {"failed", t.failed}, {"in_flight", t.in_flight()}}}};
  }

  // On the io_context thread (the only one that touches thread_cpu_).
  std::string render_metrics() {
    MetricsInfo info;
    info.generation = generation_;
    info.state = state_;
    info.config_path = config_path_;
    info.version = SLUICE_VERSION;
    info.latency = &pipeline_->latency();
    if (SourceControl* control = pipeline_->source_control()) info.sources = control->sources();
    info.process = read_process_stats();
    if (info.process.cpu_s) {
      thread_cpu_.update(read_thread_samples(), static_cast<long>(getpid()), *info.process.cpu_s);
      info.thread_cpu_s = thread_cpu_.seconds();
    }
    return render_prometheus(pipeline_->snapshot(), info);
  }

  ServiceOptions options_;
  asio::io_context io_;
  asio::signal_set signals_;
  asio::steady_timer tick_;
  asio::steady_timer reload_timer_;
  std::chrono::steady_clock::time_point started_;
  std::optional<InstanceLock> instance_lock_;
  std::optional<ControlServer> control_;
  TraceRecorder traces_{io_};
  std::optional<MetricsServer> metrics_;
  std::shared_ptr<ThumbnailTap> thumbnails_;  // with --console and the media library
  std::optional<MetricsServer> console_;      // --console: the browser console (docs/console.md)
  ThreadCpuAccount thread_cpu_;  // sluice_thread_cpu_seconds_total, kept between scrapes
  std::optional<AccessPolicy> policy_;
  std::unique_ptr<Pipeline> pipeline_;
  ReadyOutputs ready_outputs_;  // the current generation's output locks, held for its sinks until they open
  std::string config_path_, plan_name_, state_ = "starting";
  ServiceSettings settings_;  // from the file read at start
  std::uint64_t generation_ = 0;
  FrameLedger::Totals before_;  // every earlier generation's final ledger
  RateWindows windows_;
  std::optional<WatchdogRule> watchdog_;
  struct Draining {  // the generation a reload replaced, until it has drained
    std::unique_ptr<Pipeline> pipeline;
    std::uint64_t generation;
    std::chrono::steady_clock::time_point since, deadline;
  };
  std::optional<Draining> draining_;
  std::vector<SourceOptions> carried_sources_;  // added at run time to the old generation: added to the new one
  std::vector<std::unique_ptr<Pipeline>> abandoned_;  // drain timed out: never destroyed (stuck threads)
  std::chrono::steady_clock::time_point drain_deadline_;
  bool ended_by_itself_ = false;
  int exit_status_ = 0;
  std::uint64_t failed_frames_redone_ = 0;  // of before_.failed: in attempts handed back to a shared job
};

}  // namespace

int run_service(const ServiceOptions& options) {
  // Asio's signal_set catches SIGINT/SIGTERM/SIGHUP in whichever thread they land and hands them to run().
  Service service(options);
  return service.run();
}

}  // namespace sluice
