// The control protocol's untrusted edge (daemon/control_protocol.hpp), UTF-8 repair (runtime/utf8.hpp) and
// the access policy (daemon/access_policy.hpp): every attack line of issue 11 and every row of
// docs/THREAT_MODEL.md that can be decided without a daemon.
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/pipeline_spec.hpp"
#include "daemon/access_policy.hpp"
#include "daemon/control_protocol.hpp"
#include "daemon/metrics.hpp"
#include "runtime/utf8.hpp"
#include "temp_dir.hpp"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

const std::string kReplacement = "\xEF\xBF\xBD";

// Each of these once ended sluiced (an nlohmann exception escaping io_context::run()).
const std::vector<std::string> kAttackLines = {
    "\xff",
    "{\"request\":\"\xc3\x28\"}",
    "{\"\xe9\":1}",
    "{\"request\":\"version\",\"x\":\"\x80\"}",
    "1e400",
    "{\"request\":\"status\",\"x\":-1e400}",
    "{\"request\":\"trace\",\"seconds\":1e999}",
};

ControlRequest parse_ok(const std::string& line) {
  const ParsedLine p = parse_request_line(line);
  INFO(line << " -> " << p.error);
  REQUIRE(p.request);
  return *p.request;
}

std::string parse_error(const std::string& line) {
  const ParsedLine p = parse_request_line(line);
  INFO(line);
  REQUIRE_FALSE(p.request);
  REQUIRE_FALSE(p.error.empty());
  CHECK(valid_utf8(p.error));
  return p.error;
}

// A value within `a`'s kind and bounds.
nlohmann::json valid_value(const Argument& a) {
  switch (a.kind) {
    case ArgumentKind::boolean:
      return true;
    case ArgumentKind::string:
      return "x";
    case ArgumentKind::number:
      break;
  }
  return std::isfinite(a.max) ? a.max : std::isfinite(a.min) ? a.min + 1 : 0.0;
}

PeerCredentials unix_peer(uid_t uid) {
  PeerCredentials p;
  p.known = true;
  p.uid = uid;
  p.gid = 4242;
  p.remote = "pid 1 uid " + std::to_string(uid);
  return p;
}

PeerCredentials tcp_peer() {
  PeerCredentials p;
  p.tcp = true;
  p.remote = "tcp 127.0.0.1:5555";
  return p;
}

}  // namespace

TEST_CASE("utf8: valid text passes unchanged, ill-formed sequences become U+FFFD", "[control][utf8]") {
  CHECK(valid_utf8(""));
  CHECK(valid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));
  CHECK(to_valid_utf8("caf\xC3\xA9") == "caf\xC3\xA9");
  CHECK_FALSE(valid_utf8("caf\xE9"));
  CHECK(to_valid_utf8("caf\xE9.mp4") == "caf" + kReplacement + ".mp4");
  CHECK(to_valid_utf8("\xC3\x28") == kReplacement + "(");
  CHECK(to_valid_utf8("\xC0\xAF") == kReplacement + kReplacement);        // overlong
  CHECK(to_valid_utf8("\xED\xA0\x80") == kReplacement + kReplacement + kReplacement);  // surrogate
  CHECK(to_valid_utf8("\xF4\x90\x80\x80").find("\xF4") == std::string::npos);          // > U+10FFFF
  CHECK(to_valid_utf8("\xE2\x82") == kReplacement);                       // truncated: one maximal subpart
  CHECK(to_valid_utf8("\xE2\x82x") == kReplacement + "x");
  for (const auto& s : kAttackLines) CHECK(valid_utf8(to_valid_utf8(s)));
}

TEST_CASE("control protocol: every attack line is an error, never an exception", "[control][protocol]") {
  for (const auto& line : kAttackLines) {
    const std::string error = parse_error(line);
    CHECK(error.find('\xff') == std::string::npos);
    const std::string reply = serialize_reply(error_reply(error));
    CHECK(valid_utf8(reply));
    CHECK(reply.back() == '\n');
    CHECK(reply.find('\n') == reply.size() - 1);
  }
  CHECK(parse_error("[1,2]").find("object") != std::string::npos);
  CHECK(parse_error("{}").find("'request'") != std::string::npos);
  CHECK(parse_error("{\"request\":7}").find("'request'") != std::string::npos);
  CHECK(parse_error("{\"request\":\"explode\"}").find("unknown request 'explode'") != std::string::npos);
  CHECK(parse_error("{\"request\":\"status\",\"token\":5}").find("'token'") != std::string::npos);
  CHECK(parse_error(std::string(100000, '[')).find("malformed") != std::string::npos);
}

