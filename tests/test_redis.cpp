// The Redis connection layer (runtime/redis_client) and the redis sink, against redis-servers the tests start
// (tests/redis_server.hpp) and a hostile fake server: the bounded reply reader, stream entry shapes, URIs,
// AUTH, errors that name host:port and the command, reconnection, and records that land exactly once across
// a server restart, and TLS (rediss://): certificates and names checked, client certificates, the sink and the
// source over it.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdlib.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/topk.hpp"
#include "pipeline_helpers.hpp"
#include "redis_server.hpp"
#include "runtime/errors.hpp"
#include "runtime/redis_client.hpp"
#include "runtime/redis_source.hpp"
#include "runtime/stage.hpp"
#include "runtime/utf8.hpp"
#include "sink_rig.hpp"
#include "stage_params.hpp"
#include "temp_dir.hpp"

using namespace sluice;
using Catch::Matchers::Contains;
using redis::Reply;
using redis::RedisError;

namespace {

std::string resp_bulk(const std::string& s) { return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n"; }

// A listening TCP socket on 127.0.0.1 at a port the kernel picks (stored in `port`).
int listen_on_loopback(int& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(fd, 4) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  port = ntohs(a.sin_port);
  return fd;
}

// A server that answers every connection with `reply` (whatever the client sent), then closes it.
class FakeServer {
 public:
  explicit FakeServer(std::string reply) : reply_(std::move(reply)) {
    fd_ = listen_on_loopback(port_);
    thread_ = std::thread([this] {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      char buf[4096];
      (void)::read(c, buf, sizeof buf);
      (void)::write(c, reply_.data(), reply_.size());
      ::shutdown(c, SHUT_WR);
      while (::read(c, buf, sizeof buf) > 0) {
      }
      ::close(c);
    });
  }
  ~FakeServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  redis::Endpoint endpoint() const {
    redis::Endpoint e;
    e.port = port_;
    e.io_timeout_s = 2;
    return e;
  }

 private:
  std::string reply_;
  int fd_ = -1, port_ = 0;
  std::thread thread_;
};

// A relay to a redis-server that cuts the first connection whose client sends EVAL (the sink's batch), at one of
// two moments: `request` forwards everything before the EVAL command and drops it (the server never sees the
// batch); `reply` forwards it, lets the server apply it, and drops the reply. Both sides are then closed; later
// connections are relayed untouched.
class CuttingProxy {
 public:
  enum class Cut { request, reply };
  CuttingProxy(int target_port, Cut cut) : target_port_(target_port), cut_(cut) {
    fd_ = listen_on_loopback(port_);
    thread_ = std::thread([this] { run(); });
  }
  ~CuttingProxy() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  std::string uri(const std::string& stream) const { return "redis://127.0.0.1:" + std::to_string(port_) + "/" + stream; }
  bool cut_done() const { return cut_done_; }

 private:
  void run() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int client = ::accept(fd_, nullptr, nullptr);
      if (client < 0) continue;
      relay(client);
      ::close(client);
    }
  }
  void relay(int client) {
    const int server = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(target_port_));
    if (::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(server);
      return;
    }
    std::vector<char> buf(1 << 20);
    const std::string eval = "$4\r\nEVAL\r\n";
    while (!stop_) {
      pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      if (::poll(p, 2, 50) <= 0) continue;
      if (p[0].revents) {
        const ssize_t n = ::read(client, buf.data(), buf.size());
        if (n <= 0) break;
        std::string_view chunk(buf.data(), static_cast<std::size_t>(n));
        const std::size_t at = cut_done_ ? std::string_view::npos : chunk.find(eval);
        if (at == std::string_view::npos) {
          if (!write_all(server, chunk)) break;
          continue;
        }
        cut_done_ = true;
        if (cut_ == Cut::request) {
          const std::size_t command = chunk.rfind('*', at);  // where "*N\r\n$4\r\nEVAL..." starts
          write_all(server, chunk.substr(0, command == std::string_view::npos ? 0 : command));
        } else {
          write_all(server, chunk);
          std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the server applies it; its reply is dropped
        }
        break;
      }
      if (p[1].revents) {
        const ssize_t n = ::read(server, buf.data(), buf.size());
        if (n <= 0 || !write_all(client, std::string_view(buf.data(), static_cast<std::size_t>(n)))) break;
      }
    }
    ::close(server);
  }
  static bool write_all(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::write(fd, bytes.data(), bytes.size());
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }
  int target_port_;
  Cut cut_;
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false}, cut_done_{false};
  std::thread thread_;
};

