#include "daemon/jobs_command.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "runtime/printable.hpp"
#include "runtime/input_options.hpp"
#include "runtime/inputs.hpp"
#include "runtime/redis_client.hpp"
#include "runtime/redis_group_replies.hpp"
#include "runtime/utf8.hpp"

namespace sluice {

const char* const kJobsHelp = R"(usage: sluicectl jobs submit redis://HOST:PORT/STREAM [--option NAME=VALUE]... INPUT...
       sluicectl jobs status redis://HOST:PORT/STREAM[?group=G] [--json]
       sluicectl jobs requeue-dead redis://HOST:PORT/STREAM[?dead=D]

A job shared by many sluiced through a Redis stream (docs/scale-out.md); these talk to Redis directly, not
to a daemon. The password, when the server wants one: SLUICE_REDIS_PASSWORD.

  submit        one entry per input (field `input`: the absolute path), in the order given, each input
                once; a directory adds its video and image files, a glob the files it matches (as `uri:`
                of a job does); http(s):// URLs go in as they are. --option NAME=VALUE (repeatable) gives
                every input of this call its own option, overriding the workers' decode stage for it:
                fit=stretch|letterbox|crop, decoder=auto|gpu|cpu, max_frames=N (at most N frames)
  status        the stream's length, and per consumer group (or only G): inputs done, skipped (done
                before), dead-lettered (counted by the sources when they acknowledged), pending split into
                in progress, read ahead and waiting for a retry, delivered, not yet delivered (lag), the
                rate and ETA; per consumer its state (busy, idle, dead: not heard from for longer than
                its claim_idle_s; gone: ended and left the group), what it holds and its counts; the
                inputs in progress (consumer, attempt, running time); the latest dead letters with their
                reasons; --json: all of it as one JSON object. A group that does not exist yet is no
                error: "no such job yet"
  requeue-dead  every entry of the dead-letter stream (default STREAM:dead, or ?dead=D) goes back into
                STREAM as a new entry with its options and leaves the dead letters (each move is atomic);
                a letter whose options were the reason it died stays

exit status: 0 success, 1 Redis refused, a reply was malformed, or a directory or glob holds no inputs,
2 usage error, 3 cannot connect
)";