TEST_CASE("control protocol: typed arguments", "[control][protocol]") {
  CHECK(parse_ok(R"({"request":"version"})").kind == RequestKind::version);
  CHECK(parse_ok(R"({"request":"status","extra":{"a":[1,2]}})").kind == RequestKind::status);
  CHECK(parse_ok(R"({"request":"trace","seconds":0.5})").number(arg::seconds) == 0.5);
  CHECK(parse_ok(R"({"request":"trace","seconds":60})").number(arg::seconds) == 60);
  for (const char* bad : {R"({"request":"trace"})", R"({"request":"trace","seconds":0})",
                          R"({"request":"trace","seconds":-1})", R"({"request":"trace","seconds":60.01})",
                          R"({"request":"trace","seconds":"5"})", R"({"request":"trace","seconds":1e308})"})
    CHECK(parse_error(bad).find("(0, 60]") != std::string::npos);

  const auto add = parse_ok(R"({"request":"source-add","uri":"testsrc:bars","name":"p","leaky":true,"rate_limit":2.5,"loop":false})");
  CHECK(add.kind == RequestKind::source_add);
  CHECK(add.text(arg::uri) == std::optional<std::string>("testsrc:bars"));
  CHECK(add.text(arg::name) == std::optional<std::string>("p"));
  CHECK(add.flag(arg::leaky) == std::optional<bool>(true));
  CHECK(add.flag(arg::loop) == std::optional<bool>(false));
  CHECK(add.number(arg::rate_limit) == std::optional<double>(2.5));
  CHECK(parse_ok(R"({"request":"source-add","uri":"testsrc:bars","rate_limit":0})").number(arg::rate_limit) == 0.0);
  CHECK(parse_error(R"({"request":"source-add","uri":"testsrc:bars","rate_limit":-1})").find(">= 0") != std::string::npos);
  CHECK(parse_ok(R"({"request":"source-add","uri":"testsrc:bars","latency_budget_ms":40})").number(arg::latency_budget_ms) == 40.0);
  CHECK_FALSE(parse_ok(R"({"request":"source-add","uri":"testsrc:bars"})").number(arg::latency_budget_ms));
  for (const char* bad : {R"({"request":"source-add","uri":"testsrc:bars","latency_budget_ms":-1})",
                          R"({"request":"source-add","uri":"testsrc:bars","latency_budget_ms":1e300})",
                          R"({"request":"source-add","uri":"testsrc:bars","latency_budget_ms":"20"})"})
    CHECK(parse_error(bad).find("'latency_budget_ms'") != std::string::npos);
  CHECK(parse_error(R"({"request":"source-add","uri":"testsrc:bars","name":5})").find("'name'") != std::string::npos);
  CHECK(parse_error(R"({"request":"source-add","uri":"testsrc:bars","name":""})").find("'name'") != std::string::npos);
  CHECK(parse_error(R"({"request":"source-add","uri":"testsrc:bars","leaky":"yes"})").find("'leaky'") != std::string::npos);
  CHECK(parse_error(R"({"request":"source-add","uri":"a\u0000b"})").find("uri") != std::string::npos);
  CHECK(parse_error(R"({"request":"source-add"})").find("uri") != std::string::npos);
  CHECK(parse_ok(R"({"request":"source-remove","source":"cam"})").text(arg::source) == std::optional<std::string>("cam"));
  CHECK(parse_error(R"({"request":"source-remove","source":3})").find("'source'") != std::string::npos);
  CHECK_FALSE(parse_ok(R"({"request":"reload"})").text(arg::path));
  CHECK(parse_ok(R"({"request":"reload","path":"/x.yaml"})").text(arg::path) == std::optional<std::string>("/x.yaml"));
  CHECK(parse_error(R"({"request":"reload","path":["x"]})").find("'path'") != std::string::npos);
  CHECK(parse_ok(R"({"request":"stop","token":"abc"})").token == std::optional<std::string>("abc"));
  CHECK(is_mutating(RequestKind::reload));
  CHECK_FALSE(is_mutating(RequestKind::trace));
}

