// The Redis source (runtime/redis_source, runtime/redis_group_replies): its URI options, which entry inputs it
// takes, the consumer-group reply shapes, and the feed against a redis-server the test starts: acknowledged
// only on a durable outcome, dead letters with the reason, an entry left uncommitted taken back after
// claim_idle_s and dead-lettered once delivered more than max_deliveries times, the end of an until_empty job.
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "pipeline_helpers.hpp"
#include "redis_server.hpp"
#include "runtime/source_kind.hpp"
#include "runtime/inputs.hpp"
#include "runtime/redis_client.hpp"
#include "runtime/redis_group_replies.hpp"
#include "runtime/redis_source.hpp"

using namespace sluice;
using Catch::Matchers::Contains;
using redis::Reply;
using redis::RedisError;

namespace {

Reply one_reply(const std::string& resp) {
  auto replies = redis::parse_replies(resp);
  REQUIRE(replies.size() == 1);
  return std::move(replies.front());
}

std::string bulk(const std::string& s) { return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n"; }

// Polls the feed until it hands out an input or `limit` passes; an empty uri when it ended or nothing came.
FedInput next_fed(InputFeed& feed, std::chrono::seconds limit = std::chrono::seconds(20)) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    FedInput input;
    const auto poll = feed.next(input, std::chrono::milliseconds(100));
    if (poll == InputFeed::Poll::input) return input;
    if (poll == InputFeed::Poll::ended) return {};
  }
  return {};
}

std::string next_input(InputFeed& feed, std::chrono::seconds limit = std::chrono::seconds(20)) {
  return next_fed(feed, limit).uri;
}

bool ended_within(InputFeed& feed, std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    FedInput input;
    const auto poll = feed.next(input, std::chrono::milliseconds(100));
    if (poll == InputFeed::Poll::ended) return true;
    if (poll == InputFeed::Poll::input) return false;  // not expected: the caller's job had no more
  }
  return false;
}

std::map<std::string, std::string> hash(redis::Client& c, const std::string& key) {
  const Reply r = c.checked({"HGETALL", key});
  std::map<std::string, std::string> out;
  for (std::size_t i = 0; i + 1 < r.elements.size(); i += 2) out[r.elements[i].str] = r.elements[i + 1].str;
  return out;
}

}  // namespace

TEST_CASE("redis source URI: options, defaults and refusals name what is wrong") {
  ::unsetenv("SLUICE_REDIS_PASSWORD");
  const auto o = parse_redis_source_uri(
      "redis://127.0.0.1:7000/jobs?group=g&consumer=w1&count=8&block_ms=50&claim_idle_s=2.5&max_deliveries=3&until_empty=1");
  CHECK(o.uri.stream == "jobs");
  CHECK(o.group == "g");
  CHECK(o.consumer == "w1");
  CHECK(o.count == 8);
  CHECK(o.block_ms == 50);
  CHECK(o.claim_idle_s == 2.5);
  CHECK(o.max_deliveries == 3);
  CHECK(o.until_empty);
  CHECK(o.dead == "jobs:dead");
  CHECK(o.stats_key() == "jobs:sluice-stats:g");
  const auto d = parse_redis_source_uri("redis://h/jobs?group=g");
  CHECK_FALSE(d.consumer.empty());  // hostname-pid
  CHECK(d.consumer.find('-') != std::string::npos);
  CHECK_FALSE(d.until_empty);
  CHECK(d.uri.endpoint.io_timeout_s > d.block_ms / 1000.0);  // a blocked read is not a lost connection

  CHECK_THROWS_WITH(parse_redis_source_uri("redis://h/jobs"), Contains("group"));
  CHECK_THROWS_WITH(parse_redis_source_uri("redis://h/jobs?group=g&colour=red"), Contains("unknown option 'colour'"));
  CHECK_THROWS_WITH(parse_redis_source_uri("redis://h/jobs?group=g&count=0"), Contains("'count'"));
  CHECK_THROWS_WITH(parse_redis_source_uri("redis://h/jobs?group=g&claim_idle_s=x"), Contains("'claim_idle_s'"));
  CHECK_THROWS_WITH(parse_redis_source_uri("redis://h/jobs?group=g&until_empty=maybe"), Contains("'until_empty'"));
  CHECK_THROWS_WITH(parse_redis_source_uri("redis://h/jobs?group=g&dead=jobs"), Contains("dead-letter"));
  try {
    parse_redis_source_uri("redis://:s3cret@h/jobs?group=g");
    FAIL("a password in the URI was taken");
  } catch (const std::invalid_argument& e) {
    CHECK_THAT(e.what(), Contains("SLUICE_REDIS_PASSWORD"));
    CHECK(std::string(e.what()).find("s3cret") == std::string::npos);
  }
  CHECK(is_redis_uri("redis://h/s"));
  CHECK(is_redis_uri("rediss://h/s"));  // TLS
  CHECK_FALSE(is_redis_uri("redis:/h/s"));
  CHECK_FALSE(is_redis_uri("rtsp://h/s"));
  const auto tls = parse_redis_source_uri("rediss://h:6380/jobs?group=g");
  CHECK(tls.uri.endpoint.tls);
  CHECK(tls.uri.endpoint.port == 6380);
  CHECK_FALSE(parse_redis_source_uri("redis://h/jobs?group=g").uri.endpoint.tls);
  CHECK(default_source_name("rediss://h:6380/jobs?group=g") == "redis-jobs");
  CHECK(default_source_name("redis://h/jobs?group=g") == "redis-jobs");
}

