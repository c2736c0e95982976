#include "daemon/metrics.hpp"

#include "daemon/listen_address.hpp"
#include "runtime/utf8.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <initializer_list>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace sluice {

// ---------------------------------------------------------------------------------------------------
// Exposition text
// ---------------------------------------------------------------------------------------------------

// The text format is UTF-8: a name that is not (a file name from a watched directory) is shown with U+FFFD.
std::string prometheus_escape_label(std::string_view raw) {
  const std::string v = to_valid_utf8(raw);
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

std::string prometheus_escape_help(std::string_view raw) {
  const std::string v = to_valid_utf8(raw);
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

std::string prometheus_format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == 0) return "0";  // also turns -0 into 0
  std::array<char, 64> buf{};
  auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), v);  // shortest round-trip
  if (ec != std::errc{}) return "NaN";
  return std::string(buf.data(), end);
}

namespace {

struct Label {
  Label(std::string_view k, std::string_view v) : key(k), value(v) {}
  std::string key, value;
};
using Labels = std::vector<Label>;

// A stage's series: its name, and with replicas (gpus:) which replica and GPU it is.
Labels stage_labels(const StageSnapshot& st) {
  Labels labels = {{"stage", st.name}};
  if (st.replica >= 0) labels.emplace_back("replica", std::to_string(st.replica + 1));
  if (st.replica >= 0 && st.gpu >= 0) labels.emplace_back("gpu", std::to_string(st.gpu));
  return labels;
}

class Exposition {
 public:
  void family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += prometheus_escape_help(help);
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }
  void sample(std::string_view name, const Labels& labels, double v) { line(name, labels, prometheus_format_value(v)); }
  void sample(std::string_view name, const Labels& labels, std::uint64_t v) { line(name, labels, std::to_string(v)); }
  std::string take() { return std::move(out_); }

 private:
  void line(std::string_view name, const Labels& labels, const std::string& value) {
    out_ += name;
    if (labels.size() != 0) {
      out_ += '{';
      bool first = true;
      for (const auto& [k, v] : labels) {
        if (!first) out_ += ',';
        first = false;
        out_ += k;
        out_ += "=\"";
        out_ += prometheus_escape_label(v);
        out_ += '"';
      }
      out_ += '}';
    }
    out_ += ' ';
    out_ += value;
    out_ += '\n';
  }
  std::string out_;
};

// The process_* families of the Prometheus client libraries, each left out when /proc could not give it.
void render_process_metrics(Exposition& e, const ProcessStats& p) {
  struct Family {
    const char* name;
    const char* type;
    const char* help;
    const std::optional<double>& value;
  };
  const Family families[] = {
      {"process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", p.cpu_s},
      {"process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.", p.start_time_s},
      {"process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", p.resident_bytes},
      {"process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", p.virtual_bytes},
      {"process_open_fds", "gauge", "Number of open file descriptors.", p.open_fds},
      {"process_max_fds", "gauge", "Maximum number of open file descriptors.", p.max_fds},
      {"process_threads", "gauge", "Number of OS threads in the process.", p.threads},
  };
  for (const auto& f : families) {
    if (!f.value) continue;
    e.family(f.name, f.type, f.help);
    e.sample(f.name, {}, *f.value);
  }
}

}  // namespace