TEST_CASE("control protocol: a key given twice is refused, whichever value comes last", "[control][protocol]") {
  // Issue 33: the last value used to win, so this stopped the daemon.
  CHECK(parse_error(R"({"request":"status","request":"stop"})") ==
        "duplicate key 'request': each key may appear once in a request");
  CHECK(parse_error(R"({"request":"trace","seconds":1,"seconds":60})").find("duplicate key 'seconds'") !=
        std::string::npos);
  CHECK(parse_error(R"({"request":"stop","token":"a","token":"b"})").find("duplicate key 'token'") != std::string::npos);
  CHECK(parse_error(R"({"request":"status","extra":{"a":1,"a":2}})").find("duplicate key 'a'") != std::string::npos);
  // The same key in different objects, or in objects inside an array, is not a duplicate.
  CHECK(parse_ok(R"({"request":"status","x":{"request":1},"y":[{"a":1},{"a":2}]})").kind == RequestKind::status);
  // A duplicate key that is not UTF-8 is shown with U+FFFD, and a long one is cut.
  CHECK(parse_error("{\"request\":\"status\",\"\xe9\":1,\"\xe9\":2}").find("malformed") != std::string::npos);
  const std::string long_key(500, 'k');
  const std::string error = parse_error(R"({"request":"status",")" + long_key + R"(":1,")" + long_key + R"(":2})");
  CHECK(error.size() < 200);
}

TEST_CASE("request table: names, mutating flags and lookups agree", "[control][protocol]") {
  std::set<std::string_view> names;
  for (const auto& spec : kRequests) {
    INFO(spec.name);
    CHECK(names.insert(spec.name).second);
    REQUIRE(find_request(spec.name) == &spec);
    CHECK(request_name(spec.kind) == spec.name);
    CHECK_FALSE(spec.help.empty());
    std::set<std::string_view> keys{arg::token.key};
    for (const Argument* a : spec.arguments) CHECK(keys.insert(a->key).second);  // token is every request's
  }
  CHECK_FALSE(find_request("Status"));
  CHECK_FALSE(find_request(""));
  // Read-only over TCP without a token, and what docs/THREAT_MODEL.md promises a reader.
  CHECK(request_list(/*read_only=*/true) == "version, status, sources, trace");
  CHECK(request_list() == "version, status, sources, trace, pause, resume, reload, stop, source-add, source-remove");
}

TEST_CASE("request table: the parser checks every argument the table declares", "[control][protocol]") {
  for (const auto& spec : kRequests) {
    nlohmann::json minimal = {{"request", spec.name}};
    for (const Argument* a : spec.arguments)
      if (a->required) minimal[std::string(a->key)] = valid_value(*a);
    INFO(minimal.dump());
    CHECK(parse_ok(minimal.dump()).kind == spec.kind);
    for (const Argument* a : spec.arguments) {
      const std::string key(a->key);
      INFO(key);
      if (a->required) {
        nlohmann::json without = minimal;
        without.erase(key);
        CHECK(parse_error(without.dump()).find("'" + key + "'") != std::string::npos);
      }
      nlohmann::json wrong = minimal;
      wrong[key] = a->kind == ArgumentKind::string ? nlohmann::json(5) : nlohmann::json("5");
      CHECK(parse_error(wrong.dump()).find("'" + key + "'") != std::string::npos);
      if (a->kind == ArgumentKind::number) {
        nlohmann::json low = minimal;
        low[key] = a->min_exclusive ? a->min : a->min - 1;
        if (std::isfinite(a->min)) CHECK(parse_error(low.dump()).find("'" + key + "'") != std::string::npos);
        nlohmann::json high = minimal;
        high[key] = std::isfinite(a->max) ? a->max * 2 + 1 : 1e308;
        if (std::isfinite(a->max)) CHECK(parse_error(high.dump()).find("'" + key + "'") != std::string::npos);
      }
      if (a->kind == ArgumentKind::string) {
        nlohmann::json empty = minimal;
        empty[key] = "";
        CHECK(parse_error(empty.dump()).find("'" + key + "' must not be empty") != std::string::npos);
        nlohmann::json longer = minimal;
        longer[key] = std::string(a->max_bytes + 1, 'a');
        CHECK(parse_error(longer.dump()).find("longer than") != std::string::npos);
      }
    }
  }
}