namespace {
namespace fs = std::filesystem;
using redis::Reply;

constexpr int kExitOk = 0, kExitRedis = 1, kExitUsage = 2, kExitConnect = 3;

int usage(const std::string& msg) {
  std::fprintf(stderr, "sluicectl: jobs: %s\n(sluicectl jobs --help for usage)\n", msg.c_str());
  return kExitUsage;
}

struct Target {
  redis::RedisUri uri;
  std::string group, dead;
};

// Throws std::invalid_argument with the reason.
Target parse_target(const std::string& text, bool group_allowed, bool dead_allowed) {
  Target t;
  t.uri = redis::parse_redis_uri(text);
  if (!t.uri.endpoint.password.empty())
    throw std::invalid_argument("put the password in the environment (SLUICE_REDIS_PASSWORD), not in the URI");
  if (const char* pw = std::getenv("SLUICE_REDIS_PASSWORD")) t.uri.endpoint.password = pw;
  for (const auto& [key, value] : t.uri.query) {
    if (key == "group" && group_allowed) t.group = value;
    else if (key == "dead" && dead_allowed) t.dead = value;
    else if (key == "group" || key == "consumer" || key == "count" || key == "block_ms" || key == "claim_idle_s" ||
             key == "max_deliveries" || key == "until_empty" || key == "dead")
      continue;  // a source's URI pasted as it is: options of the workers, not of this command
    else
      throw std::invalid_argument("unknown option '" + to_valid_utf8(key) + "'");
  }
  if (t.dead.empty()) t.dead = t.uri.stream + ":dead";
  return t;
}

// Names from the command line or from Redis (any bytes): escaped for the terminal, at most 300 bytes of them.
std::string shown(const std::string& s) { return printable(s.substr(0, 300)); }

// The inputs an argument names, absolute, as the sources read them.
std::vector<std::string> inputs_of(const std::string& arg) {
  if (arg.rfind("http://", 0) == 0 || arg.rfind("https://", 0) == 0) return {arg};
  std::error_code ec;
  const fs::path absolute = fs::absolute(arg, ec);
  if (ec) throw std::invalid_argument("cannot make '" + shown(arg) + "' absolute: " + ec.message());
  const std::string path = absolute.lexically_normal().string();
  const ExpandedSource expanded = expand_local_path(path);
  if (!expanded.job && !fs::is_regular_file(path, ec))
    throw std::invalid_argument("'" + shown(path) + "' is not a file, directory or glob that matches files");
  std::vector<std::string> out;
  for (const auto& [input, kind] : expanded.inputs) out.push_back(input);
  return out;
}

// "fit=crop max_frames=10" -> the fields of a stream entry (name, value, ...), checked as the sources check
// them; throws std::invalid_argument naming the bad one.
std::vector<std::string> option_fields(const std::vector<std::string>& options, std::string& text) {
  InputOptions parsed;
  std::vector<std::string> fields;
  std::set<std::string> seen;
  for (const auto& o : options) {
    const auto eq = o.find('=');
    if (eq == std::string::npos || eq == 0) throw std::invalid_argument("option '" + shown(o) + "' is not NAME=VALUE");
    const std::string name = o.substr(0, eq), value = o.substr(eq + 1);
    if (!seen.insert(name).second) throw std::invalid_argument("option '" + shown(name) + "' given twice");
    if (std::string why = parsed.set(name, value); !why.empty()) throw std::invalid_argument(why);
    fields.push_back(name);
    fields.push_back(value);
  }
  text = parsed.text();
  return fields;
}

int submit(const Target& t, const std::vector<std::string>& args, const std::vector<std::string>& options) {
  std::string text;
  const std::vector<std::string> fields = option_fields(options, text);
  std::vector<std::string> inputs;
  std::set<std::string> seen;  // an input named twice (a file and its directory) is submitted once
  for (const auto& a : args)
    for (auto& input : inputs_of(a))
      if (seen.insert(input).second) inputs.push_back(std::move(input));
  if (inputs.empty()) return usage("submit: no inputs");
  redis::Client client(t.uri.endpoint, t.uri.stream);
  client.connect();
  constexpr std::size_t kChunk = 512;  // entries per round trip
  for (std::size_t at = 0; at < inputs.size(); at += kChunk) {
    std::vector<std::vector<std::string>> commands;
    for (std::size_t i = at; i < std::min(inputs.size(), at + kChunk); ++i) {
      commands.push_back({"XADD", t.uri.stream, "*", "input", inputs[i]});
      commands.back().insert(commands.back().end(), fields.begin(), fields.end());
    }
    const auto replies = client.pipeline(commands);
    for (const Reply& r : replies)
      if (r.is(Reply::Type::error))
        throw redis::RedisError(redis::RedisError::Kind::server, client.describe() + ": XADD: " + shown(r.str));
  }
  std::printf("submitted %zu input(s) to stream '%s' (%s)%s%s\n", inputs.size(), shown(t.uri.stream).c_str(),
              shown(t.uri.endpoint.where()).c_str(), options.empty() ? "" : " with options ",
              text.c_str());
  return kExitOk;
}

std::int64_t to_int(const std::string& s) {
  try {
    return s.empty() ? 0 : std::stoll(s);
  } catch (const std::exception&) {
    return 0;
  }
}

std::map<std::string, std::string> hash_of(redis::Client& client, const std::string& key) {
  const Reply r = client.checked({"HGETALL", key});
  if (!r.is(Reply::Type::array) || r.elements.size() % 2) client.wrong_type(r, "an array of pairs", "HGETALL");
  std::map<std::string, std::string> out;
  for (std::size_t i = 0; i + 1 < r.elements.size(); i += 2) {
    if (!r.elements[i].is(Reply::Type::string) || !r.elements[i + 1].is(Reply::Type::string))
      client.wrong_type(r.elements[i], "a bulk string", "HGETALL");
    out[r.elements[i].str] = r.elements[i + 1].str;
  }
  return out;
}

std::int64_t length_of(redis::Client& client, const std::string& stream) {
  const Reply r = client.checked({"XLEN", stream});
  if (!r.is(Reply::Type::integer)) client.wrong_type(r, "an integer", "XLEN");
  return r.integer;
}

// The server's clock in ms (TIME): ages are measured against it, as the sources stamp with it.
std::int64_t server_ms(redis::Client& client) {
  const Reply r = client.checked({"TIME"});
  if (!r.is(Reply::Type::array) || r.elements.size() != 2 || !r.elements[0].is(Reply::Type::string) ||
      !r.elements[1].is(Reply::Type::string))
    client.wrong_type(r, "[seconds, microseconds]", "TIME");
  return to_int(r.elements[0].str) * 1000 + to_int(r.elements[1].str) / 1000;
}

// The `input` field of each id (XRANGE id id, one round trip); "" for an entry trimmed or without one.
std::vector<std::string> inputs_of_ids(redis::Client& client, const std::string& stream, const std::vector<std::string>& ids) {
  std::vector<std::vector<std::string>> commands;
  for (const auto& id : ids) commands.push_back({"XRANGE", stream, id, id});
  std::vector<std::string> out;
  for (const Reply& r : client.pipeline(commands)) {
    std::string input;
    if (!r.is(Reply::Type::error))
      for (const auto& e : redis::parse_entries(r, client.describe() + ": XRANGE"))
        if (const std::string* i = e.field("input")) input = shown(*i);
    out.push_back(std::move(input));
  }
  return out;
}

// One group: its counts, its consumers (busy, idle, dead or gone) and the inputs in progress.
nlohmann::ordered_json group_status(redis::Client& client, const Target& t, const std::map<std::string, std::string>& g,
                                    std::int64_t now_ms) {
  const std::string name = g.count("name") ? g.at("name") : "";
  const auto stats = hash_of(client, redis::job_stats_key(t.uri.stream, name));
  auto stat = [&](const std::string& k) { return stats.count(k) ? to_int(stats.at(k)) : 0; };
  const auto beats = hash_of(client, redis::job_alive_key(t.uri.stream, name));

  // Pending entries, each in progress (started by the consumer that holds it) or read ahead (held, not started).
  constexpr int kMaxListed = 10000;
  const auto pending = redis::parse_xpending_entries(
      client.checked({"XPENDING", t.uri.stream, name, "-", "+", std::to_string(kMaxListed)}),
      client.describe() + ": XPENDING");
  std::vector<std::optional<redis::Attempt>> attempts(pending.size());
  if (!pending.empty()) {
    std::vector<std::string> hmget{"HMGET", redis::job_attempts_key(t.uri.stream, name)};
    for (const auto& p : pending) hmget.push_back(p.id);
    const Reply r = client.checked(hmget);
    if (!r.is(Reply::Type::array) || r.elements.size() != pending.size()) client.wrong_type(r, "an array", "HMGET");
    for (std::size_t i = 0; i < pending.size(); ++i)
      if (r.elements[i].is(Reply::Type::string)) attempts[i] = redis::parse_attempt(r.elements[i].str);
  }
  struct Holding {
    std::int64_t in_progress = 0, read_ahead = 0, waiting_retry = 0;
  };
  std::map<std::string, Holding> held;
  std::vector<std::size_t> running;
  for (std::size_t i = 0; i < pending.size(); ++i) {
    Holding& h = held[pending[i].consumer];
    const auto& a = attempts[i];
    if (a && a->consumer == pending[i].consumer) {
      if (a->running) {
        ++h.in_progress;
        running.push_back(i);
      } else {
        ++h.waiting_retry;
      }
    } else {
      ++h.read_ahead;
    }
  }

  nlohmann::ordered_json j;
  j["group"] = shown(name);
  j["pending"] = to_int(g.count("pending") ? g.at("pending") : "");
  std::int64_t in_progress = 0, read_ahead = 0, waiting_retry = 0;
  for (const auto& [c, h] : held) in_progress += h.in_progress, read_ahead += h.read_ahead, waiting_retry += h.waiting_retry;
  j["in_progress"] = in_progress;
  j["read_ahead"] = read_ahead;
  j["waiting_retry"] = waiting_retry;
  j["delivered"] = to_int(g.count("entries-read") ? g.at("entries-read") : "");
  if (g.count("lag") && !g.at("lag").empty()) j["lag"] = to_int(g.at("lag"));
  else j["lag"] = nullptr;  // the server cannot tell (entries deleted), or redis < 7
  j["done"] = stat("done");
  j["skipped"] = stat("skipped");
  j["dead"] = stat("dead");
  // Rate: inputs done per second between the first and the latest done (server time); ETA: what is left at it.
  const std::int64_t first = stat("first_done_ms"), last = stat("last_done_ms");
  if (stat("done") >= 2 && last > first) {
    const double rate = static_cast<double>(stat("done") - 1) / (static_cast<double>(last - first) / 1000.0);
    j["rate_per_s"] = rate;
    if (!j["lag"].is_null()) j["eta_s"] = static_cast<double>(j["lag"].get<std::int64_t>() + j["pending"].get<std::int64_t>()) / rate;
    else j["eta_s"] = nullptr;
  } else {
    j["rate_per_s"] = nullptr;
    j["eta_s"] = nullptr;
  }

  // Consumers: those of the group, and those that left it (counted in the stats, gone at their clean end).
  nlohmann::ordered_json consumers = nlohmann::ordered_json::array();
  std::set<std::string> listed;
  const Reply cr = client.checked({"XINFO", "CONSUMERS", t.uri.stream, name});
  for (const auto& c : redis::parse_info_list(cr, client.describe() + ": XINFO CONSUMERS")) {
    const std::string cname = c.count("name") ? c.at("name") : "";
    listed.insert(cname);
    const Holding h = held.count(cname) ? held.at(cname) : Holding{};
    nlohmann::ordered_json cj;
    cj["consumer"] = shown(cname);
    const std::int64_t idle_ms = to_int(c.count("idle") ? c.at("idle") : "");
    // Dead: not heard from for longer than its claim_idle_s allows a live one (heartbeats every claim_idle_s/4);
    // without a heartbeat (an older worker), by the server's idle time against the default claim_idle_s.
    std::int64_t silent_ms = idle_ms, allowed_ms = 60000;
    if (auto it = beats.find(cname); it != beats.end())
      if (const auto b = redis::parse_heartbeat(it->second)) silent_ms = now_ms - b->seen_ms, allowed_ms = b->allowed_ms;
    const bool dead = silent_ms > allowed_ms + redis::kMaxRetryDelayMs;
    cj["state"] = dead ? "dead" : h.in_progress > 0 ? "busy" : "idle";
    cj["pending"] = to_int(c.count("pending") ? c.at("pending") : "");
    cj["in_progress"] = h.in_progress;
    cj["read_ahead"] = h.read_ahead;
    cj["waiting_retry"] = h.waiting_retry;
    cj["idle_ms"] = idle_ms;
    cj["silent_ms"] = std::max<std::int64_t>(0, silent_ms);
    cj["done"] = stat("done:" + cname);
    cj["skipped"] = stat("skipped:" + cname);
    cj["dead"] = stat("dead:" + cname);
    consumers.push_back(std::move(cj));
  }
  for (const auto& [key, value] : stats) {
    for (const char* prefix : {"done:", "skipped:", "dead:"}) {
      if (key.rfind(prefix, 0) != 0) continue;
      const std::string cname = key.substr(std::string_view(prefix).size());
      if (!listed.insert(cname).second) continue;
      nlohmann::ordered_json cj;
      cj["consumer"] = shown(cname);
      cj["state"] = "gone";  // ended and left the group holding nothing
      for (const char* k : {"pending", "in_progress", "read_ahead", "waiting_retry", "idle_ms", "silent_ms"}) cj[k] = 0;
      cj["done"] = stat("done:" + cname);
      cj["skipped"] = stat("skipped:" + cname);
      cj["dead"] = stat("dead:" + cname);
      consumers.push_back(std::move(cj));
    }
  }
  j["consumers"] = std::move(consumers);

  std::vector<std::string> ids;
  for (std::size_t i : running) ids.push_back(pending[i].id);
  const auto inputs = inputs_of_ids(client, t.uri.stream, ids);
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (std::size_t k = 0; k < running.size(); ++k) {
    const auto& p = pending[running[k]];
    const auto& a = *attempts[running[k]];
    nlohmann::ordered_json e;
    e["consumer"] = shown(p.consumer);
    e["input"] = inputs[k];
    e["entry"] = p.id;
    e["attempt"] = a.count;
    e["running_s"] = static_cast<double>(std::max<std::int64_t>(0, now_ms - a.started_ms)) / 1000.0;
    e["idle_s"] = static_cast<double>(p.idle_ms) / 1000.0;  // since its holder last kept it alive
    list.push_back(std::move(e));
  }
  j["in_progress_inputs"] = std::move(list);
  return j;
}

// The latest dead letters, newest first: input, reason, attempts, who.
nlohmann::ordered_json dead_letter_list(redis::Client& client, const Target& t, int count) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  const Reply r = client.checked({"XREVRANGE", t.dead, "+", "-", "COUNT", std::to_string(count)});
  for (const auto& e : redis::parse_entries(r, client.describe() + ": XREVRANGE '" + shown(t.dead) + "'")) {
    nlohmann::ordered_json d;
    d["letter"] = e.id;
    for (const char* f : {"input", "reason", "deliveries", "consumer", "entry", "options"})
      d[f] = e.field(f) ? shown(*e.field(f)) : "";
    out.push_back(std::move(d));
  }
  return out;
}