TEST_CASE("redis source: a bad URI is a config error when the pipeline is planned, never showing a password") {
  const std::string yaml = R"(name: t
device: cpu
stages:
  - kind: decode
    uri: ["URI"]
    width: 32
    height: 24
  - kind: sink
    type: stdout
)";
  auto with = [&](const std::string& uri) {
    std::string y = yaml;
    y.replace(y.find("URI"), 3, uri);
    return y;
  };
  CHECK_THROWS_WITH(test::plan_from(with("redis://127.0.0.1:1/jobs")), Contains("'uri'") && Contains("group"));
  CHECK_THROWS_WITH(test::plan_from(with("redis://127.0.0.1:1/jobs?group=g&count=x")), Contains("'count'"));
  try {
    test::plan_from(with("redis://:hunter2@127.0.0.1:1/jobs?group=g"));
    FAIL("a password in the pipeline file was taken");
  } catch (const std::exception& e) {
    CHECK_THAT(e.what(), Contains("SLUICE_REDIS_PASSWORD"));
    CHECK(std::string(e.what()).find("hunter2") == std::string::npos);
  }
  CHECK_NOTHROW(test::plan_from(with("redis://127.0.0.1:1/jobs?group=g&until_empty=true")));
  std::string serial = with("redis://127.0.0.1:1/jobs?group=g");
  serial.replace(serial.find("device: cpu"), 11, "device: cpu\nexecution: serial");
  CHECK_THROWS_WITH(test::plan_from(serial), Contains("execution: pipelined"));
}

TEST_CASE("redis source: which entry inputs a job takes") {
  InputKind kind{};
  CHECK_FALSE(reject_input("/data/a.mp4", kind));
  CHECK(kind == InputKind::file);
  CHECK_FALSE(reject_input("/data/b.JPG", kind));
  CHECK(kind == InputKind::image);
  CHECK_FALSE(reject_input("https://media.example/c.mp4", kind));
  CHECK(kind == InputKind::file);
  CHECK_THAT(*reject_input("clips/a.mp4", kind), Contains("not an absolute path"));
  CHECK_THAT(*reject_input("rtsp://cam/1", kind), Contains("URL of a kind"));
  CHECK_THAT(*reject_input("/dev/video0", kind), Contains("camera"));
  CHECK_THAT(*reject_input("", kind), Contains("empty"));
  CHECK_THAT(*reject_input(std::string("/a\0b", 4), kind), Contains("NUL"));
  CHECK_THAT(*reject_input("/" + std::string(5000, 'x'), kind), Contains("4096"));
  const auto shown = *reject_input("r\xff\xfe.mp4", kind);  // never echoes raw non-UTF-8 bytes
  CHECK(shown.find("\xff") == std::string::npos);
}