TEST_CASE("request table: what a client builds, the service parses back", "[control][protocol]") {
  const auto add = parse_ok(RequestBuilder(RequestKind::source_add)
                                .set(arg::uri, "testsrc:bars")
                                .set(arg::name, std::string("cam 1"))
                                .set(arg::leaky, false)
                                .set(arg::rate_limit, 25.0)
                                .set(arg::latency_budget_ms, 12.5)
                                .body()
                                .dump());
  CHECK(add.kind == RequestKind::source_add);
  CHECK(add.text(arg::uri) == std::optional<std::string>("testsrc:bars"));
  CHECK(add.text(arg::name) == std::optional<std::string>("cam 1"));
  CHECK(add.flag(arg::leaky) == std::optional<bool>(false));
  CHECK(add.number(arg::rate_limit) == 25.0);
  CHECK(add.number(arg::latency_budget_ms) == 12.5);
  CHECK_FALSE(add.flag(arg::loop));
  // Whole numbers go out as integers (older daemons and scripts compare them so).
  CHECK(RequestBuilder(RequestKind::trace).set(arg::seconds, 1.0).body().dump() == R"({"request":"trace","seconds":1})");
  CHECK(RequestBuilder(RequestKind::trace).set(arg::seconds, 0.5).body().dump() == R"({"request":"trace","seconds":0.5})");
  for (const auto& spec : kRequests) {
    nlohmann::json body = RequestBuilder(spec.kind).body();
    for (const Argument* a : spec.arguments)
      if (a->required) body[std::string(a->key)] = valid_value(*a);
    CHECK(parse_ok(body.dump()).kind == spec.kind);
  }
}

TEST_CASE("request table: a handler asking for an argument its request lacks is a logic error", "[control][protocol]") {
  const auto remove = parse_ok(R"({"request":"source-remove","source":"cam"})");
  CHECK_THROWS_AS(remove.text(arg::uri), std::logic_error);     // source-add's
  CHECK_THROWS_AS(remove.number(arg::source), std::logic_error);  // its own, as the wrong kind
  CHECK_THROWS_AS(parse_ok(R"({"request":"status"})").number(arg::seconds), std::logic_error);
}

TEST_CASE("request table: docs/protocol.md lists every request with its arguments", "[control][protocol]") {
  std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/docs/protocol.md");
  REQUIRE(in);
  std::map<std::string, std::string> rows;  // request -> its arguments column, from the table of requests
  bool in_table = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| request | arguments |", 0) == 0) in_table = true;
    if (line.empty()) in_table = false;
    if (!in_table || line.rfind("| `", 0) != 0) continue;
    const auto end = line.find('`', 3);
    const auto bar = line.find('|', end);
    const auto next = line.find('|', bar + 1);
    if (end == std::string::npos || bar == std::string::npos || next == std::string::npos) continue;
    rows[line.substr(3, end - 3)] = line.substr(bar + 1, next - bar - 1);
  }
  for (const auto& spec : kRequests) {
    INFO(spec.name);
    REQUIRE(rows.count(std::string(spec.name)));
    for (const Argument* a : spec.arguments)
      CHECK(rows[std::string(spec.name)].find("`" + std::string(a->key) + "`") != std::string::npos);
  }
}

TEST_CASE("control protocol: replies are one line of valid UTF-8 whatever they hold", "[control][protocol]") {
  nlohmann::json reply = {{"ok", true}, {"sources", {{{"name", "caf\xE9"}, {"uri", "/in/caf\xE9.mp4"}}}}};
  const std::string line = serialize_reply(reply);
  CHECK(valid_utf8(line));
  CHECK(line.find("caf" + kReplacement) != std::string::npos);
  CHECK(line.find('\n') == line.size() - 1);
  const auto back = nlohmann::json::parse(line);
  // The shown name is exactly to_valid_utf8 of the real one: a later request can name the source by it.
  CHECK(back["sources"][0]["name"] == to_valid_utf8("caf\xE9"));
  nlohmann::json bad_key = {{"caf\xE9", 1}};
  CHECK(valid_utf8(serialize_reply(bad_key)));
  CHECK(serialize_reply({{"ok", true}, {"s", "plain"}}) == "{\"ok\":true,\"s\":\"plain\"}\n");
}

