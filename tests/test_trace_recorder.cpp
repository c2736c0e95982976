// The `trace` request's one recorder (daemon/trace_recorder.hpp, issue 33): concurrent traces never cut each
// other short behind a reply that claims the seconds asked for.
#include <catch2/catch.hpp>

#include <chrono>
#include <vector>

#include "daemon/trace_recorder.hpp"

using namespace sluice;
using namespace std::chrono_literals;
namespace asio = boost::asio;

TEST_CASE("trace recorder: one recording at a time, each reply says what it got", "[control][availability][trace]") {
  asio::io_context io;
  TraceRecorder recorder(io);
  std::vector<std::chrono::nanoseconds> begun;
  std::vector<nlohmann::json> replies(4);
  auto begin = [&](std::chrono::nanoseconds d) { begun.push_back(d); };
  auto finish = [](double s) { return [s] { return nlohmann::json{{"ok", true}, {"seconds", s}}; }; };
  auto into = [&](std::size_t i) { return [&, i](nlohmann::json r) { replies[i] = std::move(r); }; };

  recorder.record(0.4, PeerClass::tcp, begin, finish(0.4), into(0));
  // Another TCP peer (or a local reader's equal) is refused at once: the first keeps its 0.4 s.
  recorder.record(0.1, PeerClass::tcp, begin, finish(0.1), into(1));
  REQUIRE(replies[1].is_object());
  CHECK(replies[1]["ok"] == false);
  CHECK(replies[1]["error"].get<std::string>().find("another trace is recording") != std::string::npos);
  CHECK(begun.size() == 1);
  io.run_for(600ms);
  CHECK(replies[0] == nlohmann::json{{"ok", true}, {"seconds", 0.4}});
  CHECK_FALSE(recorder.recording());

  // An admin outranks a TCP peer: the TCP peer's trace ends at once with an error saying so, never a reply
  // that claims seconds it did not record.
  io.restart();
  recorder.record(10, PeerClass::tcp, begin, finish(10), into(2));
  recorder.record(0.1, PeerClass::admin, begin, finish(0.1), into(3));
  REQUIRE(replies[2].is_object());
  CHECK(replies[2]["ok"] == false);
  CHECK(replies[2]["error"].get<std::string>().find("of the 10.0 s asked for: admins outrank tcp peers") !=
        std::string::npos);
  io.run_for(400ms);
  CHECK(replies[3] == nlohmann::json{{"ok", true}, {"seconds", 0.1}});
  CHECK(begun.size() == 3);
}
