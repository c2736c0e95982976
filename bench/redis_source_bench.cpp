// How many job entries a redis-server hands out and takes acknowledgements for, from N Redis sources at once:
// ENTRIES entries (`input` paths) are XADDed first, then N feeds (runtime/redis_source, each its own
// connection and consumer in one group, `count` COUNT, until_empty) take them, each checked as still its own
// (as before a commit) and settled done at once
// (XACK script) as a worker with infinitely fast inputs would. Prints entries/s in total and per feed, from
// the start to the last input handed out (the acknowledgements of the last inputs follow within a round trip):
// the Redis side's ceiling for one stream and group (docs/scale-out.md).
//   redis_source_bench redis://127.0.0.1:6379/STREAM FEEDS ENTRIES [COUNT=4]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/redis_client.hpp"
#include "runtime/redis_source.hpp"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s redis://HOST:PORT/STREAM FEEDS ENTRIES [COUNT]\n", argv[0]);
    return 2;
  }
  const std::string uri = argv[1];
  const int feeds = std::atoi(argv[2]);
  const long entries = std::atol(argv[3]);
  const int count = argc > 4 ? std::atoi(argv[4]) : 4;
  if (feeds < 1 || entries < 1 || count < 1) return 2;
  try {
    const auto target = sluice::redis::parse_redis_uri(uri);
    sluice::redis::Client c(target.endpoint, target.stream);
    c.checked({"DEL", target.stream, target.stream + ":dead", target.stream + ":sluice-stats:bench"});
    for (long at = 0; at < entries; at += 1000) {
      std::vector<std::vector<std::string>> adds;
      for (long i = at; i < std::min(entries, at + 1000); ++i)
        adds.push_back({"XADD", target.stream, "*", "input", "/bench/input" + std::to_string(i) + ".mp4"});
      c.pipeline(adds);
    }
    std::vector<std::uint64_t> taken(static_cast<std::size_t>(feeds));
    // The time of each feed's last input: the end of the job (ending itself waits out a blocking read).
    std::vector<std::chrono::steady_clock::time_point> last(static_cast<std::size_t>(feeds));
    std::vector<std::thread> threads;
    const auto t0 = std::chrono::steady_clock::now();
    for (int f = 0; f < feeds; ++f)
      threads.emplace_back([&, f] {
        auto feed = sluice::open_redis_feed(sluice::parse_redis_source_uri(
            uri + "?group=bench&consumer=bench" + std::to_string(f) + "&until_empty=true&count=" + std::to_string(count)));
        for (;;) {
          sluice::FedInput input;
          const auto poll = feed->next(input, std::chrono::milliseconds(100));
          if (poll == sluice::InputFeed::Poll::ended) break;
          if (poll != sluice::InputFeed::Poll::input) continue;
          // As a worker commits: the entry checked (and kept) as still this consumer's, then settled.
          const bool ours = feed->still_ours(input.uri, input.options.text());
          feed->settled({0, input.uri, ours ? sluice::InputOutcome::done : sluice::InputOutcome::retry, {},
                         input.options.text()});
          ++taken[static_cast<std::size_t>(f)];
          last[static_cast<std::size_t>(f)] = std::chrono::steady_clock::now();
        }
      });
    for (auto& t : threads) t.join();
    const double s = std::chrono::duration<double>(*std::max_element(last.begin(), last.end()) - t0).count();
    std::uint64_t total = 0;
    for (auto n : taken) total += n;
    std::printf("%d feeds, COUNT %d: %llu entries in %.2f s = %.0f entries/s (%.0f per feed)\n", feeds, count,
                static_cast<unsigned long long>(total), s, static_cast<double>(total) / s,
                static_cast<double>(total) / s / feeds);
    return total == static_cast<std::uint64_t>(entries) ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "redis_source_bench: %s\n", e.what());
    return 1;
  }
}