TEST_CASE("consumer-group replies: shapes checked, bad ones refused as protocol errors") {
  const Reply claim = one_reply("*3\r\n" + bulk("7-0") + "*1\r\n*2\r\n" + bulk("5-1") + "*2\r\n" + bulk("input") +
                                bulk("/a.mp4") + "*1\r\n" + bulk("4-0"));
  const auto c = redis::parse_xautoclaim(claim, "t");
  CHECK(c.cursor == "7-0");
  REQUIRE(c.entries.size() == 1);
  CHECK(*c.entries[0].field("input") == "/a.mp4");
  CHECK(c.deleted == std::vector<std::string>{"4-0"});
  CHECK(redis::parse_xautoclaim(one_reply("*2\r\n" + bulk("0-0") + "*0\r\n"), "t").entries.empty());  // redis 6.2
  CHECK_THROWS_AS(redis::parse_xautoclaim(one_reply("*2\r\n" + bulk("x") + "*0\r\n"), "t"), RedisError);
  CHECK_THROWS_AS(redis::parse_xautoclaim(one_reply(":1\r\n"), "t"), RedisError);

  const auto sum = redis::parse_xpending_summary(
      one_reply("*4\r\n:3\r\n" + bulk("1-0") + bulk("3-0") + "*1\r\n*2\r\n" + bulk("w1") + bulk("3")), "t");
  CHECK(sum.count == 3);
  REQUIRE(sum.consumers.size() == 1);
  CHECK(sum.consumers[0] == std::make_pair(std::string("w1"), std::int64_t{3}));
  CHECK(redis::parse_xpending_summary(one_reply("*4\r\n:0\r\n$-1\r\n$-1\r\n*-1\r\n"), "t").count == 0);
  CHECK_THROWS_AS(redis::parse_xpending_summary(one_reply("*4\r\n:-1\r\n$-1\r\n$-1\r\n*-1\r\n"), "t"), RedisError);
  CHECK_THROWS_AS(
      redis::parse_xpending_summary(one_reply("*4\r\n:1\r\n$-1\r\n$-1\r\n*1\r\n*2\r\n" + bulk("w") + bulk("1x")), "t"),
      RedisError);

  const auto pe = redis::parse_xpending_entries(one_reply("*1\r\n*4\r\n" + bulk("9-2") + bulk("w2") + ":1500\r\n:4\r\n"), "t");
  REQUIRE(pe.size() == 1);
  CHECK((pe[0].id == "9-2" && pe[0].consumer == "w2" && pe[0].idle_ms == 1500 && pe[0].deliveries == 4));
  CHECK_THROWS_AS(redis::parse_xpending_entries(one_reply("*1\r\n*3\r\n" + bulk("9-2") + bulk("w2") + ":1\r\n"), "t"),
                  RedisError);

  const auto info = redis::parse_info_list(
      one_reply("*1\r\n*6\r\n" + bulk("name") + bulk("g") + bulk("pending") + ":2\r\n" + bulk("lag") + "$-1\r\n"), "t");
  REQUIRE(info.size() == 1);
  CHECK(info[0].at("name") == "g");
  CHECK(info[0].at("pending") == "2");
  CHECK(info[0].at("lag") == "");
  CHECK_THROWS_AS(redis::parse_info_list(one_reply("*1\r\n*2\r\n" + bulk("name") + "*0\r\n"), "t"), RedisError);

  // Values of the attempt and heartbeat hashes (anyone can write them): parsed, or nullopt.
  const auto a = redis::parse_attempt("3 1700000000123 run host-1 pid 7");
  REQUIRE(a);
  CHECK((a->count == 3 && a->started_ms == 1700000000123 && a->running && a->consumer == "host-1 pid 7"));
  CHECK_FALSE(redis::parse_attempt("2 5 left w")->running);
  for (const char* bad : {"", "3", "3 5", "3 5 run ", "3 5 walk w", "-1 5 run w", "x 5 run w", "3 5run w",
                          "1234567890123456789 5 run w"})
    CHECK_FALSE(redis::parse_attempt(bad));
  const auto h = redis::parse_heartbeat("1700000000123 60000");
  REQUIRE(h);
  CHECK((h->seen_ms == 1700000000123 && h->allowed_ms == 60000));
  for (const char* bad : {"", "5", "5 ", "5 6 7", "5 x", " 5 6", "5 6\n"}) CHECK_FALSE(redis::parse_heartbeat(bad));
}

