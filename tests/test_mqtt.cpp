// The mqtt sink (stages/sink_mqtt.cpp, runtime/mqtt_client, runtime/mqtt_topic) against mosquitto brokers the
// tests start (tests/mosquitto_broker.hpp): topic templates and URIs, hostile values refused when the pipeline is
// built, records in order per source on the expanded topics, QoS 0 and 1, a broker restarted mid-stream without a
// message lost, a broker gone past write_retry_s, and user/password from the environment.
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "mosquitto_broker.hpp"
#include "pipeline_helpers.hpp"
#include "runtime/errors.hpp"
#include "runtime/mqtt_topic.hpp"
#include "runtime/utf8.hpp"
#include "sink_rig.hpp"

using namespace sluice;
using Catch::Matchers::Contains;
using Received = test::Subscriber::Received;

namespace {

// The mqtt sink of a pipeline, fed batches of 8 frames of source 0 ("cam") or 1 (named below).
struct MqttRig : test::SinkRig {
  explicit MqttRig(const std::map<std::string, std::string>& given) : test::SinkRig(given, 8) {
    shared->inputs.name_source(1, "lobby/door+#1");
  }
  void deliver(std::uint64_t first, std::uint32_t source = 0) {
    std::vector<FrameMeta> frames(8);
    for (std::uint64_t i = 0; i < 8; ++i) {
      frames[i].sequence = first + i;
      frames[i].source_id = source;
    }
    test::ClassesBatch batch(desc, frames);
    stage->process(&batch.b, ctx);
  }
};

// A pipeline of `frames` test frames whose sink is `sink_yaml` (the keys under `- kind: sink`).
std::string pipeline_to(const std::string& sink_yaml, int frames = 21) {
  std::string yaml = test::chain_yaml("cpu", "bgr8", frames, "x");
  yaml.replace(yaml.find("type: jsonl\n    path: x\n"), 24, sink_yaml);
  return yaml;
}

// Distinct (topic, sequence) pairs among `received`, and how many came more than once.
struct Tally {
  std::set<std::pair<std::string, std::uint64_t>> distinct;
  std::size_t duplicates = 0;
};
Tally tally(const std::vector<Received>& received) {
  Tally t;
  for (const auto& r : received) {
    const auto record = nlohmann::json::parse(r.payload);
    if (!t.distinct.emplace(r.topic, record.at("sequence").get<std::uint64_t>()).second) ++t.duplicates;
  }
  return t;
}

}  // namespace

