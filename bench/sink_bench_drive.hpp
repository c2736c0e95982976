#pragma once
// What the sink benchmarks (redis_sink_bench, mqtt_sink_bench) share: a padded record, and N writers driven on
// their own threads for a while, BATCH records then flush() each round, as the sink writes a batch.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/batch.hpp"
#include "stages/sink_writers.hpp"

namespace sluice::bench {

// A JSON record of about `bytes` bytes.
inline std::string padded_record(std::size_t bytes) {
  return "{\"pad\":\"" + std::string(bytes > 12 ? bytes - 11 : 1, 'x') + "\"}";
}

struct DriveResult {
  std::uint64_t records = 0;
  double seconds = 0;
};

// Drives every writer for `seconds`; writer w's records come from origin_of(w). A writer that throws stops all
// and is printed as "<name>: writer w: what" (then no result).
inline std::optional<DriveResult> drive_writers(const char* name,
                                                std::vector<std::unique_ptr<sinks::RecordWriter>>& writers,
                                                int batch, double seconds, const std::string& record,
                                                const std::function<sinks::Origin(int)>& origin_of) {
  std::atomic<bool> stop{false}, failed{false};
  std::vector<std::uint64_t> counts(writers.size());
  std::vector<std::thread> threads;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t w = 0; w < writers.size(); ++w)
    threads.emplace_back([&, w] {
      const FrameMeta f{};
      const sinks::Origin origin = origin_of(static_cast<int>(w));
      try {
        while (!stop.load(std::memory_order_relaxed)) {
          for (int i = 0; i < batch; ++i) writers[w]->add(f, origin, record);
          writers[w]->flush();
          counts[w] += static_cast<std::uint64_t>(batch);
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: writer %zu: %s\n", name, w, e.what());
        failed = true;
        stop = true;
      }
    });
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  if (failed) return std::nullopt;
  DriveResult result;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto c : counts) result.records += c;
  return result;
}

}  // namespace sluice::bench
