#pragma once
// Prometheus exposition of the engine's statistics (text format 0.0.4), served over HTTP.
//
//   render_prometheus()  pure function: PipelineSnapshot + daemon facts -> exposition text.
//   MetricsServer        Boost.Beast HTTP server on the daemon's io_context: GET /metrics, GET /.
//
// Families (each has one HELP and one TYPE line, in this order; docs/metrics-example.txt is a whole scrape). Practice
// followed (prometheus.io "Metric and label naming", "Instrumentation"): units in the name, counters end in
// _total and only go up, no label repeats another, a family sums without double counting, and the set of
// series does not change when the daemon pauses, resumes or reloads the same file (states are 0/1 series;
// only a drop reason's series appears with its first drop, in each generation).
//   sluice_frames_produced_total                                         counter
//   sluice_frames_ended_total{fate="delivered|dropped|failed"}           counter
//   sluice_frames_in_flight                                              gauge
//   sluice_frames_dropped_total{reason}                                  counter
//   sluice_stage_info{stage,kind} 1                                      gauge
//   sluice_stage_frames_total{stage}                                     counter
//   sluice_stage_batches_total{stage}                                    counter
//   sluice_stage_errors_total{stage}                                     counter
//   sluice_stage_frames_dropped_total{stage}                             counter
//   sluice_stage_gpu_busy_seconds_total{stage}                           counter
//   sluice_stage_host_seconds_total{stage}                               counter
//   sluice_stage_cpu_seconds_total{stage}                                counter
//   sluice_stage_input_wait_seconds_total{stage}                         counter
//   sluice_stage_output_wait_seconds_total{stage}                        counter
//   sluice_stage_queue_depth{stage}                                      gauge
//   sluice_stage_queue_capacity{stage}                                   gauge (0 for the sink)
//   sluice_stage_queue_high_water{stage}                                 gauge
//   sluice_frame_latency_seconds (_bucket{le}, _sum, _count)             histogram
//   sluice_source_frames_total{source}                                   counter  (with sources)
//   sluice_source_frames_dropped_total{source}                           counter
//   sluice_source_errors_total{source}                                   counter
//   sluice_source_reconnects_total{source}                               counter
//   sluice_source_state{source,state} 0|1                                gauge (every state)
//   sluice_source_decoder_info{source,decoder} 1                         gauge
//   sluice_thread_cpu_seconds_total{group}                               counter (daemon/thread_cpu.hpp)
//   sluice_pipeline_generation                                           gauge
//   sluice_state{state} 0|1                                              gauge (every state of kDaemonStates)
//   sluice_build_info{version} 1                                         gauge
//   sluice_pipeline_info{pipeline,device,execution,config} 1             gauge
//   process_cpu_seconds_total, process_start_time_seconds, process_resident_memory_bytes,
//   process_virtual_memory_bytes, process_open_fds, process_max_fds, process_threads  (each when /proc has it)
//
// The frame and stage counters are the current pipeline's: they restart from 0 when a reload starts a
// new generation, which Prometheus' rate()/increase() treat as an ordinary counter reset.
#include <boost/asio/io_context.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/process_stats.hpp"
#include "runtime/source_control.hpp"
#include "runtime/stats.hpp"

