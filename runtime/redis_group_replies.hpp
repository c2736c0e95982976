#pragma once
// The consumer-group replies the Redis source and `sluicectl jobs` read (RESP2 shapes of redis-server 7):
// XAUTOCLAIM, XPENDING (summary and extended form), XINFO GROUPS / XINFO CONSUMERS. Every byte is hostile:
// each parser checks types and shapes and throws RedisError(protocol) naming `what`; the fuzzer
// (fuzz/redis_reply_fuzz.cpp) drives them with arbitrary replies.
#include <cstdint>
#include <map>
#include <optional>
#include <string_view>
#include <string>
#include <vector>

#include "runtime/redis_client.hpp"

namespace sluice::redis {

// The hash where a job's sources count what they acknowledged: done, skipped (done in an earlier run, not
// again), dead, and the same per consumer (done:CONSUMER ...); first_done_ms and last_done_ms (server time).
inline std::string job_stats_key(const std::string& stream, const std::string& group) {
  return stream + ":sluice-stats:" + group;
}
// The hash of attempts: entry id -> "N MS STATE CONSUMER": N attempts so far, the latest started at MS (server
// time, ms) by CONSUMER, STATE `run` (in progress) or `left` (not committed, left for a retry). An entry read
// ahead and not started has none; acknowledging an entry removes its field.
inline std::string job_attempts_key(const std::string& stream, const std::string& group) {
  return stream + ":sluice-attempts:" + group;
}
// The hash of heartbeats: consumer -> "MS ALLOWED_MS": when it last was heard from (server time, ms) and the
// silence it allows itself (its claim_idle_s, or block_ms if longer); one not heard from for longer than that
// plus kMaxRetryDelayMs is dead. A consumer that ends cleanly takes its field out (and itself out of the group
// when it holds nothing).
inline std::string job_alive_key(const std::string& stream, const std::string& group) {
  return stream + ":sluice-alive:" + group;
}
// The hash of inputs the group has done: input_identity (runtime/input_identity.hpp) -> "SIZE MTIME_NS" of the
// file when it was done ("-" for a URL). An entry for an input done already, unchanged, is acknowledged as
// skipped by whichever worker reads it (resubmitting a directory redoes nothing another worker finished).
inline std::string job_done_key(const std::string& stream, const std::string& group) {
  return stream + ":sluice-done:" + group;
}

// The longest a live worker goes between two attempts to reach a lost server.
inline constexpr std::int64_t kMaxRetryDelayMs = 5000;

// Values of those hashes (anyone's to write: nullopt when one does not parse).
struct Attempt {
  std::int64_t count = 0, started_ms = 0;
  bool running = false;  // STATE run (else left)
  std::string consumer;
};
std::optional<Attempt> parse_attempt(std::string_view value);
struct Heartbeat {
  std::int64_t seen_ms = 0, allowed_ms = 0;
};
std::optional<Heartbeat> parse_heartbeat(std::string_view value);

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