std::string seconds_text(const nlohmann::ordered_json& v) {
  if (v.is_null()) return "?";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v.get<double>());
  return buf;
}

int status(const Target& t, bool as_json) {
  redis::Client client(t.uri.endpoint, t.uri.stream);
  client.connect();
  nlohmann::ordered_json out;
  out["stream"] = shown(t.uri.stream);
  out["length"] = length_of(client, t.uri.stream);
  out["dead_stream"] = shown(t.dead);
  out["dead_letters"] = length_of(client, t.dead);
  const std::int64_t now_ms = server_ms(client);
  nlohmann::ordered_json groups = nlohmann::ordered_json::array();
  const Reply info = client.command({"XINFO", "GROUPS", t.uri.stream});
  std::vector<std::map<std::string, std::string>> group_list;
  if (info.is(Reply::Type::error)) {
    if (info.str.find("no such key") == std::string::npos)
      throw redis::RedisError(redis::RedisError::Kind::server, client.describe() + ": XINFO GROUPS: " + shown(info.str));
  } else {
    group_list = redis::parse_info_list(info, client.describe() + ": XINFO GROUPS");
  }
  for (const auto& g : group_list) {
    const std::string name = g.count("name") ? g.at("name") : "";
    if (!t.group.empty() && name != t.group) continue;
    groups.push_back(group_status(client, t, g, now_ms));
  }
  // No such group yet (nothing submitted, or no worker started): not an error, the job has not begun.
  const bool no_job_yet = groups.empty();
  out["groups"] = groups;
  out["dead_letter_list"] = dead_letter_list(client, t, as_json ? 100 : 10);
  if (as_json) {
    if (no_job_yet) out["note"] = "no such job yet";
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }
  std::printf("stream '%s' (%s): %lld entries; dead letters waiting in '%s': %lld\n", shown(t.uri.stream).c_str(),
              shown(t.uri.endpoint.where()).c_str(), static_cast<long long>(out["length"].get<std::int64_t>()),
              shown(t.dead).c_str(), static_cast<long long>(out["dead_letters"].get<std::int64_t>()));
  if (no_job_yet)
    std::printf("no such job yet: %s (the first worker creates it; submitted entries wait in the stream)\n",
                t.group.empty() ? "the stream has no consumer group"
                                : ("the stream has no consumer group '" + shown(t.group) + "'").c_str());
  auto n = [](const nlohmann::ordered_json& v) { return static_cast<long long>(v.get<std::int64_t>()); };
  for (const auto& g : groups) {
    std::printf("group '%s': %lld done, %lld skipped (done before), %lld dead-lettered; %lld pending: %lld in progress, "
                "%lld read ahead, %lld waiting for a retry; %lld delivered, %s not yet delivered\n",
                shown(g["group"].get<std::string>()).c_str(), n(g["done"]), n(g["skipped"]), n(g["dead"]), n(g["pending"]),
                n(g["in_progress"]), n(g["read_ahead"]), n(g["waiting_retry"]), n(g["delivered"]),
                g["lag"].is_null() ? "?" : std::to_string(n(g["lag"])).c_str());
    std::printf("  rate %s inputs/s, ETA %s s\n",
                g["rate_per_s"].is_null() ? "?" : seconds_text(g["rate_per_s"]).c_str(), seconds_text(g["eta_s"]).c_str());
    if (!g["consumers"].empty()) {
      std::printf("  %-32s %-5s %8s %8s %8s %9s %8s %8s %6s\n", "consumer", "state", "working", "ahead", "retry",
                  "silent_s", "done", "skipped", "dead");
      for (const auto& c : g["consumers"])
        std::printf("  %-32s %-5s %8lld %8lld %8lld %9.1f %8lld %8lld %6lld\n", shown(c["consumer"].get<std::string>()).c_str(),
                    shown(c["state"].get<std::string>()).c_str(), n(c["in_progress"]), n(c["read_ahead"]),
                    n(c["waiting_retry"]), static_cast<double>(n(c["silent_ms"])) / 1000.0, n(c["done"]), n(c["skipped"]),
                    n(c["dead"]));
    }
    if (!g["in_progress_inputs"].empty()) {
      std::printf("  in progress:\n");
      for (const auto& e : g["in_progress_inputs"])
        std::printf("    %-24s attempt %lld, %s s: %s\n", shown(e["consumer"].get<std::string>()).c_str(), n(e["attempt"]),
                    seconds_text(e["running_s"]).c_str(), shown(e["input"].get<std::string>()).c_str());
    }
  }
  if (!out["dead_letter_list"].empty()) {
    std::printf("latest dead letters:\n");
    for (const auto& d : out["dead_letter_list"])
      std::printf("  %s: %s\n", shown(d["input"].get<std::string>()).c_str(), shown(d["reason"].get<std::string>()).c_str());
  }
  return kExitOk;
}