namespace sluice {

// The daemon's states, each a series of sluice_state.
inline constexpr std::string_view kDaemonStates[] = {"starting", "running", "paused", "reloading", "stopping"};

struct MetricsInfo {
  std::uint64_t generation = 0;
  std::string state;  // one of kDaemonStates
  std::string config_path;
  std::string version;
  // The engine's latency histogram (sluice_frame_latency_seconds); null -> the family is left out.
  const LatencyHistogram* latency = nullptr;
  std::vector<SourceReport> sources;  // per-source counters and state (sluice_source_*)
  std::map<std::string, double> thread_cpu_s;  // sluice_thread_cpu_seconds_total by group; empty -> left out
  ProcessStats process;  // process_*
};

// The whole exposition, ending in '\n'. Pure: same inputs, same text.
std::string render_prometheus(const PipelineSnapshot& s, const MetricsInfo& info);

// Text-format escaping: label values escape \ " and newline; HELP text escapes \ and newline.
std::string prometheus_escape_label(std::string_view v);
std::string prometheus_escape_help(std::string_view v);
// A sample value: integers without a fraction, others shortest round-trip, NaN, +Inf, -Inf.
std::string prometheus_format_value(double v);

// HTTP endpoint for the exposition.
//
//   GET/HEAD /metrics  200, Content-Type: text/plain; version=0.0.4; charset=utf-8, body = render()
//   GET/HEAD /         200, one line of HTML pointing at /metrics
//   other paths        404;  other methods 405 (with Allow: GET, HEAD)
//   headers > 8 KiB    431 and close;  body > 8 KiB  413 and close;  malformed  400 and close
//
// One session object per connection; keep-alive is honoured. A request (line, headers and body) must arrive
// whole within 5 s of the connection's start or of the previous reply: one deadline, not moved by bytes
// arriving (a header trickled byte by byte is closed as soon as an idle connection). Writing a reply has 10 s.
// At most 64 connections at once: a new one evicts the connection that has waited longest for its request
// (else the oldest), so half-sent requests (slowloris) cannot starve a scrape. Everything is asynchronous on
// `io`: a slow client never blocks the io_context.
// render() runs on the io_context thread; if it throws, the reply is 500 with the message.
//
// With an HttpHandler (the console, daemon/console_service.hpp) every request but /metrics goes to it instead: any
// method, the body (at most 8 KiB) included; the handler answers through HttpRespond, at once or later (a trace).
// Same limits as above; while the handler works no deadline runs (the handler bounds its own time).
//
// Lifetime: `io` must outlive the server. Destroying the server stops it.
class MetricsSession;

// A request as the handler sees it: bounded by the server's limits (header and body at most 8 KiB each).
struct HttpRequestView {
  std::string method;         // "GET", "HEAD", "POST", ... as sent
  std::string target;         // as sent: path and query
  std::string authorization;  // the Authorization header, empty when absent
  std::string host;           // the Host header, empty when absent
  std::string body;
  std::string remote;         // "ADDRESS:PORT" of the peer
};
struct HttpReply {
  unsigned status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::string allow;          // the Allow header of a 405, else empty
  std::vector<std::pair<std::string, std::string>> headers;  // more headers (names and values from sluiced)
};
// Called once per request; may be called from any thread (it posts to the session's strand).
using HttpRespond = std::function<void(HttpReply)>;
using HttpHandler = std::function<void(const HttpRequestView& request, HttpRespond respond)>;

class MetricsServer {
 public:
  // listen: "HOST:PORT" with an IPv4 literal or a host name ("127.0.0.1:9464", "localhost:9464"),
  // "[IPV6]:PORT" ("[::1]:9464"), or ":PORT" for all interfaces (IPv6 dual-stack where available,
  // else IPv4). PORT 0 picks a free port (see port()). Starts accepting at once; throws
  // std::runtime_error naming the address on a malformed address or a failure to bind/listen.
  // `what` names the listener in errors ("metrics", "console").
  MetricsServer(boost::asio::io_context& io, const std::string& listen, std::function<std::string()> render,
                HttpHandler handler = {}, const char* what = "metrics");
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Closes the acceptor and every open connection (a reply being written is cut short), so that
  // io.run() returns once nothing else is pending. Callable from any thread, more than once; from
  // another thread it takes effect when the io_context runs the posted handler.
  void stop();

  unsigned short port() const noexcept;          // the bound port (useful after listening on port 0)
  const std::string& address() const noexcept;   // the bound endpoint, e.g. "127.0.0.1:9464", "[::]:9464"

 private:
  friend class MetricsSession;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace sluice