TEST_CASE("redis feed: acknowledged on a durable outcome, dead letters with the reason, retries up to max_deliveries") {
  ::unsetenv("SLUICE_REDIS_PASSWORD");
  test::RedisServer server;
  redis::Client c(server.endpoint());
  for (const char* input : {"/jobs/a.mp4", "/jobs/b.mp4", "/jobs/c.mp4"}) c.checked({"XADD", "jobs", "*", "input", input});
  c.checked({"XADD", "jobs", "*", "input", "not/absolute.mp4"});
  c.checked({"XADD", "jobs", "*", "input", "/jobs/d.mp4", "rate_limit", "5"});  // an option it cannot honour
  c.checked({"XADD", "jobs", "*", "input", "/jobs/e.mp4", "fit", "sideways"});   // a value it cannot honour
  const auto options = parse_redis_source_uri(server.uri("jobs") +
                                              "?group=g&consumer=w1&count=1&claim_idle_s=0.3&max_deliveries=2&until_empty=true");
  auto feed = open_redis_feed(options);

  std::map<std::string, int> handed;
  // a: done; b: failed (dead letter with the reader's reason); c: never committed, twice (retry), then it is
  // dead-lettered for its deliveries.
  for (int round = 0; round < 8 && !(handed["/jobs/c.mp4"] >= 2 && handed["/jobs/a.mp4"] && handed["/jobs/b.mp4"]); ++round) {
    const std::string input = next_input(*feed);
    REQUIRE_FALSE(input.empty());
    ++handed[input];
    if (input == "/jobs/a.mp4") feed->settled({1, input, InputOutcome::done, {}});
    else if (input == "/jobs/b.mp4") feed->settled({1, input, InputOutcome::failed, "b.mp4: not a video"});
    else feed->settled({1, input, InputOutcome::retry, "3 frames failed in a stage"});
  }
  CHECK(handed["/jobs/a.mp4"] == 1);
  CHECK(handed["/jobs/b.mp4"] == 1);
  CHECK(handed["/jobs/c.mp4"] == 2);  // delivered twice (max_deliveries), then dead-lettered instead of a third
  CHECK(ended_within(*feed, std::chrono::seconds(20)));
  feed.reset();

  const auto stats = hash(c, options.stats_key());
  CHECK(stats.at("done") == "1");
  CHECK(stats.at("dead") == "5");
  CHECK(stats.at("done:w1") == "1");
  const Reply dead = c.checked({"XRANGE", "jobs:dead", "-", "+"});
  std::map<std::string, std::string> reasons, dead_options;
  for (const auto& e : redis::parse_entries(dead, "dead")) {
    reasons[*e.field("input")] = *e.field("reason");
    if (const std::string* o = e.field("options"))
      dead_options[*e.field("input")] = *o + (e.field("options_rejected") ? " (rejected)" : "");
  }
  REQUIRE(reasons.size() == 5);
  CHECK(reasons.at("/jobs/b.mp4") == "b.mp4: not a video");
  CHECK_THAT(reasons.at("/jobs/c.mp4"), Contains("attempted 2 times, max_deliveries 2") && Contains("3 frames failed"));
  CHECK_THAT(reasons.at("not/absolute.mp4"), Contains("not an absolute path"));
  CHECK_THAT(reasons.at("/jobs/d.mp4"), Contains("unknown option 'rate_limit'") && Contains("fit, decoder, max_frames"));
  CHECK_THAT(reasons.at("/jobs/e.mp4"), Contains("option 'fit' is 'sideways', not stretch, letterbox or crop"));
  CHECK(dead_options.at("/jobs/d.mp4") == "rate_limit=5 (rejected)");  // kept as given, marked: a requeue leaves it
  CHECK(dead_options.at("/jobs/e.mp4") == "fit=sideways (rejected)");
  CHECK(dead_options.size() == 2);
  CHECK(handed.count("/jobs/d.mp4") == 0);
  CHECK(handed.count("/jobs/e.mp4") == 0);
  const auto pending = redis::parse_xpending_summary(c.checked({"XPENDING", "jobs", "g"}), "t");
  CHECK(pending.count == 0);
}