// Each dead letter back into the stream, atomically: only the call that deleted it adds it again.
constexpr const char* kRequeueScript = R"(-- sluice: requeue a dead letter
if redis.call('XDEL', KEYS[2], ARGV[2]) == 1 then
  redis.call('XADD', KEYS[1], '*', 'input', ARGV[1], unpack(ARGV, 3))
  return 1
end
return 0)";

int requeue_dead(const Target& t) {
  redis::Client client(t.uri.endpoint, t.uri.stream);
  client.connect();
  std::size_t moved = 0, skipped = 0, refused = 0;
  std::string from = "-";
  for (;;) {
    const Reply r = client.checked({"XRANGE", t.dead, from, "+", "COUNT", "256"});
    const auto entries = redis::parse_entries(r, client.describe() + ": XRANGE '" + shown(t.dead) + "'");
    if (entries.empty()) break;
    std::vector<std::vector<std::string>> commands;
    for (const auto& e : entries) {
      const std::string* input = e.field("input");
      if (!input || input->empty()) {  // nothing to do again: it stays a dead letter
        ++skipped;
        continue;
      }
      // Its options back as the entry's fields, checked again (the dead letters are anyone's to write): one
      // whose options were refused, or do not parse now, stays.
      std::vector<std::string> fields;
      if (const std::string* rejected = e.field("options_rejected"); rejected && *rejected == "1") {
        ++refused;
        continue;
      }
      if (const std::string* text = e.field("options"); text && !text->empty()) {
        std::vector<std::string> words;
        for (std::size_t at = 0; at <= text->size();) {
          const std::size_t end = std::min(text->find(' ', at), text->size());
          words.push_back(text->substr(at, end - at));
          at = end + 1;
        }
        try {
          std::string ignored;
          fields = option_fields(words, ignored);
        } catch (const std::invalid_argument&) {
          ++refused;
          continue;
        }
      }
      commands.push_back({"EVAL", kRequeueScript, "2", t.uri.stream, t.dead, *input, e.id});
      commands.back().insert(commands.back().end(), fields.begin(), fields.end());
    }
    if (!commands.empty())
      for (const Reply& rr : client.pipeline(commands)) {
        if (rr.is(Reply::Type::error))
          throw redis::RedisError(redis::RedisError::Kind::server, client.describe() + ": requeue: " + shown(rr.str));
        if (rr.is(Reply::Type::integer) && rr.integer == 1) ++moved;
      }
    from = "(" + entries.back().id;  // exclusive start (redis >= 6.2)
  }
  std::printf("requeued %zu dead letter(s) from '%s' into '%s'", moved, shown(t.dead).c_str(), shown(t.uri.stream).c_str());
  if (skipped) std::printf("; %zu without an input stay", skipped);
  if (refused) std::printf("; %zu whose options were refused stay", refused);
  std::printf("\n");
  return kExitOk;
}

}  // namespace