TEST_CASE("control protocol: a reload error keeps path:line:col but no excerpt of the file", "[control][protocol]") {
  const std::string shadow =
      "/etc/shadow:18:1: unknown top-level key '_apt:*:20228:0:99999:7::' (known: name, stages)";
  const std::string redacted = redact_file_excerpts(shadow);
  CHECK(redacted.rfind("/etc/shadow:18:1: unknown top-level key", 0) == 0);
  CHECK(redacted.find("20228") == std::string::npos);
  CHECK(redacted.find("_apt") == std::string::npos);
  CHECK(redact_file_excerpts("/x/p.yaml:3:10: stage \"dec\xE9\" key 'fps': expected a number").find("dec") == std::string::npos);
  CHECK(redact_file_excerpts("/x/p.yaml:1:1: value 'unterminated secret").find("secret") == std::string::npos);
  CHECK(valid_utf8(redact_file_excerpts("/x/\xE9.yaml:1:1: bad")));
}

// Issue 33: an excerpt holding a quote ended the redaction early and the rest of it came back to the peer.
TEST_CASE("control protocol: no part of an excerpt survives redaction, whatever quotes it holds", "[control][protocol]") {
  const std::string secret = "s3cr3t_LEAKED";
  // Each shape is a value or key taken from the file, as the config loader quotes it.
  const std::vector<std::string> excerpts = {
      "it's_" + secret,                       // one quote inside
      "a'b'" + secret,                         // two: balanced pairs that are not the excerpt's
      secret + "'",                            // a quote at the end
      "'" + secret,                            // and at the start
      "x\" " + secret + " \"y",                // the other quote kind inside
      "mixed'\"" + secret + "\"'",             // both kinds
      "it\\'s_" + secret,                      // backslash-escaped quote
      "esc\\\\'" + secret,                     // an escaped backslash, then a quote
      "a' (known: name, stages) '" + secret,   // what looks like sluice's own words
      "p.yaml:9:9: '" + secret,                // what looks like a location prefix
      "\xE9'" + secret + "\xFF",               // not UTF-8 around a quote
  };
  for (const std::string& e : excerpts) {
    for (const std::string& message :
         {"/etc/sluice/x.yaml:18:1: unknown top-level key '" + e + "' (known: name, stages)",
          "/etc/sluice/x.yaml:4:7: stage \"" + e + "\" (sink): key 'path': expected a string, got '" + e + "'",
          "cannot build the new pipeline: /etc/sluice/x.yaml:2:3: value '" + e + "': not a number",
          "unknown key '" + e + "'"}) {
      const std::string redacted = redact_file_excerpts(message);
      INFO(message << " -> " << redacted);
      CHECK(redacted.find("LEAKED") == std::string::npos);
      CHECK(redacted.find("s3cr") == std::string::npos);
      CHECK(redacted.find(secret.substr(4)) == std::string::npos);
      CHECK(valid_utf8(redacted));
    }
  }
  // An excerpt cut short (no closing quote) takes everything after it, whatever quotes it holds.
  for (const std::string& cut : {"value '" + secret, "value 'a'b'" + secret, "value 'it's " + secret + "'x"})
    CHECK(redact_file_excerpts("/x.yaml:1:1: " + cut).find("3t_") == std::string::npos);
  // The location stays, and sluice's own words around the quotes (when they pair up).
  CHECK(redact_file_excerpts("/etc/sluice/x.yaml:18:1: unknown top-level key 'it's_" + secret + "' (known: name, stages)") ==
        "/etc/sluice/x.yaml:18:1: unknown top-level key '\xE2\x80\xA6'");
  CHECK(redact_file_excerpts("/x.yaml:6:5: stage 'infer' (infer): key 'a''b': not a valid ONNX model (truncated?)") ==
        "/x.yaml:6:5: stage '\xE2\x80\xA6': not a valid ONNX model (truncated?)");
  CHECK(redact_file_excerpts("outputs of the new pipeline: /x.yaml:3:4: stage 'a' (sink): path 'b'") ==
        "outputs of the new pipeline: /x.yaml:3:4: stage '\xE2\x80\xA6'");
  CHECK(redact_file_excerpts("/x.yaml:1:2: bad") == "/x.yaml:1:2: bad");
  // A location-like text inside an excerpt is not taken for the prefix.
  CHECK(redact_file_excerpts("unknown key 'a:1:2:" + secret + "'").find("a:1:2") == std::string::npos);
}

TEST_CASE("metrics: label values that are not UTF-8 are shown with U+FFFD", "[control][metrics]") {
  CHECK(prometheus_escape_label("caf\xE9\"") == "caf" + kReplacement + "\\\"");
  CHECK(valid_utf8(prometheus_escape_help("x\xFF")));
}