TEST_CASE("redis feed: a transient failure is retried while attempts are left, each wait longer, and the last is dead-lettered with its reason") {
  ::unsetenv("SLUICE_REDIS_PASSWORD");
  test::RedisServer server;
  redis::Client c(server.endpoint());
  c.checked({"XADD", "jobs", "*", "input", "https://media.example/busy.mp4"});
  auto feed = open_redis_feed(parse_redis_source_uri(server.uri("jobs") +
                                                     "?group=g&consumer=w1&claim_idle_s=0.3&max_deliveries=3&until_empty=true"));
  const std::string url = "https://media.example/busy.mp4";
  const std::string why = "'https://media.example/busy.mp4': cannot fetch it: Server returned 5XX Server Error reply (HTTP 503)";
  std::vector<std::chrono::steady_clock::time_point> handed;
  for (int attempt = 1; attempt <= 3; ++attempt) {
    REQUIRE(next_input(*feed) == url);
    handed.push_back(std::chrono::steady_clock::now());
    const bool again = feed->retries(url, "");
    CHECK(again == (attempt < 3));  // attempts 1 and 2 of max_deliveries 3 are tried again, the third is not
    InputResult r{1, url, again ? InputOutcome::retry : InputOutcome::failed, why};
    r.transient = true;
    feed->settled(r);
  }
  // Left after one attempt it waits claim_idle_s (0.3 s), after two twice that: a lower bound, never an upper one.
  CHECK(handed[1] - handed[0] >= std::chrono::milliseconds(300));
  CHECK(handed[2] - handed[1] >= std::chrono::milliseconds(600));
  CHECK(ended_within(*feed, std::chrono::seconds(20)));
  CHECK_FALSE(feed->retries("/jobs/not-held.mp4", ""));  // not one of its inputs
  feed.reset();
  const auto dead = redis::parse_entries(c.checked({"XRANGE", "jobs:dead", "-", "+"}), "dead");
  REQUIRE(dead.size() == 1);
  CHECK(*dead[0].field("input") == url);
  CHECK(*dead[0].field("reason") == why + " (attempt 3 of max_deliveries 3)");
  CHECK(*dead[0].field("deliveries") == "3");
  CHECK(hash(c, "jobs:sluice-stats:g").at("dead") == "1");
}

TEST_CASE("redis feed: a dead consumer's entries are taken over but a live one's held entries are not") {
  ::unsetenv("SLUICE_REDIS_PASSWORD");
  test::RedisServer server;
  redis::Client c(server.endpoint());
  c.checked({"XADD", "jobs", "*", "input", "/jobs/orphan.mp4"});
  c.checked({"XADD", "jobs", "*", "input", "/jobs/fresh.mp4"});
  // A consumer that read the orphan and died: pending under its name, never acknowledged.
  c.checked({"XGROUP", "CREATE", "jobs", "g", "0", "MKSTREAM"});
  c.checked({"XREADGROUP", "GROUP", "g", "dead", "COUNT", "1", "STREAMS", "jobs", ">"});
  const std::string base = server.uri("jobs") + "?group=g&count=2&claim_idle_s=2";
  auto live = open_redis_feed(parse_redis_source_uri(base + "&consumer=w1"));
  std::map<std::string, int> got;
  for (int i = 0; i < 2; ++i) ++got[next_input(*live)];
  CHECK(got["/jobs/fresh.mp4"] == 1);
  CHECK(got["/jobs/orphan.mp4"] == 1);  // taken over from the dead consumer once idle for claim_idle_s
  // w1 holds both without settling them: a second consumer must not take them while w1 keeps them alive.
  auto other = open_redis_feed(parse_redis_source_uri(base + "&consumer=w2"));
  FedInput fed;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);  // 2.5 claim_idle_s
  bool stolen = false;
  while (std::chrono::steady_clock::now() < until)
    stolen = other->next(fed, std::chrono::milliseconds(100)) == InputFeed::Poll::input || stolen;
  CHECK_FALSE(stolen);
  live->settled({1, "/jobs/fresh.mp4", InputOutcome::done, {}});
  live->settled({1, "/jobs/orphan.mp4", InputOutcome::done, {}});
  live.reset();  // stopping sends what is settled
  other.reset();
  const auto pending = redis::parse_xpending_summary(c.checked({"XPENDING", "jobs", "g"}), "t");
  CHECK(pending.count == 0);
  CHECK(hash(c, "jobs:sluice-stats:g").at("done:w1") == "2");
}