TEST_CASE("mqtt topic templates expand placeholders as one level each, and hostile templates and URIs are refused",
          "[mqtt]") {
  const auto u = mqtt::parse_mqtt_uri("mqtt://broker.local:1884/site/{source}/in/{input}");
  CHECK(u.host == "broker.local");
  CHECK(u.port == 1884);
  CHECK(u.where() == "broker.local:1884");
  CHECK(u.topic.expand("cam1", "clip") == "site/cam1/in/clip");
  CHECK(u.topic.uses_input());
  // A value can neither add levels nor wildcards, nor start a $ topic, nor carry bad UTF-8 or controls.
  CHECK(u.topic.expand("a/b+c#d", std::string("\xff\x01x", 3)) == "site/a_b_c_d/in/\xEF\xBF\xBD_x");
  CHECK(mqtt::TopicTemplate("{source}").expand("$SYS", "") == "_SYS");
  CHECK(mqtt::topic_level("") == "_");
  CHECK(mqtt::topic_level(std::string(500, 'x')).size() == mqtt::kMaxLevelBytes);
  CHECK(valid_utf8(mqtt::topic_level(std::string(199, 'x') + "\xC3\xA9")));  // cut at a character boundary
  const auto v6 = mqtt::parse_mqtt_uri("mqtt://[::1]/t");
  CHECK(v6.host == "::1");
  CHECK(v6.port == mqtt::kDefaultPort);
  CHECK(v6.where() == "[::1]:1883");
  CHECK_FALSE(mqtt::TopicTemplate("plain/topic").uses_input());

  const std::vector<std::pair<std::string, std::string>> bad{
      {"http://h/t", "mqtt://"},
      {"mqtts://h/t", "TLS"},
      {"mqtt://h", "no /TOPIC"},
      {"mqtt://h/", "empty"},
      {"mqtt://h:0/t", "port is 0"},
      {"mqtt://h:99999/t", "above 65535"},
      {"mqtt://h:x/t", "not a number"},
      {"mqtt://h:/t", "empty"},
      {"mqtt:///t", "host is empty"},
      {"mqtt://[::1/t", "']'"},
      {"mqtt://h o/t", "host holds"},
      {"mqtt://u:pw@h/t", "SLUICE_MQTT_PASSWORD"},
      {"mqtt://h/a/+/b", "'+' (for subscribers only) at byte 2"},
      {"mqtt://h/a/#", "'#'"},
      {"mqtt://h/$SYS/x", "'$'"},
      {"mqtt://h/a/{nope}", "'{' that does not start"},
      {"mqtt://h/a/{source", "'{' that does not start"},
      {"mqtt://h/a}", "'}'"},
      {"mqtt://h/t?qos=2", "?options"},
      {std::string("mqtt://h/a\x01", 11), "U+0001"},
      {std::string("mqtt://h/a\0b", 12), "U+0000"},
      {"mqtt://h/a\xC2\x85", "U+0085"},
      {"mqtt://h/\xff\xfe", "not valid UTF-8"},
      {"mqtt://h/" + std::string(2000, 't'), "more than 1024"},
  };
  for (const auto& [uri, reason] : bad) {
    INFO(to_valid_utf8(uri.substr(0, 40)));
    try {
      mqtt::parse_mqtt_uri(uri);
      FAIL("accepted");
    } catch (const std::invalid_argument& e) {
      CHECK_THAT(e.what(), Contains(reason));
      CHECK(valid_utf8(e.what()));
      CHECK_THAT(e.what(), !Contains("pw@"));
    }
  }
}

TEST_CASE("a pipeline with a hostile mqtt path or option is refused when it is built, naming the key", "[mqtt][sinks]") {
  const auto refused = [](const std::string& sink_yaml, const std::string& key) {
    INFO(to_valid_utf8(sink_yaml));
    try {
      test::plan_from(pipeline_to(sink_yaml));
      FAIL("accepted");
    } catch (const ConfigError& e) {
      CHECK_THAT(e.what(), Contains(key) && Contains("sink"));
      CHECK(valid_utf8(e.what()));
    }
  };
  refused("type: mqtt\n    path: mqtt://h/a/+/b\n", "'path'");
  refused("type: mqtt\n    path: \"mqtt://h/a/\\x01\"\n", "'path'");
  refused("type: mqtt\n    path: mqtt://h/{host}\n", "'path'");
  refused("type: mqtt\n    path: mqtt://user:hunter2@h/t\n", "SLUICE_MQTT_PASSWORD");
  refused("type: mqtt\n    path: mqtt://h/t\n    qos: 2\n", "qos");
  refused("type: mqtt\n    path: mqtt://h/t\n    keepalive_s: 1\n", "keepalive_s");
  refused("type: mqtt\n    path: mqtt://h/t\n    max_inflight: 0\n", "max_inflight");
  refused("type: mqtt\n    path: mqtt://h/t\n    client_id: \"a b\"\n", "'client_id'");
  refused("type: jsonl\n    path: x\n    qos: 1\n", "'qos' applies to type mqtt only");
  ::setenv("SLUICE_MQTT_PASSWORD", "pw", 1);
  refused("type: mqtt\n    path: mqtt://h/t\n", "without SLUICE_MQTT_USERNAME");
  ::unsetenv("SLUICE_MQTT_PASSWORD");
  // The same paths are fine without the hostile part (nothing is connected when a pipeline is built).
  CHECK_NOTHROW(test::plan_from(pipeline_to("type: mqtt\n    path: mqtt://h/a/{source}/{input}\n    qos: 0\n")));
}

