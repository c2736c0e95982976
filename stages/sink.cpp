// sink: the pipeline's end. Splits batches into frames again and writes one record per frame (a payload summary,
// or the top-k classes) to stdout, a jsonl file (per run, per input file or per source) or a directory of
// per-input results, a Redis stream or an MQTT broker; or (npy) each batch's payload as a NumPy file with an index of its frames. The writers
// live beside it: sink_records (the record), sink_jsonl and sink_per_input (where records go), sink_npy, and
// sink_outputs (atomic files, output names, and the retry policy for writes that fail).
#include <iostream>
#include <memory>
#include <optional>
#include <set>

#include "runtime/errors.hpp"
#include "runtime/job_ledger.hpp"
#include "runtime/stage_registrar.hpp"
#include "runtime/stats.hpp"
#include "stages/sink_npy.hpp"
#include "runtime/sink_outputs.hpp"
#include "runtime/sink_records.hpp"
#include "stages/sink_writers.hpp"

namespace sluice {
namespace {

enum class SinkType { null, stdout_, jsonl, directory, redis, mqtt, npy };
constexpr Choice<SinkType> kTypeChoices[] = {
    {"null", SinkType::null},           {"stdout", SinkType::stdout_}, {"jsonl", SinkType::jsonl},
    {"directory", SinkType::directory}, {"redis", SinkType::redis},    {"mqtt", SinkType::mqtt},
    {"npy", SinkType::npy}};

// `per`: which records share one jsonl file.
enum class JsonlPer { run, file, source };
constexpr Choice<JsonlPer> kPerChoices[] = {{"run", JsonlPer::run}, {"file", JsonlPer::file}, {"source", JsonlPer::source}};

class SinkStage final : public Stage {
 public:
  explicit SinkStage(const StageInit& init)
      : type_(init.params.choice("type", kTypeChoices)), path_(init.params.string("path")),
        per_(init.params.choice("per", kPerChoices)),
        retry_(init.name, init.params.number("write_retry_s")), shared_(init.shared), origins_(init.shared),
        records_(init.stage_names, init.index) {
    if (init.input->memory == MemoryKind::device)
      throw ConfigError("reads host memory; put a download stage before it (input is " + init.input->describe() + ")");
    if (type_ != SinkType::jsonl && init.params.was_given("per")) throw ConfigError("'per' applies to type jsonl only");
    if (type_ != SinkType::redis && init.params.was_given("maxlen")) throw ConfigError("'maxlen' applies to type redis only");
    for (const char* key : {"qos", "client_id", "keepalive_s", "max_inflight"})
      if (type_ != SinkType::mqtt && init.params.was_given(key))
        throw ConfigError(std::string("'") + key + "' applies to type mqtt only");
    for (const char* key : {"rotate_mb", "rotate_s"})
      if (init.params.was_given(key) && !(type_ == SinkType::jsonl && per_ == JsonlPer::source))
        throw ConfigError(std::string("'") + key + "' applies to type jsonl with per: source only");
    if (type_ == SinkType::jsonl) {
      if (path_.empty()) throw ConfigError("type jsonl needs a 'path' (use - for stdout)");
      if (per_ == JsonlPer::run) {
        writer_ = sinks::make_jsonl_run_writer(path_, retry_);
      } else {
        if (path_ == "-")
          throw ConfigError("type jsonl with per: " + init.params.string("per") + " needs a 'path': the directory to write into");
        if (per_ == JsonlPer::file) {
          writer_ = sinks::make_jsonl_file_writer(path_, retry_, init.name);
        } else {
          const double mb = init.params.number("rotate_mb");
          writer_ = sinks::make_jsonl_source_writer(path_, static_cast<std::uint64_t>(mb * 1e6),
                                                    init.params.number("rotate_s"), retry_, init.name);
        }
      }
    } else if (type_ == SinkType::directory) {
      if (path_.empty() || path_ == "-")
        throw ConfigError("type directory needs a 'path': the directory to write into");
      writer_ = sinks::make_directory_writer(path_, retry_, init.name);
    } else if (type_ == SinkType::redis) {
      writer_ = sinks::make_redis_writer(path_, static_cast<std::uint64_t>(init.params.number("maxlen")), retry_,
                                         init.name);
    } else if (type_ == SinkType::mqtt) {
      sinks::MqttSettings mqtt;
      mqtt.uri = path_;
      mqtt.qos = static_cast<int>(init.params.integer("qos"));
      mqtt.client_id = init.params.string("client_id");
      mqtt.keepalive_s = static_cast<int>(init.params.integer("keepalive_s"));
      mqtt.max_inflight = static_cast<std::size_t>(init.params.integer("max_inflight"));
      writer_ = sinks::make_mqtt_writer(mqtt, retry_, init.name);
    } else if (type_ == SinkType::npy) {
      if (path_.empty() || path_ == "-") throw ConfigError("type npy needs a 'path': the directory to write into");
      npy_.emplace(*init.input, path_, retry_, init.name);
    }
  }

