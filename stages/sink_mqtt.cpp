// The sink's mqtt writer: each frame's record (the jsonl record) published as one MQTT message to the topic its
// template gives for the frame's source and input, QoS 1 (or 0), not retained, a batch at a time with at most
// max_inflight messages unacknowledged. A frame counts as delivered once the broker acknowledged its message
// (PUBACK); at QoS 0 once it was written to the socket (fire-and-forget: the broker may still lose it).
//
// A lost connection is retried (a fresh connection with growing delays, the sink blocks and the pipeline backs
// up) until write_retry_s; the messages of the batch not acknowledged before are published again on the new
// connection, so none is lost and one whose PUBACK was lost arrives twice (at-least-once, as QoS 1 promises).
// After write_retry_s the batch's frames fail with the broker and the reason.
#include <algorithm>
#include <cstdlib>
#include <optional>

#include <spdlog/spdlog.h>

#include "runtime/errors.hpp"
#include "runtime/mqtt_client.hpp"
#include "runtime/mqtt_topic.hpp"
#include "runtime/utf8.hpp"
#include "stages/sink_writers.hpp"

namespace sluice::sinks {
namespace {

class MqttWriter final : public RecordWriter {
 public:
  MqttWriter(mqtt::MqttUri uri, mqtt::ClientOptions options, const MqttSettings& settings, WriteRetry& retry,
             std::string stage)
      : client_(std::move(options)), topic_(std::move(uri.topic)), qos_(settings.qos),
        window_(settings.max_inflight), stall_s_(settings.keepalive_s), retry_(retry), stage_(std::move(stage)) {}

  void open(const std::set<std::string>&) override {
    // A broker that is not there yet is waited for at the first batch; one that refuses us fails now.
    try {
      client_.connect();
    } catch (const mqtt::MqttError& e) {
      if (!e.transient()) throw StageError(e.what());
      spdlog::warn("stage '{}': {} (retried at the first batch)", stage_, e.what());
    }
  }

  void add(const FrameMeta&, const Origin& origin, std::string_view record) override {
    const std::string& input = origin.uri.empty() ? origin.source : uri_stem(origin.uri);
    pending_.push_back({topic_.expand(origin.source, input), std::string(record)});
  }

  void discard_pending() noexcept override { pending_.clear(); }

  void flush() override {
    if (pending_.empty()) return;
    std::vector<char> done(pending_.size(), 0);
    bool again = false;  // an earlier attempt of this batch failed
    try {
      retry_.run_attempts("publishing to", client_.describe(), [&]() -> std::optional<WriteRetry::Failure> {
        try {
          if (!client_.connected()) client_.connect();
          if (again) {
            const auto left = static_cast<std::size_t>(std::count(done.begin(), done.end(), 0));
            if (left > 0)
              spdlog::info("stage '{}': publishing again the {} message(s) of the batch not acknowledged before the "
                           "connection was lost (duplicates possible at QoS 1)", stage_, left);
          }
          again = true;
          client_.publish(pending_, done, qos_, window_, stall_s_);
          return std::nullopt;
        } catch (const mqtt::MqttError& e) {
          // The retry's messages name the broker already.
          std::string text = e.what();
          const std::string where = client_.describe() + ": ";
          if (text.starts_with(where)) text.erase(0, where.size());
          return WriteRetry::Failure{!e.transient(), std::move(text)};
        }
      });
    } catch (...) {
      pending_.clear();
      throw;
    }
    pending_.clear();
  }

  std::vector<std::string> finish(const InputProgress&) override { return {}; }  // every record is acked already

  void close() override { client_.disconnect(); }

 private:
  mqtt::Client client_;
  mqtt::TopicTemplate topic_;
  int qos_;
  std::size_t window_;
  double stall_s_;
  WriteRetry& retry_;
  std::string stage_;
  std::vector<mqtt::Message> pending_;
};

// A value from the environment: valid UTF-8, at most 65535 bytes (MQTT's string limit), never shown.
std::string from_env(const char* name) {
  const char* value = std::getenv(name);
  if (!value) return {};
  const std::string_view v(value);
  if (!valid_utf8(v) || v.size() > 65535)
    throw ConfigError(std::string("type mqtt: ") + name + " is not valid UTF-8 of at most 65535 bytes");
  return std::string(v);
}

}  // namespace

std::unique_ptr<RecordWriter> make_mqtt_writer(const MqttSettings& settings, WriteRetry& retry, std::string stage) {
  mqtt::MqttUri uri;
  try {
    uri = mqtt::parse_mqtt_uri(settings.uri);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string("type mqtt: 'path' must be mqtt://host[:port]/TOPIC: ") + e.what());
  }
  if (settings.qos != 0 && settings.qos != 1) throw ConfigError("type mqtt: 'qos' must be 0 or 1");
  for (const char c : settings.client_id)
    if (c < 0x21 || c > 0x7E)
      throw ConfigError("type mqtt: 'client_id' must be printable ASCII without spaces (1 to 128 characters)");
  if (settings.client_id.size() > 128)
    throw ConfigError("type mqtt: 'client_id' must be printable ASCII without spaces (1 to 128 characters)");
  mqtt::ClientOptions options;
  options.host = uri.host;
  options.port = uri.port;
  options.client_id = settings.client_id;
  options.keepalive_s = settings.keepalive_s;
  options.username = from_env("SLUICE_MQTT_USERNAME");
  options.password = from_env("SLUICE_MQTT_PASSWORD");
  if (options.username.empty() && !options.password.empty())
    throw ConfigError("type mqtt: SLUICE_MQTT_PASSWORD is set without SLUICE_MQTT_USERNAME (MQTT 3.1.1 sends a "
                      "password only with a user name)");
  return std::make_unique<MqttWriter>(std::move(uri), std::move(options), settings, retry, std::move(stage));
}

}  // namespace sluice::sinks