std::string render_prometheus(const PipelineSnapshot& s, const MetricsInfo& info) {
  Exposition e;
  const auto& f = s.frames;

  // Produced and the three fates are separate families: summing one family never counts a frame twice.
  e.family("sluice_frames_produced_total", "counter", "Frames the current pipeline's sources produced.");
  e.sample("sluice_frames_produced_total", {}, f.produced);

  e.family("sluice_frames_ended_total", "counter",
           "Frames of the current pipeline that reached their one fate: delivered, dropped or failed.");
  e.sample("sluice_frames_ended_total", {{"fate", "delivered"}}, f.delivered);
  e.sample("sluice_frames_ended_total", {{"fate", "dropped"}}, f.dropped);
  e.sample("sluice_frames_ended_total", {{"fate", "failed"}}, f.failed);

  e.family("sluice_frames_in_flight", "gauge", "Frames produced that have not reached a fate yet.");
  const std::uint64_t ended = f.delivered + f.dropped + f.failed;
  e.sample("sluice_frames_in_flight", {}, f.produced >= ended ? f.produced - ended : std::uint64_t{0});

  e.family("sluice_frames_dropped_total", "counter",
           "Frames dropped, by reason (the reasons of sluice_frames_ended_total{fate=\"dropped\"}).");
  for (const auto& [reason, n] : f.drop_reasons) e.sample("sluice_frames_dropped_total", {{"reason", reason}}, n);

  e.family("sluice_frames_late_total", "counter",
           "Frames delivered past their latency budget (also counted delivered: late frames are not dropped).");
  e.sample("sluice_frames_late_total", {}, f.late);
  e.family("sluice_pipeline_warmup_seconds", "gauge",
           "Time the current pipeline's stages took to open and warm up before its source opened (0: nothing to "
           "warm); frames' latency never includes it.");
  e.sample("sluice_pipeline_warmup_seconds", {}, static_cast<double>(s.warmup_ns) / 1e9);
  e.family("sluice_latency_budget_seconds", "gauge",
           "The pipeline's capture-to-sink latency budget (0: none; a source may have its own).");
  e.sample("sluice_latency_budget_seconds", {}, static_cast<double>(s.latency_budget_ns) / 1e9);
  e.family("sluice_batch_downstream_estimate_seconds", "gauge",
           "The batcher's estimate of how long a batch takes from leaving it to the sink's end (what it leaves "
           "time for under a latency budget).");
  e.sample("sluice_batch_downstream_estimate_seconds", {}, static_cast<double>(s.downstream_ns) / 1e9);

  // The stage's kind once, here, instead of on every per-stage series.
  e.family("sluice_stage_info", "gauge", "1 per stage of the current pipeline, labelled with the stage's kind.");
  for (const auto& st : s.stages) {
    Labels labels = stage_labels(st);
    labels.emplace_back("kind", st.kind);
    e.sample("sluice_stage_info", labels, std::uint64_t{1});
  }
  if (std::any_of(s.stages.begin(), s.stages.end(), [](const StageSnapshot& st) { return st.replica >= 0; })) {
    e.family("sluice_replica_up", "gauge",
             "1 while a replica of the pipeline's GPU stages (gpus:) takes batches, 0 once its GPU faulted or a "
             "stage of it stopped (the source sends the others its batches).");
    int last = -1;
    for (const auto& st : s.stages)
      if (st.replica > last) {
        last = st.replica;
        Labels labels = {{"replica", std::to_string(st.replica + 1)}};
        if (st.gpu >= 0) labels.emplace_back("gpu", std::to_string(st.gpu));
        e.sample("sluice_replica_up", labels, std::uint64_t{st.down.empty() ? 1u : 0u});
      }
  }

  struct StageFamily {
    const char* name;
    const char* type;
    const char* help;
    double (*value)(const StageSnapshot&);
  };
  static const StageFamily kStageFamilies[] = {
      {"sluice_stage_frames_total", "counter", "Frames the stage processed.",
       [](const StageSnapshot& st) { return static_cast<double>(st.frames); }},
      {"sluice_stage_batches_total", "counter", "Batches the stage processed.",
       [](const StageSnapshot& st) { return static_cast<double>(st.batches); }},
      {"sluice_stage_errors_total", "counter", "Errors the stage raised.",
       [](const StageSnapshot& st) { return static_cast<double>(st.errors); }},
      {"sluice_stage_frames_dropped_total", "counter", "Frames dropped by the stage's output queue.",
       [](const StageSnapshot& st) { return static_cast<double>(st.dropped); }},
      {"sluice_stage_frames_late_total", "counter",
       "Late frames (past their latency budget) whose time went mostly to this stage (queue wait before it "
       "included).",
       [](const StageSnapshot& st) { return static_cast<double>(st.late); }},
      {"sluice_stage_gpu_busy_seconds_total", "counter",
       "Seconds the stage's CUDA stream was busy with the stage's work (timing events around each batch); "
       "rate() of it is the stream's busy fraction.",
       [](const StageSnapshot& st) { return st.gpu_ms_total / 1e3; }},
      {"sluice_stage_host_seconds_total", "counter", "Wall time spent inside the stage's process() on its thread.",
       [](const StageSnapshot& st) { return st.host_ms_total / 1e3; }},
      {"sluice_stage_cpu_seconds_total", "counter",
       "CPU time of the stage's steps (its thread's CPU clock around process() and the runner's work for each "
       "batch) plus its worker threads' CPU for them (the track stage's crew); every thread's CPU is in "
       "sluice_thread_cpu_seconds_total.",
       [](const StageSnapshot& st) { return st.cpu_ms_total / 1e3; }},
      {"sluice_stage_input_wait_seconds_total", "counter", "Time the stage was blocked waiting for input.",
       [](const StageSnapshot& st) { return st.wait_in_ms / 1e3; }},
      {"sluice_stage_output_wait_seconds_total", "counter",
       "Time the stage was blocked on a full output queue or an empty buffer pool.",
       [](const StageSnapshot& st) { return st.wait_out_ms / 1e3; }},
      {"sluice_stage_queue_depth", "gauge", "Buffers in the stage's output queue (0 for the sink).",
       [](const StageSnapshot& st) { return static_cast<double>(st.queue_depth); }},
      {"sluice_stage_queue_capacity", "gauge", "Capacity of the stage's output queue (0 for the sink).",
       [](const StageSnapshot& st) { return static_cast<double>(st.queue_capacity); }},
      {"sluice_stage_queue_high_water", "gauge", "Highest depth the stage's output queue has reached.",
       [](const StageSnapshot& st) { return static_cast<double>(st.queue_high_water); }},
  };
  for (const auto& fam : kStageFamilies) {
    e.family(fam.name, fam.type, fam.help);
    for (const auto& st : s.stages) {
      const double v = fam.value(st);
      const Labels labels = stage_labels(st);
      // Integer counts stay exact (a double holds every integer up to 2^53).
      if (v >= 0 && v < 9007199254740992.0 && v == std::floor(v))
        e.sample(fam.name, labels, static_cast<std::uint64_t>(v));
      else
        e.sample(fam.name, labels, v);
    }
  }

  if (info.latency) {
    static constexpr double kLe[] = {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10};
    e.family("sluice_frame_latency_seconds", "histogram",
             "Capture-to-sink latency of delivered frames (bucket edges at the engine's ~4% resolution).");
    for (double le : kLe)
      e.sample("sluice_frame_latency_seconds_bucket", {{"le", prometheus_format_value(le)}},
               info.latency->count_at_most(static_cast<std::int64_t>(le * 1e9)));
    e.sample("sluice_frame_latency_seconds_bucket", {{"le", "+Inf"}}, info.latency->count());
    e.sample("sluice_frame_latency_seconds_sum", {}, static_cast<double>(info.latency->sum_ns()) / 1e9);
    e.sample("sluice_frame_latency_seconds_count", {}, info.latency->count());
  }

  if (!info.sources.empty()) {
    // Per source: what an alert on a dead camera or a failing job needs.
    e.family("sluice_source_frames_total", "counter", "Frames a source decoded and handed on, by source.");
    for (const auto& r : info.sources) e.sample("sluice_source_frames_total", {{"source", r.name}}, r.frames);
    e.family("sluice_source_frames_dropped_total", "counter",
             "Frames a source dropped before batching (leaky when behind, rate limit), by source.");
    for (const auto& r : info.sources) e.sample("sluice_source_frames_dropped_total", {{"source", r.name}}, r.dropped);
    e.family("sluice_source_frames_late_total", "counter",
             "Frames of a source delivered past their latency budget (the pipeline's or the source's own), by source.");
    for (const auto& r : info.sources) {
      const auto it = f.sources.find(r.id);
      e.sample("sluice_source_frames_late_total", {{"source", r.name}}, it != f.sources.end() ? it->second.late : 0);
    }
    e.family("sluice_source_errors_total", "counter", "Open/read errors and bad inputs, by source.");
    for (const auto& r : info.sources) e.sample("sluice_source_errors_total", {{"source", r.name}}, r.errors);
    e.family("sluice_source_reconnects_total", "counter", "Reconnection attempts of live sources, by source.");
    for (const auto& r : info.sources) e.sample("sluice_source_reconnects_total", {{"source", r.name}}, r.reconnects);
    // Every state, 0 or 1: a change of state changes values, never the set of series.
    e.family("sluice_source_state", "gauge", "1 for the state each source is in, 0 for the others.");
    for (const auto& r : info.sources)
      for (const SourceState st : kSourceStates)
        e.sample("sluice_source_state", {{"source", r.name}, {"state", to_string(st)}}, std::uint64_t{r.state == st});
    e.family("sluice_source_decoder_info", "gauge",
             "1 per source, labelled with the decoder of its open input (NVDEC or libavcodec, and where frames go).");
    for (const auto& r : info.sources)
      if (!r.decoder.empty()) e.sample("sluice_source_decoder_info", {{"source", r.name}, {"decoder", r.decoder}}, std::uint64_t{1});
  }

  if (!info.thread_cpu_s.empty()) {
    e.family("sluice_thread_cpu_seconds_total", "counter",
             "CPU time of the process's threads by group: stages, sources (decode threads included), cuda, main, "
             "other, exited; the groups add up to process_cpu_seconds_total.");
    for (const auto& [group, seconds] : info.thread_cpu_s)
      e.sample("sluice_thread_cpu_seconds_total", {{"group", group}}, seconds);
  }

  e.family("sluice_pipeline_generation", "gauge",
           "Pipelines started by this process: 1, then +1 per successful reload.");
  e.sample("sluice_pipeline_generation", {}, info.generation);

  e.family("sluice_state", "gauge", "1 for the daemon's state, 0 for the others.");
  for (const std::string_view st : kDaemonStates)
    e.sample("sluice_state", {{"state", st}}, std::uint64_t{info.state == st});

  e.family("sluice_build_info", "gauge", "The build of sluiced, as labels; the value is always 1.");
  e.sample("sluice_build_info", {{"version", info.version}}, std::uint64_t{1});

  e.family("sluice_pipeline_info", "gauge",
           "The loaded pipeline, as labels (they change only when a reload loads another file or pipeline); "
           "the value is always 1.");
  e.sample("sluice_pipeline_info",
           {{"pipeline", s.name}, {"device", s.device}, {"execution", s.execution}, {"config", info.config_path}},
           std::uint64_t{1});

  render_process_metrics(e, info.process);
  return e.take();
}