// The redis sink of a pipeline, fed batches of 4 frames.
struct SinkRig : test::SinkRig {
  explicit SinkRig(const std::map<std::string, std::string>& given) : test::SinkRig(given, 4) {}
  // One batch of 4 frames, sequences first..first+3.
  void deliver(std::uint64_t first) {
    std::vector<FrameMeta> frames(4);
    for (std::uint64_t i = 0; i < 4; ++i) frames[i].sequence = first + i;
    test::ClassesBatch batch(desc, frames);
    stage->process(&batch.b, ctx);
  }
  // One batch of 4 frames of tracker input `input`, its frames first..first+3.
  void deliver_input(std::uint32_t input, std::uint64_t first) {
    std::vector<FrameMeta> frames(4);
    for (std::uint64_t i = 0; i < 4; ++i) {
      frames[i].sequence = next_sequence++;
      frames[i].input = input;
      frames[i].input_frame = first + i;
    }
    test::ClassesBatch batch(desc, frames);
    stage->process(&batch.b, ctx);
  }
  std::uint64_t next_sequence = 0;
};

// The `record` fields of every entry of `stream`, parsed.
std::vector<nlohmann::json> records_of(const test::RedisServer& server, const std::string& stream) {
  redis::Client c(server.endpoint(), stream);
  const auto entries = redis::parse_entries(c.checked({"XRANGE", stream, "-", "+"}), "XRANGE");
  std::vector<nlohmann::json> out;
  for (const auto& e : entries) {
    const std::string* record = e.field("record");
    REQUIRE(record);
    REQUIRE(e.field("writer"));
    out.push_back(nlohmann::json::parse(*record));
  }
  return out;
}

}  // namespace

TEST_CASE("the reply reader builds every RESP2 type and refuses what breaks its bounds", "[redis]") {
  const auto replies = redis::parse_replies("+OK\r\n-ERR no\r\n:-7\r\n$-1\r\n*-1\r\n" + resp_bulk(std::string("a\0b", 3)) +
                                            "*2\r\n:1\r\n*1\r\n+x\r\n");
  REQUIRE(replies.size() == 7);
  CHECK((replies[0].is(Reply::Type::status) && replies[0].str == "OK"));
  CHECK((replies[1].is(Reply::Type::error) && replies[1].str == "ERR no"));
  CHECK((replies[2].is(Reply::Type::integer) && replies[2].integer == -7));
  CHECK(replies[3].is(Reply::Type::nil));
  CHECK(replies[4].is(Reply::Type::nil));
  CHECK(replies[5].str == std::string("a\0b", 3));
  REQUIRE(replies[6].elements.size() == 2);
  CHECK(replies[6].elements[1].elements[0].str == "x");
  // An incomplete reply is waited for (nothing returned yet), not misread.
  CHECK(redis::parse_replies("$10\r\nabc").empty());
  CHECK_THROWS_AS(redis::parse_replies("*99999999999\r\n"), RedisError);
  CHECK_THROWS_AS(redis::parse_replies("*2000000\r\n"), RedisError);  // over kMaxReplyElements
  CHECK_THROWS_AS(redis::parse_replies("*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n"), RedisError);  // deeper than 7
  try {
    redis::parse_replies("\xff\xfe garbage\r\n");
    FAIL("garbage was accepted");
  } catch (const RedisError& e) {
    CHECK(e.kind() == RedisError::Kind::protocol);
    CHECK(valid_utf8(e.what()));
  }
}