TEST_CASE("access policy: tokens", "[control][policy]") {
  CHECK(tokens_equal("0123456789abcdef", "0123456789abcdef"));
  CHECK_FALSE(tokens_equal("0123456789abcdef", "0123456789abcdeX"));
  CHECK_FALSE(tokens_equal("0123456789abcdef", "0123456789abcde"));
  CHECK_FALSE(tokens_equal("0123456789abcdef", "0123456789abcdef0"));
  CHECK_FALSE(tokens_equal("0123456789abcdef", ""));

  test::TempDir dir("sluice-token");
  const std::string file = (dir.path / "token").string();
  std::ofstream(file) << "s3cret-s3cret-s3cret\n";
  ::chmod(file.c_str(), 0644);
  try {
    load_control_token(file);
    FAIL("a token file others may read was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find(file) != std::string::npos);
    CHECK(std::string(e.what()).find("mode 0644") != std::string::npos);
  }
  ::chmod(file.c_str(), 0600);
  CHECK(load_control_token(file) == "s3cret-s3cret-s3cret");
  std::ofstream(file) << "short\n";
  CHECK_THROWS_WITH(load_control_token(file), Catch::Contains("fewer than 16"));
  CHECK_THROWS_WITH(load_control_token(dir.path.string()), Catch::Contains("not a regular file"));
  const std::string link = (dir.path / "link").string();
  fs::create_symlink(file, link);
  CHECK_THROWS(load_control_token(link));  // O_NOFOLLOW: the file itself, not where a link points
  CHECK_THROWS(load_control_token((dir.path / "missing").string()));
}

TEST_CASE("access policy: who may mutate", "[control][policy]") {
  AccessSettings open_settings;
  const AccessPolicy open_unix(open_settings);
  CHECK_FALSE(open_unix.may_mutate(unix_peer(54321), std::nullopt));          // no allow list: any UNIX peer
  CHECK(open_unix.may_mutate(tcp_peer(), std::nullopt));                      // TCP without a token: read-only
  CHECK(open_unix.may_mutate(tcp_peer(), std::string("anything-at-all-16")));
  CHECK(open_unix.check_token(tcp_peer(), std::string("guess")));             // no token configured: refused
  CHECK_FALSE(open_unix.check_token(tcp_peer(), std::nullopt));               // reads need none
  CHECK_FALSE(open_unix.check_token(unix_peer(54321), std::string("ignored")));  // UNIX: credentials, not tokens

  AccessSettings listed;
  listed.allow_users = {"no-such-user-xyz"};
  listed.control_token = "0123456789abcdef";
  const AccessPolicy policy(listed);
  CHECK_FALSE(policy.may_mutate(unix_peer(getuid()), std::nullopt));  // sluiced's own user
  CHECK_FALSE(policy.may_mutate(unix_peer(0), std::nullopt));         // root
  CHECK(policy.may_mutate(unix_peer(54321), std::nullopt));           // not listed
  PeerCredentials unknown;
  unknown.remote = "peer";
  CHECK(policy.may_mutate(unknown, std::nullopt));
  CHECK(policy.may_mutate(tcp_peer(), std::nullopt));                                  // no token sent
  CHECK(*policy.may_mutate(tcp_peer(), std::string("0123456789abcdeX")) == "permission denied: wrong token");
  CHECK_FALSE(policy.may_mutate(tcp_peer(), std::string("0123456789abcdef")));
  CHECK(policy.check_token(tcp_peer(), std::string("wrong")));
  CHECK_FALSE(policy.check_token(tcp_peer(), std::string("0123456789abcdef")));
}

TEST_CASE("access policy: a connection's class (its client budget)", "[control][policy]") {
  AccessSettings open_settings;
  const AccessPolicy open_unix(open_settings);
  CHECK(open_unix.peer_class(unix_peer(54321)) == PeerClass::admin);  // no allow list: every UNIX peer
  CHECK(open_unix.peer_class(tcp_peer()) == PeerClass::tcp);

  AccessSettings listed;
  listed.allow_users = {"no-such-user-xyz"};
  listed.control_token = "0123456789abcdef";
  const AccessPolicy policy(listed);
  CHECK(policy.peer_class(unix_peer(getuid())) == PeerClass::admin);
  CHECK(policy.peer_class(unix_peer(0)) == PeerClass::admin);
  CHECK(policy.peer_class(unix_peer(54321)) == PeerClass::reader);  // not listed: reads only
  CHECK(policy.peer_class(tcp_peer()) == PeerClass::tcp);           // a token grants requests, never a class
  CHECK(PeerClass::admin > PeerClass::reader);
  CHECK(PeerClass::reader > PeerClass::tcp);
}

TEST_CASE("access policy: a request's check follows the table's mutating flag", "[control][policy]") {
  AccessSettings open_settings;
  const AccessPolicy open_tcp(open_settings);  // no token configured: TCP peers may only read
  AccessSettings listed;
  listed.allow_users = {"no-such-user-xyz"};
  const AccessPolicy allow_list(listed);
  for (const auto& spec : kRequests) {
    INFO(spec.name);
    CHECK(open_tcp.check_request(tcp_peer(), spec.kind, std::nullopt).has_value() == spec.mutating);
    CHECK(allow_list.check_request(unix_peer(54321), spec.kind, std::nullopt).has_value() == spec.mutating);
    CHECK_FALSE(allow_list.check_request(unix_peer(getuid()), spec.kind, std::nullopt));
    CHECK(open_tcp.check_request(tcp_peer(), spec.kind, std::string("a-guessed-token-16")));  // a guess: never
  }
  const auto why = open_tcp.check_request(tcp_peer(), RequestKind::stop, std::nullopt);
  REQUIRE(why);
  CHECK(why->find("only version, status, sources, trace are served") != std::string::npos);
}

TEST_CASE("access policy: reload only the configured file or files under config roots", "[control][policy]") {
  test::TempDir dir("sluice-roots");
  const fs::path conf = dir.path / "etc", other = dir.path / "other";
  fs::create_directories(conf / "more");
  fs::create_directories(other);
  const std::string configured = dir.touch("etc/pipeline.yaml");
  const std::string under = dir.touch("etc/more/b.yaml");
  const std::string outside = dir.touch("other/c.yaml");
  fs::create_symlink(outside, conf / "escape.yaml");

  AccessSettings s;
  s.config_file = configured;
  std::string resolved;
  const AccessPolicy only_file(s);
  CHECK_FALSE(only_file.check_reload_path(configured, resolved));
  CHECK(resolved == fs::canonical(configured).string());
  auto why = only_file.check_reload_path(under, resolved);
  REQUIRE(why);
  CHECK(why->find("--config-root") != std::string::npos);
  CHECK(only_file.check_reload_path("/etc/shadow", resolved));

  s.config_roots = {conf.string()};
  const AccessPolicy rooted(s);
  CHECK_FALSE(rooted.check_reload_path(under, resolved));
  CHECK(resolved == fs::canonical(under).string());
  CHECK(rooted.check_reload_path(outside, resolved));
  CHECK(rooted.check_reload_path((conf / "escape.yaml").string(), resolved));          // symlink out
  CHECK(rooted.check_reload_path((conf / "more/../../other/c.yaml").string(), resolved));  // '..'
  CHECK(rooted.check_reload_path("/etc/shadow", resolved));
  CHECK(rooted.check_reload_path(conf.string() + "x/a.yaml", resolved));  // a sibling sharing the prefix

  s.config_roots = {(dir.path / "missing").string()};
  CHECK_THROWS_AS(AccessPolicy(s), std::invalid_argument);
  s.config_roots = {"relative/dir"};
  CHECK_THROWS_AS(AccessPolicy(s), std::invalid_argument);
}

TEST_CASE("access policy: source-add URIs", "[control][policy]") {
  test::TempDir dir("sluice-inputs");
  fs::create_directories(dir.path / "in/job");
  fs::create_directories(dir.path / "secret");
  const std::string clip = dir.touch("in/clip.mp4");
  dir.touch("secret/x.mp4");
  fs::create_symlink(dir.path / "secret", dir.path / "in/link");

  AccessSettings none;
  const AccessPolicy closed(none);
  CHECK_FALSE(closed.check_source_uri("testsrc:bars"));
  auto why = closed.check_source_uri(clip);
  REQUIRE(why);
  CHECK(why->find("--input-root") != std::string::npos);
  why = closed.check_source_uri("http://127.0.0.1:9/internal");
  REQUIRE(why);
  CHECK(why->find("--allow-source-host") != std::string::npos);

  AccessSettings s;
  s.input_roots = {(dir.path / "in").string()};
  s.allow_source_hosts = {"cam1.local", "10.0.0.5:8554", "rtsp://cam2.local"};
  const AccessPolicy policy(s);
  CHECK_FALSE(policy.check_source_uri(clip));
  CHECK_FALSE(policy.check_source_uri((dir.path / "in/job").string()));
  CHECK_FALSE(policy.check_source_uri((dir.path / "in/job/*.mp4").string()));
  CHECK_FALSE(policy.check_source_uri((dir.path / "in/seq/img_%04d.png").string()));
  CHECK(policy.check_source_uri((dir.path / "in/link/x.mp4").string()));       // symlink out of the root
  CHECK(policy.check_source_uri((dir.path / "in/../secret/x.mp4").string()));  // '..'
  CHECK(policy.check_source_uri((dir.path / "secret/x.mp4").string()));
  CHECK(policy.check_source_uri("in/clip.mp4"));                               // relative
  CHECK(policy.check_source_uri("concat:/etc/passwd|x.mp4"));                   // an ffmpeg protocol, not a path
  CHECK(policy.check_source_uri("/dev/video0"));
  CHECK(policy.check_source_uri("v4l2:0"));

  CHECK_FALSE(policy.check_source_uri("rtsp://cam1.local/stream"));
  CHECK_FALSE(policy.check_source_uri("http://CAM1.local:8080/x"));
  CHECK_FALSE(policy.check_source_uri("rtsp://user:pw@10.0.0.5:8554/x"));
  CHECK(policy.check_source_uri("rtsp://10.0.0.5/x"));                  // port 554, only 8554 is allowed
  CHECK_FALSE(policy.check_source_uri("rtsp://cam2.local/x"));
  CHECK(policy.check_source_uri("http://cam2.local/x"));                // scheme limited to rtsp
  CHECK(policy.check_source_uri("http://127.0.0.1:9/internal"));
  CHECK(policy.check_source_uri("http://cam1.local@127.0.0.1/x"));      // userinfo is not the host
  CHECK(policy.check_source_uri("http://127.0.0.1#@cam1.local/x"));
  CHECK(policy.check_source_uri("http://cam1.local\\@evil/x"));

  CHECK_THROWS_AS(parse_source_host_rule("a b"), std::invalid_argument);
  CHECK(parse_source_host_rule("[::1]:80").host == "::1");
  CHECK(parse_source_host_rule("[::1]:80").port == 80);
}

TEST_CASE("access policy: a reloaded pipeline's sinks lie under the output roots", "[control][policy]") {
  test::TempDir dir("sluice-outputs");
  fs::create_directories(dir.path / "out");
  auto spec_writing_to = [&](const std::string& path) {
    return parse_pipeline("stages:\n  - kind: decode\n    pattern: bars\n  - kind: sink\n    type: jsonl\n    path: " +
                              path + "\n",
                          "p.yaml");
  };
  AccessSettings none;
  CHECK_FALSE(AccessPolicy(none).check_output_paths(spec_writing_to("/etc/cron.d/x")));  // no roots: unchecked
  AccessSettings s;
  s.output_roots = {(dir.path / "out").string()};
  const AccessPolicy policy(s);
  CHECK_FALSE(policy.check_output_paths(spec_writing_to((dir.path / "out/run.jsonl").string())));
  const auto why = policy.check_output_paths(spec_writing_to("/etc/cron.d/x"));
  REQUIRE(why);
  CHECK(why->find("--output-root") != std::string::npos);
  CHECK(policy.check_output_paths(spec_writing_to((dir.path / "out/../x.jsonl").string())));
}

TEST_CASE("access policy: a TCP listener off loopback", "[control][policy]") {
  CHECK(listen_is_loopback("127.0.0.1:0"));
  CHECK(listen_is_loopback("127.8.9.1:7000"));
  CHECK(listen_is_loopback("[::1]:7000"));
  CHECK(listen_is_loopback("localhost:7000"));
  CHECK_FALSE(listen_is_loopback(":7000"));
  CHECK_FALSE(listen_is_loopback("0.0.0.0:7000"));
  CHECK_FALSE(listen_is_loopback("[::]:7000"));
  CHECK_FALSE(listen_is_loopback("192.168.1.4:7000"));
  CHECK_FALSE(listen_is_loopback("example.com:7000"));
}