// ---------------------------------------------------------------------------------------------------
// HTTP server
// ---------------------------------------------------------------------------------------------------

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

constexpr std::size_t kMaxRequestBytes = 8 * 1024;  // header limit, and body limit
// A request must arrive whole within this of the connection's start (or of the previous reply): one deadline
// for the request line, headers and body, not moved by bytes arriving, so trickling a header byte by byte
// (slowloris) holds a connection no longer than an idle one.
constexpr auto kRequestDeadline = std::chrono::seconds(5);
constexpr auto kDeadline = std::chrono::seconds(10);  // writing a reply
constexpr auto kLingerDeadline = std::chrono::seconds(2);
constexpr std::size_t kLingerMaxBytes = 64 * 1024;
constexpr std::size_t kMaxSessions = 64;
constexpr std::string_view kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The first path segment of a request target, without query or fragment.
std::string_view target_path(std::string_view target) {
  const auto q = target.find_first_of("?#");
  return q == std::string_view::npos ? target : target.substr(0, q);
}

}  // namespace

// Added to every reply of the handler (the console's pages and API): live data, never cached (the page changes
// with the binary); no type sniffing; the console's own pages only: no framing by other sites, no scripts or
// images from elsewhere.
const std::array<std::pair<std::string, std::string>, 3> kHandlerHeaders = {{
    {"Cache-Control", "no-store"},
    {"X-Content-Type-Options", "nosniff"},
    {"Content-Security-Policy",
     "default-src 'self'; img-src 'self' blob:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"},
}};