TEST_CASE("stream entries are read from XRANGE, XREADGROUP and XAUTOCLAIM shapes, wrong shapes refused", "[redis]") {
  const std::string entry = "*2\r\n" + resp_bulk("1700000000000-3") + "*4\r\n" + resp_bulk("input") +
                            resp_bulk("/v/a.mp4") + resp_bulk("opt") + resp_bulk("1");
  const std::string deleted = "*2\r\n" + resp_bulk("5-0") + "*-1\r\n";
  const auto xrange = redis::parse_replies("*2\r\n" + entry + deleted).at(0);
  const auto entries = redis::parse_entries(xrange, "XRANGE");
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].id == "1700000000000-3");
  REQUIRE(entries[0].field("input"));
  CHECK(*entries[0].field("input") == "/v/a.mp4");
  CHECK(entries[0].field("none") == nullptr);
  const auto group = redis::parse_replies("*1\r\n*2\r\n" + resp_bulk("jobs") + "*1\r\n" + entry).at(0);
  CHECK(redis::parse_xreadgroup(group, "XREADGROUP").size() == 1);
  CHECK(redis::parse_xreadgroup(redis::parse_replies("*-1\r\n").at(0), "XREADGROUP").empty());
  for (const std::string& bad : std::vector<std::string>{":1\r\n", "*1\r\n:1\r\n", "*1\r\n*2\r\n" + resp_bulk("x-1") + "*0\r\n",
                                "*1\r\n*2\r\n" + resp_bulk("1-1") + "*1\r\n" + resp_bulk("odd"),
                                "*1\r\n*2\r\n" + resp_bulk("1-1") + "*2\r\n" + resp_bulk("k") + ":5\r\n"}) {
    const auto r = redis::parse_replies(bad).at(0);
    CHECK_THROWS_WITH(redis::parse_entries(r, "XRANGE 'jobs'"), Contains("XRANGE 'jobs'"));
  }
  CHECK(redis::valid_entry_id("0-0"));
  CHECK_FALSE(redis::valid_entry_id("12"));
  CHECK_FALSE(redis::valid_entry_id("-1"));
  CHECK_FALSE(redis::valid_entry_id("1-"));
  CHECK_FALSE(redis::valid_entry_id("1-a"));
}

TEST_CASE("redis URIs give host, port, stream, password and options, and bad ones are refused", "[redis]") {
  const auto u = redis::parse_redis_uri("redis://:s%40cret@cache.local:6380/jobs%2Fa?group=g&consumer=c1&block_ms=50");
  CHECK(u.endpoint.host == "cache.local");
  CHECK(u.endpoint.port == 6380);
  CHECK(u.endpoint.password == "s@cret");
  CHECK(u.stream == "jobs/a");
  REQUIRE(u.query.size() == 3);
  CHECK(u.query[1] == std::pair<std::string, std::string>{"consumer", "c1"});
  const auto v6 = redis::parse_redis_uri("redis://[::1]/s");
  CHECK(v6.endpoint.host == "::1");
  CHECK(v6.endpoint.port == 6379);
  CHECK(v6.endpoint.where() == "[::1]:6379");
  for (const char* bad : {"http://h/s", "redis://h", "redis://h/", "redis://h:0/s", "redis://h:99999/s", "redis://h:x/s",
                          "redis:///s", "redis://[::1/s", "redis://h/s%zz", "redis://alice:pw@h/s", "redis://pw@h/s"})
    CHECK_THROWS_AS(redis::parse_redis_uri(bad), std::invalid_argument);
  try {
    redis::parse_redis_uri("redis://:hunter2@h:0/s");
  } catch (const std::invalid_argument& e) {
    CHECK_THAT(e.what(), !Contains("hunter2"));
  }
}