int jobs_command(const std::vector<std::string>& args) {
  if (args.empty()) return usage("needs a subcommand: submit, status or requeue-dead");
  const std::string& sub = args[0];
  if (sub != "submit" && sub != "status" && sub != "requeue-dead") return usage("unknown subcommand '" + shown(sub) + "'");
  std::vector<std::string> rest(args.begin() + 1, args.end());
  bool as_json = false;
  if (sub == "status") {
    auto it = std::find(rest.begin(), rest.end(), "--json");
    if (it != rest.end()) {
      as_json = true;
      rest.erase(it);
    }
  }
  std::vector<std::string> options;  // submit: --option NAME=VALUE
  if (sub == "submit")
    for (auto it = rest.begin(); it != rest.end();) {
      if (*it != "--option") {
        ++it;
        continue;
      }
      if (it + 1 == rest.end()) return usage("submit: --option needs NAME=VALUE");
      options.push_back(*(it + 1));
      it = rest.erase(it, it + 2);
    }
  for (const auto& a : rest)
    if (a.rfind("--", 0) == 0) return usage(sub + ": unknown option '" + shown(a) + "'");
  if (rest.empty()) return usage(sub + ": needs redis://HOST:PORT/STREAM");
  if (sub == "submit" && rest.size() < 2) return usage("submit: needs at least one INPUT (file, directory or glob)");
  if (sub != "submit" && rest.size() > 1) return usage(sub + ": unexpected argument '" + shown(rest[1]) + "'");
  Target t;
  try {
    t = parse_target(rest[0], sub == "status", sub == "requeue-dead");
  } catch (const std::invalid_argument& e) {
    return usage(sub + ": " + e.what());
  }
  try {
    if (sub == "submit") return submit(t, {rest.begin() + 1, rest.end()}, options);
    if (sub == "status") return status(t, as_json);
    return requeue_dead(t);
  } catch (const std::invalid_argument& e) {
    return usage(sub + ": " + e.what());
  } catch (const redis::RedisError& e) {
    std::fprintf(stderr, "sluicectl: jobs %s: %s\n", sub.c_str(), e.what());
    return e.kind() == redis::RedisError::Kind::connection ? kExitConnect : kExitRedis;
  } catch (const std::exception& e) {  // expand_local_path's InputError, a filesystem error
    std::fprintf(stderr, "sluicectl: jobs %s: %s\n", sub.c_str(), e.what());
    return kExitRedis;
  }
}

}  // namespace sluice