TEST_CASE("the mqtt sink publishes every record of a pipeline in order to its source's topic, at QoS 1 and 0",
          "[mqtt][sinks]") {
  test::MosquittoBroker broker;
  for (const char* qos : {"1", "0"}) {
    INFO("qos " << qos);
    const std::string base = std::string("q") + qos;
    test::Subscriber sub(broker.port(), base + "/#", std::string("sub-order-") + qos);
    const auto totals = test::run_to_end(test::plan_from(pipeline_to(
        "type: mqtt\n    path: " + broker.uri(base + "/{source}/frames") + "\n    qos: " + qos + "\n", 21)));
    CHECK(totals.delivered == 21);
    const auto got = sub.wait_until([](const auto& r) { return r.size() >= 21; });
    REQUIRE(got.size() == 21);
    for (std::size_t i = 0; i < got.size(); ++i) {
      const auto record = nlohmann::json::parse(got[i].payload);
      CHECK(record.at("sequence") == i);
      CHECK(got[i].topic == base + "/" + mqtt::topic_level(record.at("source_name").get<std::string>()) + "/frames");
      CHECK(record.at("payload").at("shape") == "tensor f32 nchw 3x64x96");
    }
  }

  // Two sources, interleaved batches, a window smaller than a batch: each source's messages on its own topic, in
  // order; a source name with '/', '+' and '#' is one level.
  test::Subscriber sub(broker.port(), "cams/#", "sub-two-sources");
  MqttRig rig({{"type", "mqtt"}, {"path", broker.uri("cams/{source}")}, {"max_inflight", "3"}});
  rig.stage->open(rig.ctx);
  for (std::uint64_t b = 0; b < 10; ++b) rig.deliver(b * 8, static_cast<std::uint32_t>(b % 2));
  rig.stage->close(rig.ctx);
  const auto got = sub.wait_until([](const auto& r) { return r.size() >= 80; });
  REQUIRE(got.size() == 80);
  std::map<std::string, std::vector<std::uint64_t>> by_topic;
  for (const auto& r : got) by_topic[r.topic].push_back(nlohmann::json::parse(r.payload).at("sequence"));
  REQUIRE(by_topic.size() == 2);
  REQUIRE(by_topic.count("cams/cam") == 1);
  REQUIRE(by_topic.count("cams/lobby_door__1") == 1);
  for (const auto& [topic, sequences] : by_topic) {
    INFO(topic);
    CHECK(sequences.size() == 40);
    CHECK(std::is_sorted(sequences.begin(), sequences.end()));
  }
}

TEST_CASE("a broker restarted mid-stream loses no QoS 1 message", "[mqtt][sinks]") {
  test::MosquittoBroker broker;
  test::Subscriber sub(broker.port(), "restart/#", "sub-restart");  // persistent session: the broker keeps its queue
  MqttRig rig({{"type", "mqtt"}, {"path", broker.uri("restart/{source}")}, {"write_retry_s", "60"}});
  rig.stage->open(rig.ctx);

  // The feeder publishes 240 batches; at batch 60 it asks for a restart and goes on at once (the broker goes
  // while messages are in flight), at batch 160 it waits until the broker is down (the next batch is written to
  // a dead connection). The sink blocks while the broker is away and publishes again what was not acknowledged.
  constexpr std::uint64_t kBatches = 240;
  std::mutex mu;
  std::condition_variable cv;
  int restarts_asked = 0, broker_down = 0;
  std::thread feeder([&] {
    for (std::uint64_t b = 0; b < kBatches; ++b) {
      if (b == 60 || b == 160) {
        std::unique_lock lock(mu);
        ++restarts_asked;
        cv.notify_all();
        if (b == 160) cv.wait(lock, [&] { return broker_down == 2; });
      }
      rig.deliver(b * 8);
    }
  });
  for (int restart = 1; restart <= 2; ++restart) {
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return restarts_asked == restart; });
    }
    broker.stop();  // SIGTERM: mosquitto writes its sessions and queues to disk
    {
      std::lock_guard lock(mu);
      broker_down = restart;
      cv.notify_all();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    broker.start();
  }
  feeder.join();
  CHECK(rig.health().empty());
  rig.stage->close(rig.ctx);

  const std::size_t n = kBatches * 8;
  const auto got = sub.wait_until([&](const auto& r) { return tally(r).distinct.size() >= n; }, std::chrono::seconds(60));
  const Tally t = tally(got);
  CHECK(t.distinct.size() == n);
  std::set<std::uint64_t> sequences;
  for (const auto& [topic, sequence] : t.distinct) {
    CHECK(topic == "restart/cam");
    sequences.insert(sequence);
  }
  CHECK(sequences.size() == n);
  CHECK(*sequences.rbegin() == n - 1);
  // At least once: a message whose PUBACK the restart took is published again (reported, not a failure).
  WARN("broker restarted twice: " << t.distinct.size() << " distinct messages of " << n << ", " << t.duplicates
                                  << " duplicate(s)");
}

