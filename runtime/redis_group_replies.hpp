#pragma once
// The consumer-group replies the Redis source and `sluicectl jobs` read (RESP2 shapes of redis-server 7):
// XAUTOCLAIM, XPENDING (summary and extended form), XINFO GROUPS / XINFO CONSUMERS. Every byte is hostile:
// each parser checks types and shapes and throws RedisError(protocol) naming `what`; the fuzzer
// (fuzz/redis_reply_fuzz.cpp) drives them with arbitrary replies.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/redis_client.hpp"

namespace sluice::redis {

// The hash where a job's sources count what they acknowledged: done, dead, done:CONSUMER, dead:CONSUMER.
inline std::string job_stats_key(const std::string& stream, const std::string& group) {
  return stream + ":sluice-stats:" + group;
}

// XAUTOCLAIM key group consumer min-idle start COUNT n -> [next cursor, [entries], (7.0+: [deleted ids])].
struct AutoClaim {
  std::string cursor;  // "0-0" once the whole pending list was scanned
  std::vector<StreamEntry> entries;
  std::vector<std::string> deleted;  // pending ids whose entries are gone (the server dropped them from the list)
};
AutoClaim parse_xautoclaim(const Reply& r, const std::string& what);

// XPENDING key group -> [count, smallest id, greatest id, [[consumer, count], ...]] (nil ids when none).
struct PendingSummary {
  std::int64_t count = 0;
  std::vector<std::pair<std::string, std::int64_t>> consumers;
};
PendingSummary parse_xpending_summary(const Reply& r, const std::string& what);

// XPENDING key group start end count [consumer] -> [[id, consumer, idle ms, deliveries], ...].
struct PendingEntry {
  std::string id, consumer;
  std::int64_t idle_ms = 0, deliveries = 0;
};
std::vector<PendingEntry> parse_xpending_entries(const Reply& r, const std::string& what);

// XINFO GROUPS / XINFO CONSUMERS -> [[name, value, name, value, ...], ...]: one map per group or consumer;
// values are kept as text (integers printed, nil as ""), nested arrays are refused.
std::vector<std::map<std::string, std::string>> parse_info_list(const Reply& r, const std::string& what);

}  // namespace sluice::redis
