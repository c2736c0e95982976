// Prometheus exposition (render_prometheus) and its HTTP server (MetricsServer).
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon/metrics.hpp"

using namespace sluice;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

bool has_line(const std::string& text, const std::string& line) {
  for (const auto& l : lines_of(text))
    if (l == line) return true;
  return false;
}

PipelineSnapshot sample_snapshot() {
  PipelineSnapshot s;
  s.name = "default";
  s.device = "cuda";
  s.execution = "pipelined";
  s.elapsed_s = 10;
  s.running = true;
  s.frames.produced = 100;
  s.frames.delivered = 90;
  s.frames.dropped = 6;
  s.frames.failed = 1;
  s.frames.drop_reasons = {{"queue full (leaky: oldest)", 4}, {"decode \"error\"", 2}};
  s.frames.late = 9;
  s.latency_budget_ns = 20'000'000;
  s.downstream_ns = 6'500'000;
  s.warmup_ns = 1'250'000'000;

  StageSnapshot a;
  a.name = "decode";
  a.kind = "testsrc";
  a.frames = 100;
  a.batches = 13;
  a.host_ms_total = 1500;
  a.cpu_ms_total = 250;
  a.wait_out_ms = 20;
  a.queue_depth = 1;
  a.queue_capacity = 4;
  a.queue_high_water = 3;
  s.stages.push_back(a);

  StageSnapshot b;
  b.name = "a\"b\\c\nd";  // quote, backslash, newline
  b.kind = "infer";
  b.on_gpu = true;
  b.frames = 96;
  b.batches = 12;
  b.errors = 2;
  b.dropped = 5;
  b.gpu_ms_total = 250;
  b.wait_in_ms = 125;
  b.late = 9;
  s.stages.push_back(b);

  return s;
}

MetricsInfo sample_info(const LatencyHistogram* h) {
  MetricsInfo info;
  info.generation = 2;
  info.state = "running";
  info.config_path = "/etc/sluice/pipeline.yaml";
  info.version = "0.1.0";
  info.latency = h;
  info.thread_cpu_s = {{"main", 0.5}, {"sources", 2.25}, {"stages", 1}};
  info.process.cpu_s = 3.75;
  info.process.start_time_s = 1764633600.5;
  info.process.resident_bytes = 104857600;
  info.process.virtual_bytes = 2147483648.0;
  info.process.open_fds = 12;
  info.process.max_fds = 1024;
  info.process.threads = 9;
  return info;
}