  void open(StageContext& ctx) override {
    retry_.watch_stop(ctx.stop);
    // A job's ledger says which inputs a killed run had started (their records come out of shared outputs).
    std::set<std::string> interrupted;
    if (shared_ && (writer_ || npy_)) {
      if (!shared_->job_gate.wait(ctx.stop)) return;  // stopping before the source opened
      if (shared_->job) interrupted = shared_->job->interrupted();
    }
    if (writer_) writer_->open(interrupted);
    if (npy_) npy_->open(interrupted);
  }

  BatchLease process(Batch* in, StageContext&) override {
    if (type_ == SinkType::null) return {};
    mark_started(*in);
    if (npy_) {
      npy_->write(*in, origins_);
      return {};
    }
    const std::int64_t now = now_ns();
    if (type_ == SinkType::stdout_) {
      for (int i = 0; i < in->count; ++i)
        std::cout << records_.text(*in, i, origins_.of(in->frames[static_cast<std::size_t>(i)]), now);
      if (!std::cout) throw StageError("writing to stdout failed");
      return {};
    }
    try {
      for (int i = 0; i < in->count; ++i) {
        const FrameMeta& f = in->frames[static_cast<std::size_t>(i)];
        const sinks::Origin& origin = origins_.of(f);
        record_.clear();
        records_.append_json(*in, i, origin, now, record_);
        writer_->add(f, origin, record_);
      }
    } catch (...) {
      writer_->discard_pending();
      throw;
    }
    writer_->flush();
    return {};
  }

  std::vector<std::string> finish_input(const InputProgress& input, StageContext&) override {
    std::vector<std::string> outputs;
    origins_.forget(input.id);
    started_.erase(input.id);
    try {
      if (writer_) outputs = writer_->finish(input);
    } catch (const std::exception& e) {
      if (shared_) shared_->inputs.output_failed(input.id, e.what());  // the run reports it and exits 1
      throw;
    }
    return outputs;
  }

  void close(StageContext&) override {
    if (writer_) writer_->close();
    if (npy_) npy_->close();
    if (type_ == SinkType::stdout_) std::cout.flush();
  }

  // "blocked: <what> '<path>': <reason> since <UTC time> (...)" while a write is being retried, "gave up: ..."
  // after the last one failed; "" when writes work.
  std::string health() const override { return retry_.health(); }

 private:
  // Before the first records of a job's input become durable, the ledger says the input started (one fsync
  // for the batch): a run killed before the input is done then knows whose records to take out (open()).
  void mark_started(const Batch& b) {
    if (!shared_ || !shared_->job || !(writer_ || npy_)) return;
    std::vector<std::string> inputs;
    for (int i = 0; i < b.count; ++i) {
      const FrameMeta& f = b.frames[static_cast<std::size_t>(i)];
      if (f.input == 0 || !started_.insert(f.input).second) continue;
      const sinks::Origin& origin = origins_.of(f);
      if (!origin.live) inputs.push_back(origin.uri);
    }
    if (inputs.empty()) return;
    try {
      shared_->job->started(inputs);
    } catch (const std::exception& e) {
      for (int i = 0; i < b.count; ++i) started_.erase(b.frames[static_cast<std::size_t>(i)].input);
      throw StageError(std::string("cannot record in the job ledger that inputs started: ") + e.what());
    }
  }