class MetricsSession;

struct MetricsServer::Impl : std::enable_shared_from_this<MetricsServer::Impl> {
  Impl(net::io_context& io_, std::function<std::string()> render_, HttpHandler handler_)
      : io(io_), acceptor(net::make_strand(io_)), retry(acceptor.get_executor()), render(std::move(render_)),
        handler(std::move(handler_)) {}

  void do_accept();
  void on_accept(beast::error_code ec, tcp::socket socket);
  // At the connection cap: closes the connection that has waited longest for its request (else the oldest),
  // so a new scrape is served instead of refused; half-sent requests cannot starve /metrics.
  void evict_one();
  void do_stop();  // on the acceptor's strand

  net::io_context& io;
  tcp::acceptor acceptor;
  net::steady_timer retry;
  std::function<std::string()> render;
  HttpHandler handler;  // empty: only /metrics and /
  std::atomic<bool> stopped{false};
  unsigned short port = 0;
  std::string address;

  std::mutex mu;  // guards sessions (sessions live on their own strands)
  std::list<std::weak_ptr<MetricsSession>> sessions;
};

class MetricsSession : public std::enable_shared_from_this<MetricsSession> {
 public:
  MetricsSession(tcp::socket socket, std::shared_ptr<MetricsServer::Impl> server)
      : stream_(std::move(socket)), server_(std::move(server)) {}

