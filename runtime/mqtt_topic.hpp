#pragma once
// Where the mqtt sink publishes: `mqtt://host[:port]/TOPIC_TEMPLATE`, and the topic template with its
// placeholders. Both come from a pipeline file (hostile); both are checked once, when the pipeline is built, so
// that every topic published later is a valid MQTT topic name (MQTT 3.1.1 section 4.7):
//  - the template is valid UTF-8, 1..kMaxTemplateBytes bytes, without the wildcards '+' and '#' (for
//    subscribers only), NUL or other control characters (U+0000..U+001F, U+007F..U+009F), and does not start
//    with '$' (the broker's own topics, such as $SYS);
//  - it may hold `{source}` (the source's name) and `{input}` (the input's name, as per-input outputs name it);
//    any other '{' or '}' is refused;
//  - a value put into a placeholder is made one topic level (topic_level below), so a source's name can
//    neither add levels nor wildcards to the topic.
// Errors are std::invalid_argument naming what is wrong and where (a byte offset), never echoing raw bytes
// that are not UTF-8.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::mqtt {

inline constexpr int kDefaultPort = 1883;
inline constexpr std::size_t kMaxTemplateBytes = 1024;
inline constexpr std::size_t kMaxLevelBytes = 200;

class TopicTemplate {
 public:
  TopicTemplate() = default;
  explicit TopicTemplate(std::string_view text);  // throws std::invalid_argument
  // The topic for a frame of source `source` and input `input` (each made a topic level). At most
  // kMaxTemplateBytes + kMaxLevelBytes per placeholder: far below MQTT's 65535.
  std::string expand(std::string_view source, std::string_view input) const;
  const std::string& text() const { return text_; }
  bool uses_input() const;

 private:
  enum class Part { literal, source, input };
  std::string text_;
  std::vector<std::pair<Part, std::string>> parts_;
};

struct MqttUri {
  std::string host;  // a name, an IPv4 address or an IPv6 address (without brackets)
  int port = kDefaultPort;
  TopicTemplate topic;
  std::string where() const;  // "host:port", "[::1]:port"
};

// mqtt://host[:port]/TOPIC_TEMPLATE. No user or password (they come from the environment), no ?options, no
// percent-decoding (the template is taken as written); mqtts:// is refused (TLS is not supported).
MqttUri parse_mqtt_uri(std::string_view uri);

// `value` as one topic level: ill-formed UTF-8 replaced by U+FFFD, then '/', '+', '#', control characters and
// a leading '$' replaced by '_', cut to kMaxLevelBytes (at a character boundary); "_" when nothing is left.
std::string topic_level(std::string_view value);

}  // namespace sluice::mqtt