TEST_CASE("a client talks to a real server, names host:port and the command in errors, and reconnects", "[redis]") {
  test::RedisServer server;
  redis::Client c(server.endpoint(), "jobs");
  CHECK(c.checked({"SET", "k", std::string("v\0\xff", 3)}).str == "OK");
  CHECK(c.checked({"GET", "k"}).str == std::string("v\0\xff", 3));
  const auto replies = c.pipeline({{"INCR", "n"}, {"INCR", "n"}, {"LPUSH", "k", "x"}});
  CHECK(replies[1].integer == 2);
  CHECK(replies[2].is(Reply::Type::error));  // WRONGTYPE: returned, not thrown
  CHECK_THROWS_WITH(c.checked({"LPUSH", "k", "x"}),
                    Contains("127.0.0.1:" + std::to_string(server.port())) && Contains("stream 'jobs'") &&
                        Contains("LPUSH 'k'") && Contains("WRONGTYPE"));

  // AUTH: a password the server wants, and one it refuses (never shown).
  c.checked({"CONFIG", "SET", "requirepass", "pw1"});
  redis::Endpoint e = server.endpoint();
  e.password = "wrong-pass";
  redis::Client refused(e);
  try {
    refused.connect();
    FAIL("a wrong password was accepted");
  } catch (const RedisError& err) {
    CHECK(err.kind() == RedisError::Kind::server);
    CHECK_THAT(err.what(), Contains("AUTH refused") && !Contains("wrong-pass"));
  }
  e.password = "pw1";
  redis::Client authed(e);
  CHECK(authed.checked({"PING"}).str == "PONG");
  authed.checked({"CONFIG", "SET", "requirepass", ""});

  // The server goes away: a connection error naming the command; back again: reconnect.
  server.stop();
  try {
    c.command({"GET", "k"});
    FAIL("a stopped server answered");
  } catch (const RedisError& err) {
    CHECK(err.transient());
    CHECK_THAT(err.what(), Contains("GET 'k'") && Contains(std::to_string(server.port())));
  }
  CHECK_FALSE(c.connected());
  CHECK_THROWS_AS(c.connect(), RedisError);
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    server.start();
  });
  const bool connected = c.connect_with_backoff(std::chrono::steady_clock::now() + std::chrono::seconds(20), nullptr);
  later.join();
  CHECK(connected);
  CHECK(c.checked({"PING"}).str == "PONG");
}

TEST_CASE("hostile replies from a server are refused with the reason, never a crash", "[redis]") {
  for (const std::string& reply : {std::string("*99999999999\r\n"), std::string("*3000000\r\n"),
                                  std::string("\x01\x02\xff junk\r\n"), std::string("$5\r\nab")}) {
    FakeServer fake(reply);
    redis::Client c(fake.endpoint(), "s");
    try {
      c.command({"PING"});
      FAIL("a hostile reply was accepted");
    } catch (const RedisError& e) {
      CHECK_THAT(e.what(), Contains("PING") && Contains("127.0.0.1:"));
      CHECK(valid_utf8(e.what()));
    }
    CHECK_FALSE(c.connected());
  }
}

TEST_CASE("the redis sink appends every record of a whole pipeline to a stream, and refuses a key of another type", "[redis][sinks]") {
  test::RedisServer server;
  std::string yaml = test::chain_yaml("cpu", "bgr8", 21, "x");
  yaml.replace(yaml.find("type: jsonl\n    path: x"), 23, "type: redis\n    path: " + server.uri("results"));
  REQUIRE(test::run_to_end(test::plan_from(yaml)).delivered == 21);
  const auto records = records_of(server, "results");
  REQUIRE(records.size() == 21);
  std::set<std::uint64_t> sequences;
  for (const auto& r : records) sequences.insert(r["sequence"].get<std::uint64_t>());
  CHECK(sequences.size() == 21);
  CHECK(records[20]["payload"]["shape"] == "tensor f32 nchw 3x64x96");

  // A key of another type is refused at open, naming it.
  redis::Client c(server.endpoint());
  c.checked({"SET", "plain", "1"});
  std::string other = yaml;
  other.replace(other.find("/results"), 8, "/plain");
  const auto refused = test::run_to_end(test::plan_from(other));
  CHECK(refused.delivered == 0);
  CHECK(refused.failed == 21);
  REQUIRE_FALSE(refused.errors.empty());
  CHECK_THAT(refused.errors.front(), Contains("the key holds a string, not a stream"));
  // A password in the pipeline file is refused (it would be shown by check and logs).
  std::string with_password = yaml;
  with_password.replace(with_password.find("redis://"), 8, "redis://:pw@");
  CHECK_THROWS_WITH(test::plan_from(with_password), Contains("SLUICE_REDIS_PASSWORD"));

  // A server that wants a password: refused without SLUICE_REDIS_PASSWORD, delivered with it.
  c.checked({"CONFIG", "SET", "requirepass", "pw-42"});
  std::string authed = yaml;
  authed.replace(authed.find("/results"), 8, "/authed");
  const auto no_password = test::run_to_end(test::plan_from(authed));
  CHECK(no_password.delivered == 0);
  REQUIRE_FALSE(no_password.errors.empty());
  CHECK_THAT(no_password.errors.front(), Contains("NOAUTH"));
  ::setenv("SLUICE_REDIS_PASSWORD", "pw-42", 1);
  const auto with_env = test::run_to_end(test::plan_from(authed));
  ::unsetenv("SLUICE_REDIS_PASSWORD");
  CHECK(with_env.delivered == 21);
  redis::Endpoint e = server.endpoint();
  e.password = "pw-42";
  redis::Client admin(e);
  CHECK(admin.checked({"XLEN", "authed"}).integer == 21);
  admin.checked({"CONFIG", "SET", "requirepass", ""});
}