  SinkType type_;
  std::string path_;
  JsonlPer per_;
  sinks::WriteRetry retry_;
  std::shared_ptr<PipelineShared> shared_;
  sinks::Origins origins_;
  sinks::RecordFormatter records_;
  std::unique_ptr<sinks::RecordWriter> writer_;  // jsonl, directory
  std::optional<sinks::NpyWriter> npy_;
  std::set<std::uint32_t> started_;  // FrameMeta::input ids marked started in the job ledger
  std::string record_;               // one frame's record; its memory kept from batch to batch
};

}  // namespace

static StageInfo sink_stage() {
  return {
      "sink",
      StageRole::sink,
      "writes one record per frame (source, input, input_frame, sequence, pts, time, stage times, and the top-k classes by "
      "label or a payload summary): null (count only), stdout (a line each), jsonl (one JSON object each; one file "
      "per run, per input file or per source), directory (one JSON result per input), redis (each record XADDed to a "
      "Redis stream as field 'record', a batch per Lua script that appends each record only once (a job input's "
      "frames are marked per input and options, so a redo appends only what is missing); delivered once the server "
      "acknowledged it; a lost server is reconnected to and the batch resent, the sink blocking meanwhile until "
      "write_retry_s), mqtt (each record published as one message to an MQTT broker, QoS 1 by default, the topic "
      "from a template with the frame's source and input, not retained; delivered once the broker acknowledged it "
      "(PUBACK; at QoS 0 once written to the socket, fire-and-forget); a lost broker is reconnected to and the "
      "batch's messages not acknowledged before are published again, so none is lost and a few may arrive twice, "
      "the sink blocking meanwhile until write_retry_s) or npy (each batch's payload as "
      "a NumPy file, plus index.jsonl: file, row, source_id, sequence, pts_ns, input and input_frame per frame). Per-input outputs are "
      "named after the input's file stem (<stem>-<8 hex digits of a hash of its path> when another input already "
      "has that name; claims kept in <dir>/.sluice-names so every run uses the same names; frames without an input "
      "are named after their source), written to <dir>/.<file>.sluice-tmp and renamed into place once every frame "
      "of the input is settled and delivered; an input with failed frames, or one that cannot be committed, is "
      "failed with the reason and its records kept as <file>.partial; temporaries of runs that were killed are "
      "removed. A frame counts as delivered once its record is written and fsync'ed (jsonl, directory, npy: every "
      "batch). Outputs are never truncated: a per-run file and npy's index are appended to across runs, reloads "
      "and resumed jobs, a torn last line is cut at open. In a job each input's records are there exactly once: "
      "before an input's first records are written the job ledger says it started, and a run after one that was "
      "killed takes the records of inputs it had started but not finished out of shared files (per run, per "
      "source, npy's index) before it does them again. Each output takes an exclusive lock (<dir>/.sluice-lock, or "
      "<dir>/.<file>.sluice-lock, holding the pid) before touching anything: another sluiced on it fails at once "
      "naming that pid. A full disk (ENOSPC, EDQUOT), EIO or a read-only filesystem fails the batch at once and "
      "the stage's health says failing until a write succeeds; other write errors block the sink and are retried "
      "(the pipeline backs up) until write_retry_s. A per-run file removed while open fails its frames until its "
      "directory is back",
      {
          {"type", ParamType::choice, "null", "where records go", {}, {},
           choice_names(kTypeChoices)},
          {"path", ParamType::string, "",
           "jsonl per run: the output file (- for stdout); jsonl per file or source, directory, npy: the directory "
           "(created if missing); redis: redis://host[:port]/STREAM (password from SLUICE_REDIS_PASSWORD); mqtt: mqtt://host[:port]/TOPIC "
           "where TOPIC may hold {source} (the frame's source name) and {input} (the input's name, or the source's "
           "for frames without one), each put in as one topic level ('/', '+', '#', control characters and a "
           "leading '$' made '_'); no wildcards, no leading '$'; user and password from SLUICE_MQTT_USERNAME / "
           "SLUICE_MQTT_PASSWORD. npy writes batch-NNNNNNNN.npy [count, ...] in the payload's layout and dtype (bf16 "
           "as f32; frames as u8 HxWxC, YUV as (H*3/2)xW; classes as k records of score f32, index i32; detections as one record a frame: count, candidates, cut, events "
           "i32 and boxes, max_detections records of x1, y1, x2, y2, score f32, class, track, attribute i32, the first "
           "count filled, then events track events after a track stage)"},
          {"per", ParamType::choice, "run",
           "jsonl: run = one file (path) for the whole run; file = <path>/<name>.jsonl per input, committed "
           "atomically when the input is done; source = <path>/<source>.jsonl per source, appended to across runs "
           "and rotated by rotate_mb / rotate_s",
           {}, {}, choice_names(kPerChoices)},
          {"rotate_mb", ParamType::number, "0",
           "jsonl per source: before a record would take the live file past this many MB (10^6 bytes), fsync it and "
           "rename it to <source>-<UTC yyyymmddThhmmss of the rotation>-<n>.jsonl (n: the smallest from 1 not "
           "taken), then start a new one; 0 = no size limit",
           0.0},
          {"rotate_s", ParamType::number, "0",
           "jsonl per source: rotate likewise once the live file's first record is this many seconds old (checked "
           "as records arrive); 0 = never",
           0.0},
          {"maxlen", ParamType::number, "0",
           "redis: trim the stream to about this many entries as records are added (XADD MAXLEN ~); 0 = never trim",
           0.0},
          {"qos", ParamType::integer, "1",
           "mqtt: 1 = at least once (a frame is delivered once the broker's PUBACK came; after a reconnect a message "
           "may arrive twice); 0 = at most once (delivered once written to the socket; a broker that goes away "
           "loses it)",
           0.0, 1.0},
          {"client_id", ParamType::string, "",
           "mqtt: the MQTT client id (printable ASCII, at most 128 characters; brokers must accept 1 to 23 "
           "letters and digits); empty = sluice- and 16 random hex digits. Two clients with one id push each "
           "other off the broker"},
          {"keepalive_s", ParamType::integer, "30",
           "mqtt: the MQTT keepalive; also how long a batch waits for an acknowledgement before the connection "
           "counts as lost (then reconnected and the batch's unacknowledged messages published again)",
           5.0, 65535.0},
          {"max_inflight", ParamType::integer, "100",
           "mqtt: at most this many messages published and not yet acknowledged at once (the rest of the batch "
           "waits for acknowledgements); keep it at least the pipeline's batch_size: a smaller window can wait "
           "~40 ms a round on a broker with Nagle's algorithm on (docs/scale-out.md)",
           1.0, 65000.0},
          sinks::write_retry_param(),
      },
      [](const StageInit& init) -> std::unique_ptr<Stage> { return std::make_unique<SinkStage>(init); },
      [](const ParamValues& p) -> std::optional<StageOutput> {
        const SinkType type = p.choice("type", kTypeChoices);
        const std::string& path = p.string("path");
        if (type == SinkType::null || type == SinkType::stdout_ || type == SinkType::redis || type == SinkType::mqtt ||
            path.empty() || path == "-")
          return std::nullopt;
        return StageOutput{path, type == SinkType::jsonl && p.choice("per", kPerChoices) == JsonlPer::run};
      }};
}
SLUICE_REGISTER_STAGE(sink_stage);

}  // namespace sluice