// A small parser of the text format, strict enough to catch malformed output: returns the metric name
// of a sample line and fills its labels (unescaped) and value text.
bool parse_sample(const std::string& line, std::string& name, std::map<std::string, std::string>& labels,
                  std::string& value) {
  std::size_t i = 0;
  auto name_char = [](char c, bool first) {
    return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':' ||
           (!first && std::isdigit(static_cast<unsigned char>(c)));
  };
  while (i < line.size() && name_char(line[i], i == 0)) ++i;
  if (i == 0) return false;
  name = line.substr(0, i);
  labels.clear();
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      std::size_t k = i;
      while (i < line.size() && name_char(line[i], i == k)) ++i;
      if (i == k || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') return false;
      const std::string key = line.substr(k, i - k);
      i += 2;
      std::string v;
      for (;; ++i) {
        if (i >= line.size()) return false;
        if (line[i] == '"') break;
        if (line[i] == '\\') {
          if (++i >= line.size()) return false;
          if (line[i] == 'n') v += '\n';
          else if (line[i] == '\\' || line[i] == '"') v += line[i];
          else return false;
        } else {
          v += line[i];
        }
      }
      ++i;  // closing quote
      if (labels.count(key)) return false;
      labels[key] = v;
      if (i < line.size() && line[i] == ',') ++i;
    }
    if (i >= line.size()) return false;
    ++i;  // '}'
  }
  if (i >= line.size() || line[i] != ' ') return false;
  value = line.substr(i + 1);
  if (value.empty() || value.find(' ') != std::string::npos) return false;
  if (value != "NaN" && value != "+Inf" && value != "-Inf") {
    char* end = nullptr;
    std::strtod(value.c_str(), &end);
    if (end != value.c_str() + value.size()) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("prometheus escaping and values", "[metrics]") {
  CHECK(prometheus_escape_label("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
  CHECK(prometheus_escape_label("plain") == "plain");
  CHECK(prometheus_escape_help("x \"y\" \\ \n") == "x \"y\" \\\\ \\n");
  CHECK(prometheus_format_value(0) == "0");
  CHECK(prometheus_format_value(-0.0) == "0");
  CHECK(prometheus_format_value(3) == "3");
  CHECK(prometheus_format_value(0.0031) == "0.0031");
  CHECK(prometheus_format_value(1.5) == "1.5");
  CHECK(prometheus_format_value(std::nan("")) == "NaN");
  CHECK(prometheus_format_value(HUGE_VAL) == "+Inf");
  CHECK(prometheus_format_value(-HUGE_VAL) == "-Inf");
}

TEST_CASE("render_prometheus writes every family once, with exact samples", "[metrics]") {
  LatencyHistogram h;
  for (int i = 0; i < 7; ++i) h.record(3'000'000);
  const std::string text = render_prometheus(sample_snapshot(), sample_info(&h));
  REQUIRE(!text.empty());
  CHECK(text.back() == '\n');

  SECTION("frames") {
    CHECK(has_line(text, "# TYPE sluice_frames_produced_total counter"));
    CHECK(has_line(text, "sluice_frames_produced_total 100"));
    CHECK(has_line(text, "# TYPE sluice_frames_ended_total counter"));
    CHECK(has_line(text, "sluice_frames_ended_total{fate=\"delivered\"} 90"));
    CHECK(has_line(text, "sluice_frames_ended_total{fate=\"dropped\"} 6"));
    CHECK(has_line(text, "sluice_frames_ended_total{fate=\"failed\"} 1"));
    CHECK(text.find("fate=\"produced\"") == std::string::npos);
    CHECK(has_line(text, "sluice_frames_in_flight 3"));
    CHECK(has_line(text, "# TYPE sluice_frames_dropped_total counter"));
    CHECK(has_line(text, "sluice_frames_dropped_total{reason=\"queue full (leaky: oldest)\"} 4"));
    CHECK(has_line(text, "sluice_frames_dropped_total{reason=\"decode \\\"error\\\"\"} 2"));
    CHECK(has_line(text, "# TYPE sluice_frames_late_total counter"));
    CHECK(has_line(text, "sluice_frames_late_total 9"));
    CHECK(has_line(text, "sluice_latency_budget_seconds 0.02"));
    CHECK(has_line(text, "sluice_batch_downstream_estimate_seconds 0.0065"));
    CHECK(has_line(text, "# TYPE sluice_pipeline_warmup_seconds gauge"));
    CHECK(has_line(text, "sluice_pipeline_warmup_seconds 1.25"));
  }
  SECTION("stages, with escaped label values; the kind only in sluice_stage_info") {
    const std::string odd = "stage=\"a\\\"b\\\\c\\nd\"";
    CHECK(has_line(text, "# TYPE sluice_stage_info gauge"));
    CHECK(has_line(text, "sluice_stage_info{stage=\"decode\",kind=\"testsrc\"} 1"));
    CHECK(has_line(text, "sluice_stage_info{" + odd + ",kind=\"infer\"} 1"));
    CHECK(has_line(text, "# TYPE sluice_stage_frames_total counter"));
    CHECK(has_line(text, "sluice_stage_frames_total{stage=\"decode\"} 100"));
    CHECK(has_line(text, "sluice_stage_frames_total{" + odd + "} 96"));
    CHECK(has_line(text, "sluice_stage_batches_total{stage=\"decode\"} 13"));
    CHECK(has_line(text, "sluice_stage_errors_total{" + odd + "} 2"));
    CHECK(has_line(text, "sluice_stage_frames_dropped_total{" + odd + "} 5"));
    CHECK(has_line(text, "sluice_stage_frames_late_total{" + odd + "} 9"));
    CHECK(has_line(text, "sluice_stage_frames_late_total{stage=\"decode\"} 0"));
    CHECK(has_line(text, "# TYPE sluice_stage_gpu_busy_seconds_total counter"));
    CHECK(has_line(text, "sluice_stage_gpu_busy_seconds_total{" + odd + "} 0.25"));
    CHECK(has_line(text, "sluice_stage_gpu_busy_seconds_total{stage=\"decode\"} 0"));
    CHECK(has_line(text, "sluice_stage_host_seconds_total{stage=\"decode\"} 1.5"));
    CHECK(has_line(text, "sluice_stage_cpu_seconds_total{stage=\"decode\"} 0.25"));
    CHECK(has_line(text, "sluice_stage_input_wait_seconds_total{" + odd + "} 0.125"));
    CHECK(has_line(text, "sluice_stage_output_wait_seconds_total{stage=\"decode\"} 0.02"));
    CHECK(has_line(text, "# TYPE sluice_stage_queue_depth gauge"));
    CHECK(has_line(text, "sluice_stage_queue_depth{stage=\"decode\"} 1"));
    CHECK(has_line(text, "sluice_stage_queue_capacity{stage=\"decode\"} 4"));
    CHECK(has_line(text, "sluice_stage_queue_capacity{" + odd + "} 0"));
    CHECK(has_line(text, "sluice_stage_queue_high_water{stage=\"decode\"} 3"));
    CHECK(text.find("busy_ratio") == std::string::npos);
    for (const auto& l : lines_of(text)) {
      // The raw newline never reaches the output: no line starts with the stage name's tail.
      CHECK(l.rfind("d\"", 0) != 0);
      if (l.find("kind=") != std::string::npos) CHECK(l.rfind("sluice_stage_info{", 0) == 0);
    }
  }
  SECTION("latency histogram (no summary), generation, state, info") {
    CHECK(text.find("sluice_latency_seconds") == std::string::npos);
    CHECK(text.find("quantile=") == std::string::npos);
    CHECK(has_line(text, "# TYPE sluice_frame_latency_seconds histogram"));
    CHECK(has_line(text, "sluice_frame_latency_seconds_bucket{le=\"0.002\"} 0"));  // all seven took 3 ms
    CHECK(has_line(text, "sluice_frame_latency_seconds_bucket{le=\"0.005\"} 7"));
    CHECK(has_line(text, "sluice_frame_latency_seconds_bucket{le=\"+Inf\"} 7"));
    CHECK(has_line(text, "sluice_frame_latency_seconds_sum 0.021"));
    CHECK(has_line(text, "sluice_frame_latency_seconds_count 7"));
    CHECK(has_line(text, "# TYPE sluice_pipeline_generation gauge"));
    CHECK(has_line(text, "sluice_pipeline_generation 2"));
    CHECK(has_line(text, "# TYPE sluice_state gauge"));
    CHECK(has_line(text, "sluice_state{state=\"starting\"} 0"));
    CHECK(has_line(text, "sluice_state{state=\"running\"} 1"));
    CHECK(has_line(text, "sluice_state{state=\"paused\"} 0"));
    CHECK(has_line(text, "sluice_state{state=\"reloading\"} 0"));
    CHECK(has_line(text, "sluice_state{state=\"stopping\"} 0"));
    CHECK(has_line(text, "# TYPE sluice_build_info gauge"));
    CHECK(has_line(text, "sluice_build_info{version=\"0.1.0\"} 1"));
    CHECK(has_line(text, "# TYPE sluice_pipeline_info gauge"));
    CHECK(has_line(text, "sluice_pipeline_info{pipeline=\"default\",device=\"cuda\",execution=\"pipelined\","
                         "config=\"/etc/sluice/pipeline.yaml\"} 1"));
  }
  SECTION("thread groups and process_* metrics") {
    CHECK(has_line(text, "# TYPE sluice_thread_cpu_seconds_total counter"));
    CHECK(has_line(text, "sluice_thread_cpu_seconds_total{group=\"main\"} 0.5"));
    CHECK(has_line(text, "sluice_thread_cpu_seconds_total{group=\"sources\"} 2.25"));
    CHECK(has_line(text, "sluice_thread_cpu_seconds_total{group=\"stages\"} 1"));
    CHECK(has_line(text, "# TYPE process_cpu_seconds_total counter"));
    CHECK(has_line(text, "process_cpu_seconds_total 3.75"));
    CHECK(has_line(text, "# TYPE process_start_time_seconds gauge"));
    CHECK(has_line(text, "process_start_time_seconds 1764633600.5"));
    CHECK(has_line(text, "process_resident_memory_bytes 104857600"));
    CHECK(has_line(text, "process_virtual_memory_bytes 2147483648"));
    CHECK(has_line(text, "process_open_fds 12"));
    CHECK(has_line(text, "process_max_fds 1024"));
    CHECK(has_line(text, "process_threads 9"));
  }
  SECTION("well-formed: one HELP and one TYPE per family, before its samples, samples parse") {
    std::map<std::string, int> help, type;
    std::map<std::string, std::string> type_of;
    std::set<std::string> seen_families;
    std::string current;
    for (const auto& l : lines_of(text)) {
      INFO(l);
      REQUIRE(!l.empty());
      if (l.rfind("# HELP ", 0) == 0) {
        const std::string name = l.substr(7, l.find(' ', 7) - 7);
        ++help[name];
        CHECK(l.size() > 7 + name.size() + 1);  // has text
      } else if (l.rfind("# TYPE ", 0) == 0) {
        std::istringstream in(l.substr(7));
        std::string name, t;
        in >> name >> t;
        ++type[name];
        type_of[name] = t;
        CHECK(help[name] == 1);  // HELP comes first
        CHECK(seen_families.insert(name).second);
        current = name;
        CHECK((t == "counter" || t == "gauge" || t == "summary" || t == "histogram"));
      } else {
        std::string name, value;
        std::map<std::string, std::string> labels;
        REQUIRE(parse_sample(l, name, labels, value));
        // Every sample belongs to the family declared last (summaries add _count/_sum, histograms _bucket too).
        const bool ok = name == current ||
                        (type_of[current] == "summary" && (name == current + "_count" || name == current + "_sum")) ||
                        (type_of[current] == "histogram" &&
                         (name == current + "_bucket" || name == current + "_count" || name == current + "_sum"));
        CHECK(ok);
        CHECK((name.rfind("sluice_", 0) == 0 || name.rfind("process_", 0) == 0));
      }
    }
    for (const auto& [name, n] : help) CHECK(n == 1);
    for (const auto& [name, n] : type) CHECK(n == 1);
    CHECK(help.size() == type.size());
    CHECK(type.size() == 35);
  }
  SECTION("the odd stage name survives a round trip through the text") {
    bool found = false;
    for (const auto& l : lines_of(text)) {
      std::string name, value;
      std::map<std::string, std::string> labels;
      if (l.rfind("sluice_stage_frames_total{", 0) == 0 && parse_sample(l, name, labels, value) &&
          labels["stage"] == "a\"b\\c\nd") {
        found = true;
        CHECK(labels.size() == 1);
        CHECK(value == "96");
      }
    }
    CHECK(found);
  }
}

TEST_CASE("render_prometheus: per-source counters and state", "[metrics]") {
  PipelineSnapshot s;
  MetricsInfo info;
  SourceReport cam;
  cam.name = "cam\"1";
  cam.state = SourceState::backoff;
  cam.frames = 1200;
  cam.dropped = 7;
  cam.errors = 3;
  cam.reconnects = 2;
  cam.id = 4;
  info.sources = {cam};
  s.frames.sources[4].late = 11;
  const std::string text = render_prometheus(s, info);
  CHECK(has_line(text, "sluice_source_frames_late_total{source=\"cam\\\"1\"} 11"));
  CHECK(has_line(text, "sluice_source_frames_total{source=\"cam\\\"1\"} 1200"));
  CHECK(has_line(text, "sluice_source_frames_dropped_total{source=\"cam\\\"1\"} 7"));
  CHECK(has_line(text, "sluice_source_errors_total{source=\"cam\\\"1\"} 3"));
  CHECK(has_line(text, "sluice_source_reconnects_total{source=\"cam\\\"1\"} 2"));
  CHECK(has_line(text, "sluice_source_state{source=\"cam\\\"1\",state=\"backoff\"} 1"));
  // Every state has its series: a change of state changes values only.
  for (const char* other : {"connecting", "live", "stalled", "eos", "failed", "removed"})
    CHECK(has_line(text, std::string("sluice_source_state{source=\"cam\\\"1\",state=\"") + other + "\"} 0"));
  CHECK(render_prometheus(s, MetricsInfo{}).find("sluice_source_") == std::string::npos);  // none: no families
}

TEST_CASE("render_prometheus: a replica's stages carry replica and gpu labels - sluice_replica_up says which is down", "[metrics][replicas]") {
  PipelineSnapshot s;
  for (int r = 0; r < 2; ++r) {
    StageSnapshot st;
    st.name = "infer";
    st.kind = "infer";
    st.replica = r;
    st.gpu = r + 2;
    st.frames = 10u + static_cast<unsigned>(r);
    if (r == 1) st.down = "replica 2 (gpu 3) is down after: cudaErrorECCUncorrectable";
    s.stages.push_back(st);
  }
  StageSnapshot sink;
  sink.name = "sink";
  sink.kind = "sink";
  s.stages.push_back(sink);
  const std::string text = render_prometheus(s, MetricsInfo{});
  CHECK(has_line(text, "sluice_stage_frames_total{stage=\"infer\",replica=\"1\",gpu=\"2\"} 10"));
  CHECK(has_line(text, "sluice_stage_frames_total{stage=\"infer\",replica=\"2\",gpu=\"3\"} 11"));
  CHECK(has_line(text, "sluice_stage_info{stage=\"infer\",replica=\"2\",gpu=\"3\",kind=\"infer\"} 1"));
  CHECK(has_line(text, "sluice_stage_frames_total{stage=\"sink\"} 0"));
  CHECK(has_line(text, "sluice_replica_up{replica=\"1\",gpu=\"2\"} 1"));
  CHECK(has_line(text, "sluice_replica_up{replica=\"2\",gpu=\"3\"} 0"));
  s.stages.clear();
  CHECK(render_prometheus(s, MetricsInfo{}).find("sluice_replica_up") == std::string::npos);  // no replicas: none
}

TEST_CASE("render_prometheus: empty pipeline, no histogram, no /proc", "[metrics]") {
  PipelineSnapshot s;  // no stages, no frames, no latency
  MetricsInfo info;
  info.state = "starting";
  const std::string text = render_prometheus(s, info);
  CHECK(has_line(text, "sluice_frames_produced_total 0"));
  CHECK(has_line(text, "sluice_frames_in_flight 0"));
  CHECK(has_line(text, "# TYPE sluice_frames_dropped_total counter"));  // family declared, no samples
  CHECK(text.find("sluice_frames_dropped_total{") == std::string::npos);
  CHECK(text.find("sluice_stage_frames_total{") == std::string::npos);
  CHECK(text.find("sluice_frame_latency_seconds") == std::string::npos);
  CHECK(text.find("# TYPE sluice_thread_cpu_seconds_total") == std::string::npos);
  for (const auto& l : lines_of(text))  // nothing made up when /proc gave nothing
    CHECK((l.rfind("process_", 0) != 0 && l.rfind("# TYPE process_", 0) != 0));
  CHECK(has_line(text, "sluice_state{state=\"starting\"} 1"));
  CHECK(has_line(text, "sluice_pipeline_info{pipeline=\"\",device=\"\",execution=\"\",config=\"\"} 1"));
  // Pure: the same inputs give the same text.
  CHECK(render_prometheus(s, info) == text);
}

namespace {
// Every sample of an exposition: "name{labels}" -> value, and the type of each family.
struct Scrape {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;
};
Scrape scrape_of(const std::string& text) {
  Scrape out;
  for (const auto& l : lines_of(text)) {
    if (l.rfind("# TYPE ", 0) == 0) {
      std::istringstream in(l.substr(7));
      std::string name, t;
      in >> name >> t;
      out.types[name] = t;
    } else if (l.rfind("#", 0) != 0) {
      const auto sp = l.rfind(' ');
      REQUIRE(out.samples.emplace(l.substr(0, sp), std::strtod(l.c_str() + sp + 1, nullptr)).second);  // no duplicate series
    }
  }
  return out;
}
std::string family_of(const std::string& series, const std::map<std::string, std::string>& types) {
  const std::string name = series.substr(0, series.find('{'));
  if (types.count(name)) return name;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0 &&
        types.count(name.substr(0, name.size() - s.size())))
      return name.substr(0, name.size() - s.size());
  }
  return name;
}
}  // namespace

TEST_CASE("render_prometheus: pause, resume and reload change values, never the set of series", "[metrics]") {
  LatencyHistogram h;
  h.record(2'000'000);
  PipelineSnapshot s = sample_snapshot();
  MetricsInfo info = sample_info(&h);
  SourceReport cam;
  cam.name = "cam0";
  cam.state = SourceState::live;
  info.sources = {cam};

  const Scrape first = scrape_of(render_prometheus(s, info));
  // A later scrape: the daemon paused, a source stalled, everything counted more; then resumed; then reloaded
  // the same file (a new generation: the pipeline's counters restart).
  std::vector<Scrape> later;
  for (const char* state : {"paused", "running", "reloading", "running"}) {
    info.state = state;
    info.sources[0].state = info.sources[0].state == SourceState::live ? SourceState::stalled : SourceState::live;
    info.sources[0].frames += 10;
    if (std::string(state) == "reloading") {
      info.generation++;
      s = sample_snapshot();
      for (auto& st : s.stages) st.frames = st.batches = 0;
      s.frames = {};
    } else {
      s.frames.produced += 10;
      s.frames.delivered += 10;
      for (auto& st : s.stages) st.frames += 10, st.cpu_ms_total += 5, st.gpu_ms_total += 1;
    }
    for (auto& [group, seconds] : info.thread_cpu_s) seconds += 0.25;
    *info.process.cpu_s += 0.75;
    h.record(1'000'000);
    later.push_back(scrape_of(render_prometheus(s, info)));
  }
  // Drop reasons are the exception: a reason's series appears with its first drop in each generation.
  const auto series_of = [](const Scrape& sc) {
    std::set<std::string> out;
    for (const auto& [k, v] : sc.samples)
      if (k.rfind("sluice_frames_dropped_total{", 0) != 0) out.insert(k);
    return out;
  };
  const std::set<std::string> series = series_of(first);
  for (const Scrape& sc : later) CHECK(series_of(sc) == series);
  // Counters only go up: every counter and histogram series between scrapes of one generation, and the
  // process's own (not the pipeline's, which a reload restarts) across the reload too.
  const Scrape* prev = &first;
  for (std::size_t i = 0; i < later.size(); ++i) {
    const bool across_reload = i == 2;
    for (const auto& [k, v] : later[i].samples) {
      const std::string fam = family_of(k, later[i].types);
      const std::string& type = later[i].types.at(fam);
      INFO(k);
      if (fam == "sluice_thread_cpu_seconds_total" || fam == "process_cpu_seconds_total" ||
          (!across_reload && (type == "counter" || type == "histogram")))
        CHECK(v >= prev->samples.at(k));
    }
    prev = &later[i];
  }
  CHECK(later.back().samples.at("sluice_state{state=\"running\"}") == 1);
  CHECK(later[0].samples.at("sluice_state{state=\"paused\"}") == 1);
  CHECK(later[0].samples.at("sluice_state{state=\"running\"}") == 0);
}

// ---------------------------------------------------------------------------------------------------
// HTTP, end to end
// ---------------------------------------------------------------------------------------------------

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

// A blocking-style client built on async operations with a deadline, so a broken server fails the test
// instead of hanging it.
class Client {
 public:
  explicit Client(unsigned short port) {
    stream_.expires_after(std::chrono::seconds(5));
    beast::error_code ec;
    stream_.async_connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port),
                          [&](beast::error_code e) { ec = e; });
    run();
    if (ec) throw std::runtime_error("connect: " + ec.message());
  }

  beast::error_code write_raw(const std::string& bytes) {
    beast::error_code ec;
    stream_.expires_after(std::chrono::seconds(5));
    net::async_write(stream_, net::buffer(bytes), [&](beast::error_code e, std::size_t) { ec = e; });
    run();
    return ec;
  }

  beast::error_code write(http::verb method, const std::string& target, bool keep_alive = true) {
    http::request<http::string_body> req{method, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.keep_alive(keep_alive);
    if (method == http::verb::post) {
      req.body() = "x=1";
      req.prepare_payload();
    }
    beast::error_code ec;
    stream_.expires_after(std::chrono::seconds(5));
    http::async_write(stream_, req, [&](beast::error_code e, std::size_t) { ec = e; });
    run();
    return ec;
  }

  beast::error_code read(http::response<http::string_body>& res, bool head = false) {
    http::response_parser<http::string_body> parser;
    parser.skip(head);
    beast::error_code ec;
    stream_.expires_after(std::chrono::seconds(5));
    http::async_read(stream_, buffer_, parser, [&](beast::error_code e, std::size_t) { ec = e; });
    run();
    if (!ec) res = parser.release();
    return ec;
  }

  http::response<http::string_body> get(http::verb method, const std::string& target) {
    auto ec = write(method, target);
    if (ec) throw std::runtime_error("write: " + ec.message());
    http::response<http::string_body> res;
    ec = read(res, method == http::verb::head);
    if (ec) throw std::runtime_error("read: " + ec.message());
    return res;
  }

  // True when the server closed the connection (EOF or reset) before the deadline.
  bool closed_by_peer() {
    std::array<char, 256> buf{};
    beast::error_code ec;
    stream_.expires_after(std::chrono::seconds(5));
    stream_.async_read_some(net::buffer(buf), [&](beast::error_code e, std::size_t) { ec = e; });
    run();
    return ec == net::error::eof || ec == net::error::connection_reset;
  }

 private:
  void run() {
    io_.restart();
    io_.run();
  }
  net::io_context io_;
  beast::tcp_stream stream_{io_};
  beast::flat_buffer buffer_;
};

}  // namespace