TEST_CASE("the redis sink blocks while the server restarts, lands every batch once, and trims by maxlen", "[redis][sinks]") {
  test::RedisServer server(true);
  SinkRig rig({{"type", "redis"}, {"path", server.uri("out")}, {"write_retry_s", "30"}, {"maxlen", "1000"}});
  rig.stage->open(rig.ctx);
  rig.deliver(0);
  rig.deliver(4);
  server.stop();
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    server.start();
  });
  rig.deliver(8);  // blocks until the server is back
  later.join();
  rig.deliver(12);
  CHECK(rig.stage->health().empty());
  const auto records = records_of(server, "out");
  REQUIRE(records.size() == 16);
  for (std::size_t i = 0; i < records.size(); ++i) CHECK(records[i]["sequence"] == i);
  rig.stage->close(rig.ctx);

  // maxlen: XADD MAXLEN ~ trims whole nodes of the stream (100 entries by default), so about maxlen stay.
  SinkRig trimmed({{"type", "redis"}, {"path", server.uri("trimmed")}, {"maxlen", "10"}});
  trimmed.stage->open(trimmed.ctx);
  for (std::uint64_t b = 0; b < 100; ++b) trimmed.deliver(b * 4);
  redis::Client c(server.endpoint());
  const long long length = c.checked({"XLEN", "trimmed"}).integer;
  CHECK(length >= 10);
  CHECK(length <= 200);
  trimmed.stage->close(trimmed.ctx);
}

TEST_CASE("the redis sink fails a batch with the server and reason once write_retry_s passed", "[redis][sinks]") {
  test::RedisServer server;
  SinkRig rig({{"type", "redis"}, {"path", server.uri("out")}, {"write_retry_s", "1"}});
  rig.stage->open(rig.ctx);
  rig.deliver(0);
  server.stop();
  CHECK_THROWS_WITH(rig.deliver(4), Contains("127.0.0.1:" + std::to_string(server.port())) &&
                                        Contains("stream 'out'") && Contains("gave up"));
  CHECK_THAT(rig.stage->health(), Contains("gave up"));
  server.start();
  rig.deliver(8);
  CHECK(rig.stage->health().empty());
  const auto records = records_of(server, "out");  // not persistent: only what came after the restart
  REQUIRE(records.size() == 4);
  CHECK(records[0]["sequence"] == 8);
}

