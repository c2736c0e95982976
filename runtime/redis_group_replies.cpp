#include "runtime/redis_group_replies.hpp"

namespace sluice::redis {
namespace {

[[noreturn]] void bad(const std::string& what, const std::string& why) {
  throw RedisError(RedisError::Kind::protocol, what + ": " + why);
}

const Reply& array_of(const Reply& r, const std::string& what, const char* part) {
  if (!r.is(Reply::Type::array))
    bad(what, std::string(part) + " is a " + Reply::type_name(r.type) + ", not an array");
  return r;
}

std::string id_of(const Reply& r, const std::string& what, const char* part) {
  if (!r.is(Reply::Type::string) || !valid_entry_id(r.str)) bad(what, std::string(part) + " is not an entry id");
  return r.str;
}

std::int64_t integer_of(const Reply& r, const std::string& what, const char* part) {
  if (!r.is(Reply::Type::integer)) bad(what, std::string(part) + " is a " + Reply::type_name(r.type) + ", not an integer");
  return r.integer;
}

std::string text_of(const Reply& r, const std::string& what, const char* part) {
  if (!r.is(Reply::Type::string) && !r.is(Reply::Type::status))
    bad(what, std::string(part) + " is a " + Reply::type_name(r.type) + ", not a string");
  return r.str;
}

// A decimal number of 1 to 18 digits at the front of `s`, taken off it with the space after it (when `last` is
// false, a space must follow).
std::optional<std::int64_t> take_number(std::string_view& s, bool last) {
  std::size_t n = 0;
  std::int64_t v = 0;
  const auto digit = [&](std::size_t i) { return i < s.size() && s[i] >= '0' && s[i] <= '9'; };
  while (n < 18 && digit(n)) v = v * 10 + (s[n++] - '0');  // 18 digits fit; a 19th is refused, never multiplied in
  if (n == 0 || digit(n)) return std::nullopt;
  if (last) {
    if (n != s.size()) return std::nullopt;
    s.remove_prefix(n);
    return v;
  }
  if (n >= s.size() || s[n] != ' ') return std::nullopt;
  s.remove_prefix(n + 1);
  return v;
}

}  // namespace

std::optional<Attempt> parse_attempt(std::string_view value) {
  Attempt a;
  const auto count = take_number(value, false);
  const auto started = count ? take_number(value, false) : std::nullopt;
  if (!started) return std::nullopt;
  if (value.rfind("run ", 0) == 0) a.running = true;
  else if (value.rfind("left ", 0) != 0) return std::nullopt;
  value.remove_prefix(a.running ? 4 : 5);
  if (value.empty()) return std::nullopt;
  a.count = *count;
  a.started_ms = *started;
  a.consumer = std::string(value);
  return a;
}

std::optional<Heartbeat> parse_heartbeat(std::string_view value) {
  const auto seen = take_number(value, false);
  const auto idle = seen ? take_number(value, true) : std::nullopt;
  if (!idle) return std::nullopt;
  return Heartbeat{*seen, *idle};
}

AutoClaim parse_xautoclaim(const Reply& r, const std::string& what) {
  array_of(r, what, "the reply");
  if (r.elements.size() < 2 || r.elements.size() > 3) bad(what, "the reply is not [cursor, entries(, deleted)]");
  AutoClaim out;
  out.cursor = id_of(r.elements[0], what, "the cursor");
  out.entries = parse_entries(r.elements[1], what);
  if (r.elements.size() == 3) {
    for (const Reply& id : array_of(r.elements[2], what, "the deleted ids").elements)
      out.deleted.push_back(id_of(id, what, "a deleted id"));
  }
  return out;
}

PendingSummary parse_xpending_summary(const Reply& r, const std::string& what) {
  array_of(r, what, "the reply");
  if (r.elements.size() != 4) bad(what, "the summary is not [count, first, last, consumers]");
  PendingSummary out;
  out.count = integer_of(r.elements[0], what, "the count");
  if (out.count < 0) bad(what, "a negative pending count");
  const Reply& consumers = r.elements[3];
  if (consumers.is(Reply::Type::nil)) return out;
  for (const Reply& c : array_of(consumers, what, "the consumers").elements) {
    if (!c.is(Reply::Type::array) || c.elements.size() != 2) bad(what, "a consumer is not [name, count]");
    const std::string name = text_of(c.elements[0], what, "a consumer's name");
    // redis-server sends the count as a bulk string here.
    const std::string n = text_of(c.elements[1], what, "a consumer's count");
    std::int64_t value = 0;
    if (n.empty() || n.size() > 18) bad(what, "a consumer's count is not a number");
    for (char ch : n) {
      if (ch < '0' || ch > '9') bad(what, "a consumer's count is not a number");
      value = value * 10 + (ch - '0');
    }
    out.consumers.emplace_back(name, value);
  }
  return out;
}

std::vector<PendingEntry> parse_xpending_entries(const Reply& r, const std::string& what) {
  std::vector<PendingEntry> out;
  for (const Reply& e : array_of(r, what, "the reply").elements) {
    if (!e.is(Reply::Type::array) || e.elements.size() != 4) bad(what, "a pending entry is not [id, consumer, idle, deliveries]");
    PendingEntry p;
    p.id = id_of(e.elements[0], what, "a pending entry's id");
    p.consumer = text_of(e.elements[1], what, "a pending entry's consumer");
    p.idle_ms = integer_of(e.elements[2], what, "a pending entry's idle time");
    p.deliveries = integer_of(e.elements[3], what, "a pending entry's delivery count");
    if (p.idle_ms < 0 || p.deliveries < 0) bad(what, "a negative idle time or delivery count");
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<std::map<std::string, std::string>> parse_info_list(const Reply& r, const std::string& what) {
  std::vector<std::map<std::string, std::string>> out;
  for (const Reply& item : array_of(r, what, "the reply").elements) {
    if (!item.is(Reply::Type::array) || item.elements.size() % 2 != 0) bad(what, "an item is not name, value pairs");
    std::map<std::string, std::string> fields;
    for (std::size_t i = 0; i < item.elements.size(); i += 2) {
      const std::string name = text_of(item.elements[i], what, "a field name");
      const Reply& v = item.elements[i + 1];
      if (v.is(Reply::Type::integer)) fields[name] = std::to_string(v.integer);
      else if (v.is(Reply::Type::nil)) fields[name] = "";
      else fields[name] = text_of(v, what, "a field value");
    }
    out.push_back(std::move(fields));
  }
  return out;
}

}  // namespace sluice::redis