TEST_CASE("MetricsServer serves /metrics over HTTP and stops", "[metrics][http]") {
  net::io_context io;
  std::atomic<int> renders{0};
  std::thread::id render_thread;
  MetricsServer server(io, "127.0.0.1:0", [&] {
    ++renders;
    render_thread = std::this_thread::get_id();
    return render_prometheus(sample_snapshot(), sample_info(nullptr));
  });
  REQUIRE(server.port() != 0);
  CHECK(server.address() == "127.0.0.1:" + std::to_string(server.port()));
  std::thread io_thread([&] { io.run(); });
  const auto io_thread_id = io_thread.get_id();

  SECTION("GET /metrics, keep-alive, then other paths and methods on the same connection") {
    Client c(server.port());
    auto res = c.get(http::verb::get, "/metrics");
    CHECK(res.result() == http::status::ok);
    CHECK(res[http::field::content_type] == "text/plain; version=0.0.4; charset=utf-8");
    CHECK(res.body().find("sluice_frames_produced_total 100\n") != std::string::npos);
    CHECK(res.keep_alive());
    CHECK(renders.load() == 1);
    CHECK(render_thread == io_thread_id);

    res = c.get(http::verb::get, "/metrics?name[]=x");  // query strings are ignored
    CHECK(res.result() == http::status::ok);

    res = c.get(http::verb::head, "/metrics");
    CHECK(res.result() == http::status::ok);
    CHECK(res.body().empty());
    CHECK(std::stoul(std::string(res[http::field::content_length])) > 100);

    res = c.get(http::verb::get, "/");
    CHECK(res.result() == http::status::ok);
    CHECK(res.body().find("/metrics") != std::string::npos);

    res = c.get(http::verb::get, "/nope");
    CHECK(res.result() == http::status::not_found);

    res = c.get(http::verb::post, "/metrics");
    CHECK(res.result() == http::status::method_not_allowed);
    CHECK(res[http::field::allow] == "GET, HEAD");

    // Connection: close is honoured.
    REQUIRE(!c.write(http::verb::get, "/metrics", false));
    REQUIRE(!c.read(res));
    CHECK(res.result() == http::status::ok);
    CHECK(!res.keep_alive());
    CHECK(c.closed_by_peer());
  }

  SECTION("an oversized request is rejected and the connection closed") {
    Client c(server.port());
    std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(16 * 1024, 'a') + "\r\n\r\n";
    // The write may fail if the server already closed; either way the request must not succeed.
    c.write_raw(req);
    http::response<http::string_body> res;
    const auto ec = c.read(res);
    if (!ec) {
      CHECK(res.result() == http::status::request_header_fields_too_large);
      CHECK(c.closed_by_peer());
    } else {
      CHECK((ec == net::error::eof || ec == net::error::connection_reset || ec == http::error::end_of_stream));
    }
    CHECK(renders.load() == 0);
  }

  SECTION("an oversized body is rejected") {
    Client c(server.port());
    std::string req = "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 20000\r\n\r\n" + std::string(20000, 'b');
    c.write_raw(req);
    http::response<http::string_body> res;
    const auto ec = c.read(res);
    if (!ec) {
      CHECK(res.result() == http::status::payload_too_large);
      CHECK(c.closed_by_peer());
    } else {
      CHECK((ec == net::error::eof || ec == net::error::connection_reset || ec == http::error::end_of_stream));
    }
  }

  SECTION("malformed request gets 400") {
    Client c(server.port());
    c.write_raw("this is not http\r\n\r\n");
    http::response<http::string_body> res;
    REQUIRE(!c.read(res));
    CHECK(res.result() == http::status::bad_request);
    CHECK(c.closed_by_peer());
  }

  SECTION("render that throws gives 500 and the server keeps serving") {
    // Covered with a second server so the first one's callback stays simple.
    MetricsServer failing(io, "127.0.0.1:0", []() -> std::string { throw std::runtime_error("boom"); });
    Client c(failing.port());
    auto res = c.get(http::verb::get, "/metrics");
    CHECK(res.result() == http::status::internal_server_error);
    CHECK(res.body().find("boom") != std::string::npos);
    res = c.get(http::verb::get, "/");
    CHECK(res.result() == http::status::ok);
    failing.stop();
  }

  SECTION("stop() closes idle keep-alive connections too, so run() returns") {
    Client idle(server.port());
    auto res = idle.get(http::verb::get, "/metrics");  // session is now waiting for a next request
    CHECK(res.result() == http::status::ok);
    Client silent(server.port());  // connected, never sends anything
    server.stop();
    io_thread.join();
    CHECK(idle.closed_by_peer());
    CHECK(silent.closed_by_peer());
  }

  server.stop();
  server.stop();  // idempotent
  if (io_thread.joinable()) io_thread.join();
  CHECK(io.stopped());
}