TEST_CASE("a broker gone past write_retry_s fails the batch naming the broker and reason and the sink goes on after",
          "[mqtt][sinks]") {
  test::MosquittoBroker broker;
  test::Subscriber sub(broker.port(), "gone/#", "sub-gone");
  MqttRig rig({{"type", "mqtt"}, {"path", broker.uri("gone/{source}")}, {"write_retry_s", "1"}});
  rig.stage->open(rig.ctx);
  rig.deliver(0);
  broker.stop();
  CHECK_THROWS_WITH(rig.deliver(8), Contains("127.0.0.1:" + std::to_string(broker.port())) && Contains("gave up") &&
                                        Contains("MQTT broker"));
  CHECK_THAT(rig.health(), Contains("gave up"));
  broker.start();
  rig.deliver(16);
  CHECK(rig.health().empty());
  rig.stage->close(rig.ctx);
  // Batch 0 may come twice (the restart can take the subscriber's PUBACK): count distinct messages.
  const auto got = sub.wait_until([](const auto& r) { return tally(r).distinct.size() >= 16; });
  std::set<std::uint64_t> sequences;
  for (const auto& r : got) sequences.insert(nlohmann::json::parse(r.payload).at("sequence").get<std::uint64_t>());
  CHECK(sequences.size() == 16);  // batches 0 and 16; the failed batch 8 is not there
  CHECK(sequences.count(8) == 0);
  CHECK(sequences.count(16) == 1);

  // A whole pipeline with no broker at all: every frame fails with the reason, and the run ends normally.
  broker.stop();
  const auto totals = test::run_to_end(test::plan_from(pipeline_to(
      "type: mqtt\n    path: " + broker.uri("gone/x") + "\n    write_retry_s: 0.3\n", 12)));
  CHECK(totals.delivered == 0);
  CHECK(totals.failed == 12);
}

TEST_CASE("the mqtt sink takes a user and password from the environment, and a refusal fails at once", "[mqtt][sinks]") {
  test::MosquittoBroker broker("sluice", "s3cret-pw");
  const std::string sink = "type: mqtt\n    path: " + broker.uri("auth/{source}") + "\n    write_retry_s: 30\n";
  // Refused (not authorised): fails at open, not after write_retry_s, without the password in the message.
  ::setenv("SLUICE_MQTT_USERNAME", "sluice", 1);
  ::setenv("SLUICE_MQTT_PASSWORD", "wrong-pw", 1);
  const auto refused = test::run_to_end(test::plan_from(pipeline_to(sink, 8)));
  CHECK(refused.delivered == 0);
  CHECK(refused.failed == 8);
  REQUIRE_FALSE(refused.errors.empty());
  CHECK_THAT(refused.errors.front(), Contains("refused the connection") && !Contains("wrong-pw"));

  ::setenv("SLUICE_MQTT_PASSWORD", "s3cret-pw", 1);
  auto plan = test::plan_from(pipeline_to(sink, 8));
  ::unsetenv("SLUICE_MQTT_USERNAME");
  ::unsetenv("SLUICE_MQTT_PASSWORD");
  CHECK(test::run_to_end(std::move(plan)).delivered == 8);
}