  ~MetricsSession() {
    std::lock_guard lock(server_->mu);
    if (registered_) server_->sessions.erase(self_in_list_);
  }

  // Called on the acceptor's strand right after accepting.
  void start() {
    {
      std::lock_guard lock(server_->mu);
      self_in_list_ = server_->sessions.insert(server_->sessions.end(), weak_from_this());
      registered_ = true;
    }
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_request(); });
  }

  // Since when this connection has been waiting for its peer: for the request (reading) or to take the reply.
  std::int64_t waiting_since_ns() const { return waiting_since_ns_.load(); }
  bool reading() const { return reading_.load(); }
  // Evicted (evict_one): it no longer counts against the cap while its close is on its way.
  bool evicted() const { return evicted_.load(); }
  void evict() {
    evicted_.store(true);
    close_from_server();
  }

  // From stop(): close the connection on the session's own strand.
  void close_from_server() {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      self->closing_ = true;
      self->stream_.close();  // pending operations complete with operation_aborted
    });
  }

 private:
  void read_request() {
    if (closing_) return;
    parser_.emplace();
    parser_->header_limit(kMaxRequestBytes);
    parser_->body_limit(kMaxRequestBytes);
    waiting_since_ns_.store(steady_ns());
    reading_.store(true);
    stream_.expires_after(kRequestDeadline);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (closing_) return;
    if (ec == http::error::end_of_stream) return shutdown_send();  // client closed between requests
    if (ec == http::error::header_limit)
      return send_error(http::status::request_header_fields_too_large, "request header too large\n");
    if (ec == http::error::body_limit) return send_error(http::status::payload_too_large, "request body too large\n");
    if (ec == http::error::partial_message) return;  // client went away mid-request
    if (ec && ec.category() == http::make_error_code(http::error::bad_method).category())
      return send_error(http::status::bad_request, "bad request: " + ec.message() + "\n");
    if (ec) return;  // timeout (the stream closed the socket), reset, ...
    handle(parser_->release());
  }

  template <class Body>
  http::response<Body> make_response(http::status status, unsigned version, bool keep_alive) {
    http::response<Body> res{status, version};
    res.set(http::field::server, "sluiced");
    res.keep_alive(keep_alive);
    return res;
  }

  void handle(http::request<http::string_body>&& req) {
    const bool keep_alive = req.keep_alive() && !server_->stopped.load();
    const bool head = req.method() == http::verb::head;
    http::status status = http::status::ok;
    std::string content_type = "text/plain; charset=utf-8";
    std::string body;
    bool allow = false;
    const std::string_view path = target_path(std::string_view(req.target().data(), req.target().size()));

    if (server_->handler && path != "/metrics") return hand_over(std::move(req), keep_alive, head);

    if (req.method() != http::verb::get && !head) {
      status = http::status::method_not_allowed;
      body = "method not allowed: use GET\n";
      allow = true;
    } else if (path == "/metrics") {
      try {
        body = server_->render();
        content_type = kMetricsContentType;
      } catch (const std::exception& e) {
        status = http::status::internal_server_error;
        body = std::string("rendering metrics failed: ") + e.what() + "\n";
      } catch (...) {
        status = http::status::internal_server_error;
        body = "rendering metrics failed\n";
      }
    } else if (path == "/") {
      content_type = "text/html; charset=utf-8";
      body = "<html><body>sluiced: metrics at <a href=\"/metrics\">/metrics</a></body></html>\n";
    } else {
      status = http::status::not_found;
      body = "not found: try /metrics\n";
    }

    send_reply({static_cast<unsigned>(status), std::move(content_type), std::move(body), allow ? "GET, HEAD" : "", {}},
               req.version(), keep_alive, head);
  }

  // A request for the handler: it answers through `respond`, now or later, from any thread; the reply is sent on
  // this session's strand. Nothing is read meanwhile (one request at a time per connection).
  void hand_over(http::request<http::string_body>&& req, bool keep_alive, bool head) {
    HttpRequestView view;
    view.method = std::string(req.method_string());
    view.target = std::string(req.target());
    if (auto it = req.find(http::field::authorization); it != req.end()) view.authorization = std::string(it->value());
    if (auto it = req.find(http::field::host); it != req.end()) view.host = std::string(it->value());
    view.body = std::move(req.body());
    beast::error_code ec;
    const auto peer = stream_.socket().remote_endpoint(ec);
    view.remote = ec ? std::string("unknown") : endpoint_string(peer);
    const unsigned version = req.version();
    auto answered = std::make_shared<std::atomic<bool>>(false);
    HttpRespond respond = [self = shared_from_this(), answered, version, keep_alive, head](HttpReply r) {
      if (answered->exchange(true)) return;  // only the first answer counts
      r.headers.insert(r.headers.end(), kHandlerHeaders.begin(), kHandlerHeaders.end());
      net::post(self->stream_.get_executor(), [self, r = std::move(r), version, keep_alive, head]() mutable {
        if (self->closing_) return;
        self->send_reply(std::move(r), version, keep_alive, head);
      });
    };
    try {
      server_->handler(view, respond);
    } catch (const std::exception& e) {
      respond({500, "text/plain; charset=utf-8", std::string("internal error: ") + e.what() + "\n"});
    } catch (...) {
      respond({500, "text/plain; charset=utf-8", "internal error\n"});
    }
  }

  // Every reply of a request read whole: /metrics, /, the refusals and the handler's.
  void send_reply(HttpReply r, unsigned version, bool keep_alive, bool head) {
    const auto status = static_cast<http::status>(r.status);
    auto fill = [&](auto& res) {
      res.set(http::field::content_type, r.content_type);
      if (!r.allow.empty()) res.set(http::field::allow, r.allow);
      for (const auto& [name, value] : r.headers) res.set(name, value);
    };
    if (head) {
      auto res = make_response<http::empty_body>(status, version, keep_alive);
      fill(res);
      res.content_length(r.body.size());
      send(std::move(res), !keep_alive, false);
    } else {
      auto res = make_response<http::string_body>(status, version, keep_alive);
      fill(res);
      res.body() = std::move(r.body);
      res.prepare_payload();
      send(std::move(res), !keep_alive, false);
    }
  }

  // A reply to a request that could not be read whole: then the connection closes.
  void send_error(http::status status, std::string body) {
    auto res = make_response<http::string_body>(status, 11, false);
    res.set(http::field::content_type, "text/plain; charset=utf-8");
    res.body() = std::move(body);
    res.prepare_payload();
    send(std::move(res), true, true);
  }

  template <class Body>
  void send(http::response<Body>&& msg, bool close, bool linger) {
    auto res = std::make_shared<http::response<Body>>(std::move(msg));
    waiting_since_ns_.store(steady_ns());
    reading_.store(false);
    stream_.expires_after(kDeadline);
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res, close, linger](beast::error_code ec, std::size_t) {
                        if (self->closing_ || ec) return;
                        if (!close) return self->read_request();
                        self->shutdown_send();
                        if (linger) self->linger();
                      });
  }

  void shutdown_send() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  // After an error reply the client may still be sending the rest of its request; closing with unread
  // data would reset the connection and could destroy the reply before the client reads it. So read
  // and discard for a short while (bounded in time and bytes) until the client closes.
  void linger() {
    stream_.expires_after(kLingerDeadline);
    drain();
  }
  void drain() {
    stream_.async_read_some(net::buffer(drain_buf_), [self = shared_from_this()](beast::error_code ec, std::size_t n) {
      if (ec || self->closing_) return;
      self->drained_ += n;
      if (self->drained_ < kLingerMaxBytes) self->drain();
    });
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<MetricsServer::Impl> server_;
  std::list<std::weak_ptr<MetricsSession>>::iterator self_in_list_;
  bool registered_ = false;
  bool closing_ = false;
  std::atomic<std::int64_t> waiting_since_ns_{0};
  std::atomic<bool> reading_{true};
  std::atomic<bool> evicted_{false};
  std::array<char, 4096> drain_buf_{};
  std::size_t drained_ = 0;
};

