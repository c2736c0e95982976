#pragma once
// The record writers of the sink stage: where each frame's JSON record goes. The stage formats records and
// feeds them here; a writer buffers one batch, writes and fsyncs it in flush() (a frame counts as delivered
// only once flush() returned), and commits per-input outputs in finish(). open() takes the output's lock
// before it touches anything (runtime/output_lock.hpp); close() lets it go.
//
//   jsonl, per: run     one file, appended to across runs (or stdout), records as they come (sink_jsonl.cpp)
//   jsonl, per: source  one live file per source, rotated by size and/or age                 (sink_jsonl.cpp)
//   jsonl, per: file    one file per input, committed atomically when the input is done      (sink_per_input.cpp)
//   directory           one JSON result per input, committed atomically likewise            (sink_per_input.cpp)
//   redis               records appended to a Redis stream (XADD), a batch per MULTI/EXEC    (sink_redis.cpp)
//   mqtt                a message per record to an MQTT broker, QoS 1, acknowledged per batch (sink_mqtt.cpp)
// An input that cannot be committed complete (failed frames, a commit that fails) throws from finish() with
// the reason; its records stay on disk as `<output>.partial`.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/batch.hpp"
#include "runtime/input_tracker.hpp"
#include "runtime/sink_outputs.hpp"
#include "runtime/sink_records.hpp"

namespace sluice::sinks {

class RecordWriter {
 public:
  virtual ~RecordWriter() = default;
  // Takes the lock, makes the directory or opens the file (to append); fails fast (StageError) when that cannot
  // be done at all, or another sluiced holds the output (naming its pid). Writers of outputs that several inputs
  // share then take the records of `interrupted` (inputs a killed run had started; JobLedger::interrupted())
  // out of them (drop_records_of), since the job does those inputs again.
  virtual void open(const std::set<std::string>& interrupted) = 0;
  // Buffers the record (one JSON object, no newline) of frame `f`; no I/O.
  virtual void add(const FrameMeta& f, const Origin& origin, std::string_view record) = 0;
  // Writes and fsyncs what add() buffered. When that fails (at once for a full disk, after the retry gives up
  // otherwise, or when the file was removed meanwhile), the batch's records are taken back out of the current
  // files (best effort) and StageError propagates: its frames are counted failed, not half-written.
  virtual void flush() = 0;
  // Drops what add() buffered without writing it (the batch failed before flush()).
  virtual void discard_pending() noexcept = 0;
  // Every frame of `input` is settled: make its records durable, commit its outputs, return their paths.
  virtual std::vector<std::string> finish(const InputProgress& input) = 0;
  // End of the run: commits outputs of frames without an input, discards those of inputs never finished.
  virtual void close() = 0;
};

// jsonl, per: run. `path` "-" writes to stdout.
std::unique_ptr<RecordWriter> make_jsonl_run_writer(std::string path, WriteRetry& retry);
// jsonl, per: source: `<dir>/<source>.jsonl`, rotated before a record would take it past `rotate_bytes`
// (0: no limit) or once its first record is `rotate_s` old (0: never) to `<source>-<UTC yyyymmddThhmmss>-<n>.jsonl`.
std::unique_ptr<RecordWriter> make_jsonl_source_writer(std::filesystem::path dir, std::uint64_t rotate_bytes,
                                                       double rotate_s, WriteRetry& retry, std::string stage);
// jsonl, per: file: `<dir>/<name>.jsonl` per input.
std::unique_ptr<RecordWriter> make_jsonl_file_writer(std::filesystem::path dir, WriteRetry& retry, std::string stage);
// directory: `<dir>/<name>.json` per input: {"input", "source", "frames", "delivered", "dropped", "failed",
// ["error",] "records": [...]}.
std::unique_ptr<RecordWriter> make_directory_writer(std::filesystem::path dir, WriteRetry& retry, std::string stage);

// redis: `uri` redis://host[:port]/STREAM (the password from SLUICE_REDIS_PASSWORD), each record XADDed with
// MAXLEN ~ `maxlen` (0: the stream is not trimmed).
std::unique_ptr<RecordWriter> make_redis_writer(const std::string& uri, std::uint64_t maxlen, WriteRetry& retry,
                                                std::string stage);

// mqtt: `uri` mqtt://host[:port]/TOPIC_TEMPLATE ({source}, {input}; runtime/mqtt_topic.hpp), the user name and
// password from SLUICE_MQTT_USERNAME / SLUICE_MQTT_PASSWORD. Throws ConfigError naming the key that is wrong.
struct MqttSettings {
  std::string uri;
  int qos = 1;
  std::string client_id;    // empty: a random one
  int keepalive_s = 30;     // also how long a batch waits for an acknowledgement before reconnecting
  std::size_t max_inflight = 100;
};
std::unique_ptr<RecordWriter> make_mqtt_writer(const MqttSettings& settings, WriteRetry& retry, std::string stage);

}  // namespace sluice::sinks