TEST_CASE("redis feed: max_deliveries counts attempts, not entries read ahead by workers that never started them") {
  ::unsetenv("SLUICE_REDIS_PASSWORD");
  test::RedisServer server;
  redis::Client c(server.endpoint());
  c.checked({"XADD", "jobs", "*", "input", "/jobs/read-ahead.mp4"});
  c.checked({"XGROUP", "CREATE", "jobs", "g", "0", "MKSTREAM"});
  // Delivered four times to workers that died with it read ahead, none of them started it.
  const Reply read = c.checked({"XREADGROUP", "GROUP", "g", "gone1", "COUNT", "1", "STREAMS", "jobs", ">"});
  const std::string id = redis::parse_xreadgroup(read, "t").at(0).id;
  for (const char* gone : {"gone2", "gone3", "gone4"}) c.checked({"XCLAIM", "jobs", "g", gone, "0", id});
  auto feed = open_redis_feed(parse_redis_source_uri(server.uri("jobs") +
                                                     "?group=g&consumer=w1&claim_idle_s=0.2&max_deliveries=2&until_empty=true"));
  CHECK(next_input(*feed) == "/jobs/read-ahead.mp4");  // attempted 0 times: run, not dead-lettered
  feed->settled({1, "/jobs/read-ahead.mp4", InputOutcome::done, {}});
  CHECK(ended_within(*feed, std::chrono::seconds(20)));
  feed.reset();
  const auto stats = hash(c, "jobs:sluice-stats:g");
  CHECK(stats.at("done") == "1");
  CHECK(stats.count("dead") == 0);
  CHECK(hash(c, "jobs:sluice-attempts:g").empty());  // forgotten once acknowledged
}

TEST_CASE("redis feed: an input is committed only while its entry is still this consumer's") {
  ::unsetenv("SLUICE_REDIS_PASSWORD");
  test::RedisServer server;
  redis::Client c(server.endpoint());
  c.checked({"XADD", "jobs", "*", "input", "/jobs/kept.mp4"});
  c.checked({"XADD", "jobs", "*", "input", "/jobs/stolen.mp4"});
  auto feed = open_redis_feed(parse_redis_source_uri(server.uri("jobs") + "?group=g&consumer=w1&count=2&claim_idle_s=60"));
  std::map<std::string, std::string> ids;
  for (int i = 0; i < 2; ++i) REQUIRE_FALSE(next_input(*feed).empty());
  for (const auto& p : redis::parse_xpending_entries(c.checked({"XPENDING", "jobs", "g", "-", "+", "10"}), "t"))
    ids[*redis::parse_entries(c.checked({"XRANGE", "jobs", p.id, p.id}), "t").at(0).field("input")] = p.id;
  // Another consumer takes one over (as after this one was cut off past claim_idle_s).
  c.checked({"XCLAIM", "jobs", "g", "thief", "0", ids.at("/jobs/stolen.mp4")});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(feed->still_ours("/jobs/kept.mp4", ""));
  CHECK_FALSE(feed->still_ours("/jobs/stolen.mp4", ""));
  // The kept one's idle time was reset for its commit.
  const auto kept = redis::parse_xpending_entries(
      c.checked({"XPENDING", "jobs", "g", ids.at("/jobs/kept.mp4"), ids.at("/jobs/kept.mp4"), "1"}), "t");
  REQUIRE(kept.size() == 1);
  CHECK(kept[0].consumer == "w1");
  CHECK(kept[0].idle_ms < 250);
  feed->settled({1, "/jobs/kept.mp4", InputOutcome::done, {}});
  feed->settled({1, "/jobs/stolen.mp4", InputOutcome::retry, "taken over by another worker of the job"});
  feed.reset();
  const auto stats = hash(c, "jobs:sluice-stats:g");
  CHECK(stats.at("done") == "1");
  const auto left = redis::parse_xpending_entries(c.checked({"XPENDING", "jobs", "g", "-", "+", "10"}), "t");
  REQUIRE(left.size() == 1);  // the stolen one stays the thief's: not acknowledged here
  CHECK(left[0].consumer == "thief");
}

