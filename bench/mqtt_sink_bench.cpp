// How many messages an MQTT broker takes from N mqtt sinks at once: N threads, each an mqtt sink writer on its
// own connection (records of RECORD_BYTES, BATCH a flush: published with at most INFLIGHT unacknowledged, the
// flush returning once every PUBACK came, as the sink writes a batch), for SECONDS; prints messages/s in total
// and per writer. Nobody subscribes, so the broker only acknowledges.
//   mqtt_sink_bench mqtt://127.0.0.1:1883/bench WRITERS BATCH SECONDS [QOS=1] [INFLIGHT=100] [RECORD_BYTES=400]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/sink_bench_drive.hpp"

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s mqtt://HOST:PORT/TOPIC WRITERS BATCH SECONDS [QOS] [INFLIGHT] [RECORD_BYTES]\n",
                 argv[0]);
    return 2;
  }
  const int writers = std::atoi(argv[2]), batch = std::atoi(argv[3]);
  const double seconds = std::atof(argv[4]);
  sluice::sinks::MqttSettings settings;
  settings.uri = argv[1];
  settings.qos = argc > 5 ? std::atoi(argv[5]) : 1;
  settings.max_inflight = argc > 6 ? std::strtoul(argv[6], nullptr, 10) : 100;
  const std::size_t bytes = argc > 7 ? std::strtoul(argv[7], nullptr, 10) : 400;
  if (writers < 1 || batch < 1 || seconds <= 0 || settings.max_inflight < 1) return 2;
  const std::string record = sluice::bench::padded_record(bytes);
  try {
    std::vector<std::unique_ptr<sluice::sinks::WriteRetry>> retries;
    std::vector<std::unique_ptr<sluice::sinks::RecordWriter>> sinks;
    for (int w = 0; w < writers; ++w) {
      retries.push_back(std::make_unique<sluice::sinks::WriteRetry>("bench", 10));
      sinks.push_back(sluice::sinks::make_mqtt_writer(settings, *retries.back(), "bench"));
      sinks.back()->open({});
    }
    const auto r = sluice::bench::drive_writers("mqtt_sink_bench", sinks, batch, seconds, record, [](int w) {
      return sluice::sinks::Origin{"cam" + std::to_string(w), {}, true};
    });
    if (!r) return 1;
    for (auto& s : sinks) s->close();
    std::printf("writers=%d batch=%d qos=%d inflight=%zu record_bytes=%zu messages=%llu seconds=%.2f "
                "messages_per_s=%.0f per_writer=%.0f\n",
                writers, batch, settings.qos, settings.max_inflight, record.size(),
                static_cast<unsigned long long>(r->records), r->seconds, static_cast<double>(r->records) / r->seconds,
                static_cast<double>(r->records) / r->seconds / writers);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mqtt_sink_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