TEST_CASE("MetricsServer listen addresses and bind errors", "[metrics][http]") {
  net::io_context io;
  auto render = [] { return std::string("x\n"); };

  for (const char* bad : {"nonsense", "127.0.0.1", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:port", "::1:9464",
                          "[::1]9464", "[::1", "[]:9464", "[nothex]:1"}) {
    INFO(bad);
    try {
      MetricsServer s(io, bad, render);
      FAIL("accepted " << bad);
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()).find(std::string("'") + bad + "'") != std::string::npos);
    }
  }

  MetricsServer first(io, "127.0.0.1:0", render);
  const std::string taken = "127.0.0.1:" + std::to_string(first.port());
  try {
    MetricsServer second(io, taken, render);
    FAIL("bound a port already in use");
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    CHECK(what.find(taken) != std::string::npos);
    CHECK(what.find("cannot listen") != std::string::npos);
  }

  MetricsServer any(io, ":0", render);  // all interfaces: [::] dual-stack, or 0.0.0.0 without IPv6
  CHECK(any.port() != 0);
  CHECK((any.address() == "[::]:" + std::to_string(any.port()) ||
         any.address() == "0.0.0.0:" + std::to_string(any.port())));
  {
    std::thread t([&] { io.run(); });
    {
      Client c(any.port());  // reachable over IPv4 loopback either way
      auto res = c.get(http::verb::get, "/metrics");
      CHECK(res.body() == "x\n");
    }
    first.stop();
    any.stop();
    t.join();
  }
}
