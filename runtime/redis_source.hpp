#pragma once
// The Redis source: a batch job whose inputs are entries of a Redis stream, shared by every sluiced in one
// consumer group (docs/scale-out.md).
//
//   uri: redis://host:port/STREAM?group=G[&consumer=C]  (rediss:// for TLS)[&count=N][&block_ms=MS][&claim_idle_s=S]
//        [&max_deliveries=N][&dead=STREAM2][&until_empty=true]
//
// Each entry names one input in its field `input`: an absolute file path, or an http(s):// URL of a file. Its
// other fields are the input's own options (runtime/input_options.hpp: fit, decoder, max_frames), overriding
// the decode stage's for it; an unknown field or a bad value sends the entry to the dead letters naming it (an
// input is never run other than as asked). The feed reads entries with XREADGROUP (the group is created with MKSTREAM when missing, from the stream's start),
// first the ones still pending for this consumer (a restart under the same name), and hands them to the
// source's decode threads; the per-input machinery (input tracker, per-input sinks, job ledger) does the rest.
// An entry is acknowledged (XACK) only when its input's outcome is durable: done (outputs committed and the
// ledger recorded it) or failed (the ledger recorded why; the entry then goes to the dead-letter stream with the
// reason and the options' text). An entry whose input was not committed (frames failed in a stage, the sink could not finish, an
// interruption, a URL whose fetch failed in a way that may pass: InputError::transient) stays pending: once idle
// for `claim_idle_s` after its first attempt, twice that after its second and so on (at most 64 times), any
// consumer of the group (this one too) takes it over (XPENDING IDLE, XCLAIM), and once attempted
// `max_deliveries` times it goes to the dead-letter stream (attempts are counted on the server when an input
// starts: entries only read ahead do not count; a transient failure of the last attempt is dead-lettered at once
// with its reason).
// While held, an entry's idle time is reset every claim_idle_s/4 (XCLAIM JUSTID), so a slow input on a live
// consumer is never taken over; a dead consumer's entries are. Before an input is committed the sink asks
// still_ours(): an entry another consumer took over is theirs, not committed here. After an outage nothing is
// taken over until workers cut off along with this one had the time to come back.
// Acknowledging runs a small Lua script (XACK, and only if that removed the entry from the pending list:
// count it in `STREAM:sluice-stats:GROUP`, and for a dead letter XADD it), so a retry after a lost
// connection never counts or dead-letters twice. A lost server is reconnected with growing delays; held
// entries and unsent acknowledgements wait meanwhile, nothing is dropped.
// `until_empty`: the feed ends once nothing is held here and the group has no new and no pending entry (a
// batch job: submit first, then start the workers); otherwise it waits for entries until stopped.
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/input_feed.hpp"
#include "runtime/redis_client.hpp"

namespace sluice {

struct RedisSourceOptions {
  redis::RedisUri uri;     // endpoint (password from SLUICE_REDIS_PASSWORD) and stream
  std::string group;
  std::string consumer;    // default: hostname-pid
  std::string dead;        // default: STREAM:dead
  int count = 4;           // entries read (and held ahead of the decode threads) at most
  int block_ms = 2000;     // how long one XREADGROUP waits for new entries
  double claim_idle_s = 60;
  int max_deliveries = 5;  // attempts (inputs started) before an entry is dead-lettered
  bool until_empty = false;

  std::string stats_key() const;  // STREAM:sluice-stats:GROUP, a hash: done, skipped, dead, and per consumer
};

bool is_redis_uri(std::string_view uri);
// Parses and checks the URI and its options; throws std::invalid_argument naming the option (never the
// password). The password comes from SLUICE_REDIS_PASSWORD (one in the URI is refused: URIs are logged).
RedisSourceOptions parse_redis_source_uri(const std::string& uri);

// Whether an entry's `input` can be a job input: nullopt with its kind when it can, else why not.
std::optional<std::string> reject_input(const std::string& input, InputKind& kind);

// Starts the feed's thread (it connects in the background: a server that is down delays, never fails, it).
std::shared_ptr<InputFeed> open_redis_feed(RedisSourceOptions options);

}  // namespace sluice