void MetricsServer::Impl::do_accept() {
  acceptor.async_accept(net::make_strand(io), [self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
    self->on_accept(ec, std::move(socket));
  });
}

void MetricsServer::Impl::on_accept(beast::error_code ec, tcp::socket socket) {
  if (stopped.load() || ec == net::error::operation_aborted) return;
  if (ec) {
    // Transient (out of file descriptors, connection aborted before accept): try again shortly,
    // without spinning.
    retry.expires_after(std::chrono::milliseconds(100));
    retry.async_wait([self = shared_from_this()](beast::error_code wec) {
      if (!wec && !self->stopped.load()) self->do_accept();
    });
    return;
  }
  evict_one();
  std::make_shared<MetricsSession>(std::move(socket), shared_from_this())->start();
  do_accept();
}

void MetricsServer::Impl::evict_one() {
  std::vector<std::shared_ptr<MetricsSession>> open;  // released after the lock: a session's destructor takes it
  {
    std::lock_guard lock(mu);
    for (auto& w : sessions)
      if (auto s = w.lock(); s && !s->evicted()) open.push_back(std::move(s));
  }
  if (open.size() < kMaxSessions) return;
  auto older = [](const auto& a, const auto& b) {
    if (a->reading() != b->reading()) return a->reading();  // one still sending its request goes first
    return a->waiting_since_ns() < b->waiting_since_ns();
  };
  (*std::min_element(open.begin(), open.end(), older))->evict();
}

