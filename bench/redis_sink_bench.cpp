// How many records a redis-server takes from N sinks at once: N threads, each a redis sink writer on its own
// connection (records of RECORD_BYTES, BATCH records per script round trip, as the sink writes a batch),
// for SECONDS; prints records/s in total and per writer. Models N sluiced writing results to one stream.
//   redis_sink_bench redis://127.0.0.1:6379/bench WRITERS BATCH SECONDS [RECORD_BYTES=400]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/sink_bench_drive.hpp"

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s redis://HOST:PORT/STREAM WRITERS BATCH SECONDS [RECORD_BYTES]\n", argv[0]);
    return 2;
  }
  const std::string uri = argv[1];
  const int writers = std::atoi(argv[2]), batch = std::atoi(argv[3]);
  const double seconds = std::atof(argv[4]);
  const std::size_t bytes = argc > 5 ? std::strtoul(argv[5], nullptr, 10) : 400;
  if (writers < 1 || batch < 1 || seconds <= 0) return 2;
  const std::string record = sluice::bench::padded_record(bytes);
  try {
    std::vector<std::unique_ptr<sluice::sinks::WriteRetry>> retries;
    std::vector<std::unique_ptr<sluice::sinks::RecordWriter>> sinks;
    for (int w = 0; w < writers; ++w) {
      retries.push_back(std::make_unique<sluice::sinks::WriteRetry>("bench", 10));
      sinks.push_back(sluice::sinks::make_redis_writer(uri, 0, *retries.back(), "bench"));
      sinks.back()->open({});
    }
    const auto r = sluice::bench::drive_writers("redis_sink_bench", sinks, batch, seconds, record,
                                                [](int) { return sluice::sinks::Origin{}; });
    if (!r) return 1;
    std::printf("writers=%d batch=%d record_bytes=%zu records=%llu seconds=%.2f records_per_s=%.0f per_writer=%.0f\n",
                writers, batch, record.size(), static_cast<unsigned long long>(r->records), r->seconds,
                static_cast<double>(r->records) / r->seconds, static_cast<double>(r->records) / r->seconds / writers);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "redis_sink_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