TEST_CASE("redis feed: the ownership check waits for a lost server, but not once the source is stopping") {
  ::unsetenv("SLUICE_REDIS_PASSWORD");
  test::RedisServer server;
  redis::Client c(server.endpoint());
  c.checked({"XADD", "jobs", "*", "input", "/jobs/a.mp4"});
  auto feed = open_redis_feed(parse_redis_source_uri(server.uri("jobs") + "?group=g&consumer=w1&claim_idle_s=60"));
  REQUIRE(next_input(*feed) == "/jobs/a.mp4");
  server.stop();
  std::atomic<int> answer{-1};
  std::thread commit([&] { answer = feed->still_ours("/jobs/a.mp4", "") ? 1 : 0; });
  for (int i = 0; i < 100 && feed->trouble().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(feed->trouble().empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(answer == -1);  // waits: the server may come back and say it is still ours
  feed->stopping();  // answered at once: not committed, done again later
  for (int i = 0; i < 100 && answer == -1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(answer == 0);
  feed.reset();  // (ends the wait also where stopping() did not)
  commit.join();
}

TEST_CASE("redis feed: the job stream is trimmed below what every group still needs, never a pending or undelivered entry") {
  ::unsetenv("SLUICE_REDIS_PASSWORD");
  test::RedisServer server;
  redis::Client c(server.endpoint());
  std::vector<std::string> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(c.checked({"XADD", "jobs", "*", "input", "/jobs/t" + std::to_string(i) + ".mp4"}).str);
  // A slow consumer holds t1 (t0 it acknowledged); a second group has read nothing yet from the other stream.
  c.checked({"XGROUP", "CREATE", "jobs", "g", "0", "MKSTREAM"});
  c.checked({"XREADGROUP", "GROUP", "g", "slow", "COUNT", "2", "STREAMS", "jobs", ">"});
  c.checked({"XACK", "jobs", "g", ids[0]});
  auto length = [&](const char* stream) { return c.checked({"XLEN", stream}).integer; };
  auto settle_all = [&](InputFeed& feed, int n) {
    for (int i = 0; i < n; ++i) {
      const std::string input = next_input(feed);
      REQUIRE_FALSE(input.empty());
      feed.settled({1, input, InputOutcome::done, {}});
    }
  };
  auto within = [](auto pred) {
    for (int i = 0; i < 100 && !pred(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return pred();
  };
  auto feed = open_redis_feed(parse_redis_source_uri(server.uri("jobs") + "?group=g&consumer=w1&claim_idle_s=60"));
  settle_all(*feed, 4);  // t2..t5 done: t0 goes, t1 (pending on slow) and what follows it stay
  CHECK(within([&] { return length("jobs") == 5; }));
  CHECK(c.checked({"XRANGE", "jobs", "-", "+", "COUNT", "1"}).elements.at(0).elements.at(0).str == ids[1]);
  c.checked({"XACK", "jobs", "g", ids[1]});  // the slow one is done too; the next acknowledgement trims to the end
  c.checked({"XADD", "jobs", "*", "input", "/jobs/t6.mp4"});
  settle_all(*feed, 1);
  CHECK(within([&] { return length("jobs") == 1; }));  // the group's last delivered entry stays
  feed.reset();

  for (int i = 0; i < 3; ++i) c.checked({"XADD", "other", "*", "input", "/jobs/o" + std::to_string(i) + ".mp4"});
  c.checked({"XGROUP", "CREATE", "other", "idle-group", "0"});  // delivered nothing yet: needs every entry
  auto other = open_redis_feed(parse_redis_source_uri(server.uri("other") + "?group=g&consumer=w1&until_empty=true"));
  settle_all(*other, 3);
  CHECK(ended_within(*other, std::chrono::seconds(20)));
  other.reset();
  CHECK(length("other") == 3);
}

TEST_CASE("input options: each parsed, checked and written back in one canonical text") {
  InputOptions o;
  CHECK(o.empty());
  CHECK(o.text().empty());
  CHECK(o.set("max_frames", "12").empty());
  CHECK(o.set("fit", "crop").empty());
  CHECK(o.set("decoder", "cpu").empty());
  CHECK(o.text() == "fit=crop decoder=cpu max_frames=12");  // the documented order, not the given one
  ReaderOptions reader;
  reader.decoder = DecoderChoice::gpu;
  o.apply(reader);
  CHECK(reader.fit == Fit::crop);
  CHECK(reader.decoder == DecoderChoice::cpu);

  InputOptions bad;
  CHECK_THAT(bad.set("fit", "sideways"), Contains("'fit' is 'sideways'") && Contains("stretch, letterbox or crop"));
  CHECK_THAT(bad.set("decoder", "nvdec"), Contains("not auto, gpu or cpu"));
  for (const char* n : {"0", "-1", "1.5", "", "12abc", " 3", "99999999999999999999", "1099511627777"})
    CHECK_THAT(bad.set("max_frames", n), Contains("'max_frames'") && Contains("1 to 1099511627776"));
  CHECK(bad.set("max_frames", "1099511627776").empty());
  CHECK_THAT(bad.set("rate_limit", "5"), Contains("unknown option 'rate_limit'") && Contains("fit, decoder, max_frames"));
  const std::string shown = bad.set("fit", "\xff\xfe" + std::string(500, 'x'));  // never raw bytes, never long
  CHECK(shown.find('\xff') == std::string::npos);
  CHECK(shown.size() < 200);
  CHECK(bad.text() == "max_frames=1099511627776");  // refused values left nothing behind
}

TEST_CASE("redis feed: an entry's options reach the source, and outcomes are told apart by them") {
  ::unsetenv("SLUICE_REDIS_PASSWORD");
  test::RedisServer server;
  redis::Client c(server.endpoint());
  // The same input twice with different options, both held at once (count=2): each outcome settles its own.
  c.checked({"XADD", "jobs", "*", "input", "/jobs/a.mp4", "fit", "letterbox", "max_frames", "3"});
  c.checked({"XADD", "jobs", "*", "input", "/jobs/a.mp4", "decoder", "cpu"});
  c.checked({"XADD", "jobs", "*", "input", "/jobs/b.mp4", "fit", "crop", "fit", "stretch"});  // named twice
  const auto options = parse_redis_source_uri(server.uri("jobs") + "?group=g&consumer=w1&count=2&until_empty=true");
  auto feed = open_redis_feed(options);
  const FedInput first = next_fed(*feed), second = next_fed(*feed);
  CHECK(first.uri == "/jobs/a.mp4");
  CHECK(first.options.text() == "fit=letterbox max_frames=3");
  CHECK(second.uri == "/jobs/a.mp4");
  CHECK(second.options.text() == "decoder=cpu");
  // The second fails, the first is done: the dead letter is the second's, with its options to requeue it with.
  feed->settled({1, "/jobs/a.mp4", InputOutcome::failed, "not a video", "decoder=cpu"});
  feed->settled({1, "/jobs/a.mp4", InputOutcome::done, {}, "fit=letterbox max_frames=3"});
  CHECK(ended_within(*feed, std::chrono::seconds(20)));
  feed.reset();
  const auto stats = hash(c, options.stats_key());
  CHECK(stats.at("done") == "1");
  CHECK(stats.at("dead") == "2");
  std::map<std::string, std::string> dead;
  for (const auto& e : redis::parse_entries(c.checked({"XRANGE", "jobs:dead", "-", "+"}), "dead"))
    dead[*e.field("reason")] = e.field("options") ? *e.field("options") : "";
  REQUIRE(dead.size() == 2);
  CHECK(dead.at("not a video") == "decoder=cpu");
  CHECK(dead.count("the entry has the field 'fit' twice") == 1);
}