TEST_CASE("a redone input's records are appended once each, by any writer, and other options are another request", "[redis][sinks]") {
  test::RedisServer server;
  const std::map<std::string, std::string> given{{"type", "redis"}, {"path", server.uri("out")}};
  SinkRig first(given), second(given);  // two workers
  first.stage->open(first.ctx);
  second.stage->open(second.ctx);
  const std::uint32_t a = first.shared->inputs.begin(0, "/videos/a.mp4", InputKind::file, 8);
  first.deliver_input(a, 0);  // frames 0..3; then the attempt failed (its next batch did not land)
  // Redone here: all 8 frames again; only 4..7 are appended.
  const std::uint32_t again = first.shared->inputs.begin(0, "/videos/a.mp4", InputKind::file, 8);
  first.deliver_input(again, 0);
  first.deliver_input(again, 4);
  // Redone by another worker (taken over): nothing new.
  const std::uint32_t elsewhere = second.shared->inputs.begin(0, "/videos/a.mp4", InputKind::file, 8);
  second.deliver_input(elsewhere, 0);
  second.deliver_input(elsewhere, 4);
  // The same file with other options is another request: its frames are appended.
  const std::uint32_t cropped = second.shared->inputs.begin(0, "/videos/a.mp4", InputKind::file, 8, "fit=crop");
  second.deliver_input(cropped, 0);
  const auto records = records_of(server, "out");
  std::map<std::string, std::vector<int>> frames;  // options -> input_frame of each record
  for (const auto& r : records) {
    CHECK(r["input"] == "/videos/a.mp4");
    frames[r.value("input_options", std::string())].push_back(r["input_frame"].get<int>());
  }
  CHECK(frames[""] == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(frames["fit=crop"] == std::vector<int>{0, 1, 2, 3});
  CHECK(frames.size() == 2);
  first.stage->close(first.ctx);
  second.stage->close(second.ctx);
}

TEST_CASE("a batch whose connection was cut around its sending lands exactly once", "[redis][sinks]") {
  test::RedisServer server;
  for (const auto cut : {CuttingProxy::Cut::request, CuttingProxy::Cut::reply}) {
    const std::string stream = cut == CuttingProxy::Cut::request ? "cut-request" : "cut-reply";
    CuttingProxy proxy(server.port(), cut);
    SinkRig rig({{"type", "redis"}, {"path", proxy.uri(stream)}});
    rig.stage->open(rig.ctx);
    rig.deliver(0);  // cut, then reconnected and resent: records the server has already are not appended again
    CHECK(proxy.cut_done());
    rig.deliver(4);
    const auto records = records_of(server, stream);
    REQUIRE(records.size() == 8);
    for (std::size_t i = 0; i < records.size(); ++i) CHECK(records[i]["sequence"] == i);
    rig.stage->close(rig.ctx);
  }
}

namespace {

// A CA, a server certificate for the IP address 127.0.0.1 and a client certificate, both signed by the CA, made
// with the openssl command in a temp dir.
struct TestPki {
  test::TempDir dir{"sluice-pki"};
  std::string file(const char* name) const { return (dir.path / name).string(); }
  test::RedisServer::Tls tls() const {
    return {file("ca.pem"), file("server.pem"), file("server.key"), file("client.pem"), file("client.key")};
  }
  TestPki() {
    const std::string d = dir.path.string();
    const std::string key = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    const std::string script =
        "cd '" + d + "' && printf 'subjectAltName=IP:127.0.0.1\\n' > server.ext"
        " && openssl req -x509" + key + " -keyout ca.key -out ca.pem -days 2 -subj /CN=sluice-test-ca"
        " && openssl req" + key + " -keyout server.key -out server.csr -subj /CN=sluice-test-server"
        " && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile server.ext"
        " -out server.pem"
        " && openssl req" + key + " -keyout client.key -out client.csr -subj /CN=sluice-test-client"
        " && openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out client.pem";
    if (std::system(("(" + script + ") > '" + d + "/openssl.log' 2>&1").c_str()) != 0)
      throw std::runtime_error("openssl could not make the test certificates (is it installed? scripts/setup.sh)");
  }
};

}  // namespace

TEST_CASE("rediss:// checks the server's certificate and name, sends a client certificate, and carries the sink and the source", "[redis]") {
  for (const char* v : {"SLUICE_REDIS_TLS_CA_FILE", "SLUICE_REDIS_TLS_CERT_FILE", "SLUICE_REDIS_TLS_KEY_FILE"}) ::unsetenv(v);
  const TestPki pki;
  test::RedisServer server(false, pki.tls());
  const std::string where = "127.0.0.1:" + std::to_string(server.port());
  CHECK(redis::parse_redis_uri(server.uri("s")).endpoint.tls);

  SECTION("commands, pipelines and replies larger than a TLS record go through") {
    redis::Client c(server.endpoint(), "s");
    CHECK(c.command({"PING"}).str == "PONG");
    const std::string big(300000, 'x');
    c.checked({"SET", "big", big});
    CHECK(c.checked({"GET", "big"}).str == big);
    std::vector<std::vector<std::string>> many;
    for (int i = 0; i < 200; ++i) many.push_back({"INCR", "n"});
    const auto replies = c.pipeline(many);
    REQUIRE(replies.size() == 200);
    CHECK(replies.back().integer == 200);
    CHECK_THAT(c.describe(), Contains("(TLS)"));
  }
  SECTION("a server whose certificate no trusted CA signed is refused, naming it") {
    redis::Endpoint e = server.endpoint();
    e.tls_ca_file = pki.file("client.pem");  // a certificate, but not the one that signed the server's
    redis::Client c(e);
    CHECK_THROWS_WITH(c.command({"PING"}), Contains(where) && Contains("certificate is not trusted"));
    CHECK_FALSE(c.connected());
  }
  SECTION("a certificate that does not name the host is refused") {
    redis::Endpoint e = server.endpoint();
    e.host = "127.0.0.2";  // the same server, but its certificate names only 127.0.0.1
    redis::Client c(e);
    CHECK_THROWS_WITH(c.command({"PING"}), Contains("127.0.0.2:") && Contains("certificate is not trusted") &&
                                              Contains("IP address mismatch"));
  }
  SECTION("without a client certificate the server refuses the connection") {
    redis::Endpoint e = server.endpoint();
    e.tls_cert_file.clear();
    e.tls_key_file.clear();
    redis::Client c(e);
    CHECK_THROWS_WITH(c.command({"PING"}), Contains(where));
    CHECK_FALSE(c.connected());
    e.tls_cert_file = pki.file("client.pem");  // a certificate without its key
    redis::Client half(e);
    CHECK_THROWS_WITH(half.command({"PING"}), Contains("needs both a certificate and a key"));
  }
  SECTION("rediss:// to a plain server fails at the handshake, and redis:// to a TLS one gets no reply") {
    test::RedisServer plain;
    redis::Endpoint e = plain.endpoint();
    e.tls = true;
    e.tls_ca_file = pki.file("ca.pem");
    e.io_timeout_s = 1;  // a plain server waits for the end of a line that the TLS hello never sends
    redis::Client c(e);
    CHECK_THROWS_WITH(c.command({"PING"}), Contains("TLS: handshake failed"));
    redis::Endpoint cleartext = server.endpoint();
    cleartext.tls = false;
    cleartext.io_timeout_s = 1;
    redis::Client d(cleartext);
    CHECK_THROWS_AS(d.command({"PING"}), RedisError);
  }
  SECTION("the redis sink and the Redis source work over TLS with the files from the environment") {
    ::setenv("SLUICE_REDIS_TLS_CA_FILE", pki.file("ca.pem").c_str(), 1);
    ::setenv("SLUICE_REDIS_TLS_CERT_FILE", pki.file("client.pem").c_str(), 1);
    ::setenv("SLUICE_REDIS_TLS_KEY_FILE", pki.file("client.key").c_str(), 1);
    std::string yaml = test::chain_yaml("cpu", "bgr8", 21, "x");
    yaml.replace(yaml.find("type: jsonl\n    path: x"), 23, "type: redis\n    path: " + server.uri("results"));
    CHECK(test::run_to_end(test::plan_from(yaml)).delivered == 21);

    redis::Client c(server.endpoint());
    CHECK(c.checked({"XLEN", "results"}).integer == 21);
    c.checked({"XADD", "jobs", "*", "input", "/jobs/a.mp4"});
    auto feed = open_redis_feed(parse_redis_source_uri(server.uri("jobs") + "?group=g&consumer=w&until_empty=true"));
    FedInput input;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (input.uri.empty() && std::chrono::steady_clock::now() < until)
      if (feed->next(input, std::chrono::milliseconds(100)) == InputFeed::Poll::ended) break;
    CHECK(input.uri == "/jobs/a.mp4");
    feed->settled({1, input.uri, InputOutcome::done, {}});
    while (std::chrono::steady_clock::now() < until && feed->next(input, std::chrono::milliseconds(100)) != InputFeed::Poll::ended) {}
    feed.reset();
    CHECK(c.checked({"HGET", "jobs:sluice-stats:g", "done"}).str == "1");
    for (const char* v : {"SLUICE_REDIS_TLS_CA_FILE", "SLUICE_REDIS_TLS_CERT_FILE", "SLUICE_REDIS_TLS_KEY_FILE"}) ::unsetenv(v);
  }
}
