// What a Redis server sends, on arbitrary bytes (runtime/redis_client.hpp): the bounded RESP2 reader, then
// the stream-entry shapes built on it (XREADGROUP, XRANGE/XAUTOCLAIM entries), the consumer-group replies
// (runtime/redis_group_replies.hpp: XAUTOCLAIM, XPENDING summary and entries, XINFO lists), and the same bytes
// as a redis:// URI, plain and as a Redis source's (runtime/redis_source.hpp, with its options), and as an
// entry's `input`, and its other fields as the input's own options (runtime/input_options.hpp). Each either returns values or throws RedisError / std::invalid_argument naming what is
// wrong; anything else (a crash, another exception, an entry with an id of the wrong shape) is a bug.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include "runtime/redis_client.hpp"
#include "runtime/redis_group_replies.hpp"
#include "runtime/input_options.hpp"
#include "runtime/redis_source.hpp"
#include "runtime/utf8.hpp"

namespace redis = sluice::redis;

namespace {
// An entry's fields as options: each accepted or refused with a short, valid-UTF-8 reason; what was accepted
// writes a text that parses back to the same options (the dead letters and the ledger keep that text).
void check_options(const redis::StreamEntry& entry) {
  sluice::InputOptions options;
  for (const auto& [name, value] : entry.fields) {
    const std::string why = options.set(name, value);
    if (why.size() > 400 || !sluice::valid_utf8(why)) std::abort();
  }
  sluice::InputOptions again;
  const std::string text = options.text();
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = std::min(text.find(' ', at), text.size());
    const std::string word = text.substr(at, end - at);
    const std::size_t eq = word.find('=');
    if (eq == std::string::npos || !again.set(word.substr(0, eq), word.substr(eq + 1)).empty()) std::abort();
    at = end + 1;
  }
  if (again.text() != text) std::abort();
}

// Runs one parser: a RedisError other than a protocol one is a bug.
template <typename F>
void expect_protocol_errors(F&& parse) {
  try {
    parse();
  } catch (const redis::RedisError& e) {
    if (e.kind() != redis::RedisError::Kind::protocol) std::abort();
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    for (const redis::Reply& reply : redis::parse_replies(bytes)) {
      try {
        for (const auto& entry : redis::parse_xreadgroup(reply, "fuzz"))
          if (!redis::valid_entry_id(entry.id)) std::abort();
      } catch (const redis::RedisError& e) {
        if (e.kind() != redis::RedisError::Kind::protocol) std::abort();
      }
      try {
        for (const auto& entry : redis::parse_entries(reply, "fuzz")) {
          if (!redis::valid_entry_id(entry.id)) std::abort();
          check_options(entry);
        }
      } catch (const redis::RedisError& e) {
        if (e.kind() != redis::RedisError::Kind::protocol) std::abort();
      }
      expect_protocol_errors([&] {
        const auto c = redis::parse_xautoclaim(reply, "fuzz");
        if (!redis::valid_entry_id(c.cursor)) std::abort();
        for (const auto& id : c.deleted)
          if (!redis::valid_entry_id(id)) std::abort();
      });
      expect_protocol_errors([&] {
        if (redis::parse_xpending_summary(reply, "fuzz").count < 0) std::abort();
      });
      expect_protocol_errors([&] {
        for (const auto& p : redis::parse_xpending_entries(reply, "fuzz"))
          if (!redis::valid_entry_id(p.id) || p.idle_ms < 0 || p.deliveries < 0) std::abort();
      });
      expect_protocol_errors([&] { (void)redis::parse_info_list(reply, "fuzz"); });
    }
  } catch (const redis::RedisError& e) {
    if (e.kind() != redis::RedisError::Kind::protocol) std::abort();
  }
  // The job's attempt and heartbeat hashes are anyone's to write: their values parse or are refused.
  if (const auto a = redis::parse_attempt(bytes); a && (a->count < 0 || a->started_ms < 0 || a->consumer.empty()))
    std::abort();
  if (const auto h = redis::parse_heartbeat(bytes); h && (h->seen_ms < 0 || h->allowed_ms < 0)) std::abort();
  try {
    const auto uri = redis::parse_redis_uri(std::string(bytes));
    if (uri.stream.empty() || uri.endpoint.host.empty() || uri.endpoint.port < 1 || uri.endpoint.port > 65535)
      std::abort();
  } catch (const std::invalid_argument&) {
  }
  try {
    const auto o = sluice::parse_redis_source_uri(std::string(bytes));
    if (o.group.empty() || o.consumer.empty() || o.dead.empty() || o.dead == o.uri.stream || o.count < 1 ||
        o.max_deliveries < 1 || !(o.claim_idle_s > 0))
      std::abort();
  } catch (const std::invalid_argument&) {
  }
  if (const std::size_t eq = bytes.find('='); eq != std::string_view::npos)  // NAME=VALUE as sluicectl takes it
    check_options({"0-1", {{std::string(bytes.substr(0, eq)), std::string(bytes.substr(eq + 1))}}});
  sluice::InputKind kind{};
  if (!sluice::reject_input(std::string(bytes), kind) &&
      (bytes.empty() || bytes.find('\0') != std::string_view::npos))
    std::abort();
  return 0;
}
