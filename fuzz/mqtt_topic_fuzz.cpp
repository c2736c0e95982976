// The mqtt sink's path and topic template (runtime/mqtt_topic.hpp), on arbitrary bytes: the whole input is
// parsed as an mqtt:// URI, and made one topic level; when the URI is accepted, its template is expanded
// with source and input names cut from the same bytes. Either the URI is refused with std::invalid_argument
// (valid UTF-8), or every topic it gives is a valid MQTT topic name: valid UTF-8, no wildcard, no control
// character, no leading '$', within the documented length. Anything else (a crash, another exception, a topic
// that breaks a rule) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include "runtime/mqtt_topic.hpp"
#include "runtime/utf8.hpp"

namespace mqtt = sluice::mqtt;

namespace {

void check_topic(const std::string& topic, std::size_t placeholders) {
  if (topic.empty() || !sluice::valid_utf8(topic) || topic.front() == '$') std::abort();
  if (topic.size() > mqtt::kMaxTemplateBytes + placeholders * mqtt::kMaxLevelBytes) std::abort();
  for (std::size_t i = 0; i < topic.size(); ++i) {
    const auto c = static_cast<unsigned char>(topic[i]);
    if (c == '+' || c == '#' || c < 0x20 || c == 0x7F) std::abort();
    if (c == 0xC2 && i + 1 < topic.size() && static_cast<unsigned char>(topic[i + 1]) <= 0x9F) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::string level = mqtt::topic_level(bytes);
  if (level.empty() || level.size() > mqtt::kMaxLevelBytes || !sluice::valid_utf8(level) ||
      level.find_first_of("/+#") != std::string::npos || level.front() == '$')
    std::abort();
  try {
    const mqtt::MqttUri uri = mqtt::parse_mqtt_uri(bytes);
    if (uri.host.empty() || uri.port < 1 || uri.port > 65535) std::abort();
    const std::size_t placeholders = uri.topic.text().size() / 7 + 1;
    check_topic(uri.topic.expand(bytes.substr(0, size / 2), bytes.substr(size / 2)), placeholders);
    check_topic(uri.topic.expand("", ""), placeholders);
  } catch (const std::invalid_argument& e) {
    if (!sluice::valid_utf8(e.what())) std::abort();
  }
  return 0;
}
