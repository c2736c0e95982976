// What a Redis server sends, on arbitrary bytes (runtime/redis_client.hpp): the bounded RESP2 reader, then
// the stream-entry shapes built on it (XREADGROUP, XRANGE/XAUTOCLAIM entries), and the same bytes as a
// redis:// URI. Each either returns values or throws RedisError / std::invalid_argument naming what is wrong;
// anything else (a crash, another exception, an entry with an id of the wrong shape) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include "runtime/redis_client.hpp"

namespace redis = sluice::redis;

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
        for (const auto& entry : redis::parse_entries(reply, "fuzz"))
          if (!redis::valid_entry_id(entry.id)) std::abort();
      } catch (const redis::RedisError& e) {
        if (e.kind() != redis::RedisError::Kind::protocol) std::abort();
      }
    }
  } catch (const redis::RedisError& e) {
    if (e.kind() != redis::RedisError::Kind::protocol) std::abort();
  }
  try {
    const auto uri = redis::parse_redis_uri(std::string(bytes));
    if (uri.stream.empty() || uri.endpoint.host.empty() || uri.endpoint.port < 1 || uri.endpoint.port > 65535)
      std::abort();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