void MetricsServer::Impl::do_stop() {
  stopped.store(true);
  beast::error_code ignored;
  acceptor.close(ignored);
  retry.cancel();
  std::vector<std::shared_ptr<MetricsSession>> open;
  {
    std::lock_guard lock(mu);
    for (auto& w : sessions)
      if (auto s = w.lock()) open.push_back(std::move(s));
  }
  for (auto& s : open) s->close_from_server();
}

MetricsServer::MetricsServer(boost::asio::io_context& io, const std::string& listen,
                             std::function<std::string()> render, HttpHandler handler, const char* what)
    : impl_(std::make_shared<Impl>(io, std::move(render), std::move(handler))) {
  const tcp::endpoint bound = listen_tcp(io, impl_->acceptor, listen, what);
  impl_->port = bound.port();
  impl_->address = endpoint_string(bound);
  impl_->do_accept();  // nothing else can touch the acceptor yet
}

MetricsServer::~MetricsServer() { stop(); }

void MetricsServer::stop() {
  if (!impl_) return;
  net::dispatch(impl_->acceptor.get_executor(), [impl = impl_] { impl->do_stop(); });
}

unsigned short MetricsServer::port() const noexcept { return impl_->port; }
const std::string& MetricsServer::address() const noexcept { return impl_->address; }

}  // namespace sluice
