#include <catch2/catch.hpp>

#include "runtime/job_ledger.hpp"
#include "temp_dir.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace sluice;
namespace fs = std::filesystem;

namespace {

using TempDir = sluice::test::TempDir;

void write_file(const fs::path& p, const std::string& content) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << content;
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void append_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::app);
  f << text;
}

std::vector<nlohmann::json> parse_lines(const fs::path& p) {
  std::vector<nlohmann::json> out;
  std::istringstream in(read_text(p));
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

TEST_CASE("job ledger: records survive a reopen", "[job_ledger]") {
  TempDir d;
  const fs::path a = d.path / "in" / "a.mp4", b = d.path / "in" / "b.mp4";
  fs::create_directories(a.parent_path());
  write_file(a, "0123456789");
  write_file(b, "xyz");
  const fs::path file = d.path / "state" / "jobs" / "j.ledger";  // the directories do not exist yet
  {
    JobLedger l(file);
    REQUIRE(l.resumed_count() == 0);
    REQUIRE_FALSE(l.finished(a.string()));
    REQUIRE(l.done(a.string(), 120, {"/out/a.npy", "/out/a.json"}));
    REQUIRE(l.failed(b.string(), "cannot decode: moov atom not found"));
    REQUIRE(l.finished(a.string()));
    REQUIRE(l.finished(b.string()));
    REQUIRE(l.finished_count() == 2);
    REQUIRE(l.failed_count() == 1);
    REQUIRE_FALSE(l.done(a.string(), 120, {"/out/a.npy"}));  // already recorded, unchanged: not twice
  }
  REQUIRE(fs::exists(file));
  const auto recs = parse_lines(file);
  REQUIRE(recs.size() == 2);
  REQUIRE(recs[0]["input"] == a.string());
  REQUIRE(recs[0]["size"] == 10);
  REQUIRE(recs[0]["mtime_ns"].get<std::int64_t>() > 0);
  REQUIRE(recs[0]["status"] == "done");
  REQUIRE(recs[0]["frames"] == 120);
  REQUIRE(recs[0]["outputs"] == nlohmann::json::array({"/out/a.npy", "/out/a.json"}));
  REQUIRE(recs[0]["reason"] == "");
  const std::string at = recs[0]["at"];
  REQUIRE(at.size() == 24);  // 2024-05-01T09:54:56.123Z
  REQUIRE(at[10] == 'T');
  REQUIRE(at.back() == 'Z');
  REQUIRE(recs[1]["status"] == "failed");
  REQUIRE(recs[1]["reason"] == "cannot decode: moov atom not found");
  REQUIRE(recs[1]["frames"] == 0);
  REQUIRE(recs[1]["outputs"].empty());

  JobLedger again(file);
  REQUIRE(again.resumed_count() == 2);
  REQUIRE(again.finished(a.string()));
  REQUIRE(again.finished(b.string()));
  REQUIRE(again.failed_count() == 1);
  REQUIRE_FALSE(again.finished((d.path / "in" / "c.mp4").string()));
}

TEST_CASE("job ledger: inputs are keyed by their absolute normal path", "[job_ledger]") {
  TempDir d;
  fs::create_directories(d.path / "in");
  write_file(d.path / "in" / "a.mp4", "aaaa");
  JobLedger l(d.path / "j.ledger");
  REQUIRE(l.done((d.path / "in" / "." / "a.mp4").string(), 4, {}));
  REQUIRE(l.finished((d.path / "in" / "a.mp4").string()));
  REQUIRE(l.finished((d.path / "in" / ".." / "in" / "a.mp4").string()));
  REQUIRE(parse_lines(l.path())[0]["input"] == (d.path / "in" / "a.mp4").string());
  REQUIRE(JobLedger::key("rtsp://cam/1") == "rtsp://cam/1");
  REQUIRE(fs::path(JobLedger::key("rel/x.mp4")).is_absolute());
}

TEST_CASE("job ledger: a torn last line is cut off", "[job_ledger]") {
  TempDir d;
  const fs::path a = d.path / "a.mp4", b = d.path / "b.mp4", c = d.path / "c.mp4";
  write_file(a, "a");
  write_file(b, "bb");
  write_file(c, "ccc");
  const fs::path file = d.path / "j.ledger";
  {
    JobLedger l(file);
    l.done(a.string(), 1, {});
    l.done(b.string(), 2, {});
  }
  const auto good = fs::file_size(file);

  SECTION("no line end") { append_text(file, R"({"input":")" + c.string() + R"(","size":3,"mtime)"); }
  SECTION("NUL bytes left by a power loss") { append_text(file, std::string(37, '\0')); }
  SECTION("a line end but not JSON") { append_text(file, "{\"input\":\"" + c.string() + "\",\"si\x01ze\n"); }

  {
    JobLedger l(file);
    REQUIRE(l.resumed_count() == 2);
    REQUIRE(fs::file_size(file) == good);
    REQUIRE(l.finished(a.string()));
    REQUIRE(l.finished(b.string()));
    REQUIRE_FALSE(l.finished(c.string()));
    REQUIRE(l.done(c.string(), 3, {}));  // appends after the cut: the file stays one record per line
  }
  const auto recs = parse_lines(file);
  REQUIRE(recs.size() == 3);
  REQUIRE(recs[2]["input"] == c.string());
  JobLedger l(file);
  REQUIRE(l.resumed_count() == 3);
}

TEST_CASE("job ledger: a corrupt line before the last is an error naming file and line", "[job_ledger]") {
  TempDir d;
  const fs::path a = d.path / "a.mp4", b = d.path / "b.mp4";
  write_file(a, "a");
  write_file(b, "b");
  const fs::path file = d.path / "j.ledger";
  {
    JobLedger l(file);
    l.done(a.string(), 1, {});
  }
  append_text(file, "this is not json\n");
  {
    // A second good record after the bad one: the bad line is not the last.
    std::ofstream f(file, std::ios::app);
    f << nlohmann::json{{"input", b.string()}, {"size", 1}, {"mtime_ns", 1}, {"status", "done"}}.dump() << "\n";
  }
  const auto before = read_text(file);
  REQUIRE_THROWS_WITH(JobLedger(file), Catch::Contains(file.string() + ":2"));
  REQUIRE(read_text(file) == before);  // nothing was cut

  SECTION("a JSON line that is not a record is an error even when it is the last") {
    TempDir d2;
    const fs::path f2 = d2.path / "j.ledger";
    write_file(f2, "{\"input\":\"/x\",\"size\":1,\"mtime_ns\":1,\"status\":\"done\"}\n{\"input\":\"/y\",\"status\":\"maybe\","
                   "\"size\":1,\"mtime_ns\":1}\n");
    REQUIRE_THROWS_WITH(JobLedger(f2), Catch::Contains(f2.string() + ":2") && Catch::Contains("maybe"));
  }
}

TEST_CASE("job ledger: a changed input is not finished", "[job_ledger]") {
  TempDir d;
  const fs::path a = d.path / "a.mp4";
  write_file(a, "version one");
  auto l = std::make_unique<JobLedger>(d.path / "j.ledger");
  REQUIRE(l->done(a.string(), 5, {}));
  REQUIRE(l->finished(a.string()));

  SECTION("new size") {
    write_file(a, "version two, longer");
    REQUIRE_FALSE(l->finished(a.string()));
  }
  SECTION("same size, new modification time") {
    struct stat st {};
    REQUIRE(::stat(a.c_str(), &st) == 0);
    timespec times[2] = {st.st_atim, st.st_mtim};
    times[1].tv_sec -= 100;
    REQUIRE(::utimensat(AT_FDCWD, a.c_str(), times, 0) == 0);
    REQUIRE_FALSE(l->finished(a.string()));
  }
  SECTION("removed") {
    fs::remove(a);
    REQUIRE_FALSE(l->finished(a.string()));
    return;
  }
  REQUIRE(l->done(a.string(), 6, {}));  // redone: recorded again, the last record counts
  REQUIRE(l->finished(a.string()));
  l.reset();
  JobLedger again(d.path / "j.ledger");
  REQUIRE(again.resumed_count() == 2);
  REQUIRE(again.finished_count() == 1);
  REQUIRE(again.finished(a.string()));
}

TEST_CASE("job ledger: an input is finished only for the options it was done with", "[job_ledger]") {
  TempDir d;
  const fs::path a = d.path / "a.mp4";
  write_file(a, "video");
  {
    JobLedger l(d.path / "j.ledger");
    REQUIRE(l.done(a.string(), 3, {}, "fit=crop max_frames=3"));
    CHECK(l.finished(a.string(), "fit=crop max_frames=3"));
    CHECK_FALSE(l.finished(a.string()));  // without options: another request, done again
    CHECK_FALSE(l.finished(a.string(), "fit=crop"));
    CHECK_FALSE(l.done(a.string(), 3, {}, "fit=crop max_frames=3"));  // the same again: nothing written
    REQUIRE(l.done(a.string(), 9, {}, "decoder=cpu"));                // other options: recorded, the last counts
    CHECK_FALSE(l.finished(a.string(), "fit=crop max_frames=3"));
  }
  const std::string text = read_text(d.path / "j.ledger");
  CHECK(text.find("\"reason\":\"\",\"options\":\"fit=crop max_frames=3\",\"at\"") != std::string::npos);
  JobLedger again(d.path / "j.ledger");
  const auto e = again.finished_unchanged(a.string(), "decoder=cpu");
  REQUIRE(e);
  CHECK(e->frames == 9);
  CHECK(e->options == "decoder=cpu");
  CHECK_FALSE(again.finished(a.string()));
  // A record whose options are not a string is refused, naming the line.
  write_file(d.path / "bad.ledger", "{\"input\":\"/x\",\"size\":1,\"mtime_ns\":1,\"status\":\"done\",\"options\":5}\n"
                                    "{\"input\":\"/y\",\"size\":1,\"mtime_ns\":1,\"status\":\"done\"}\n");
  CHECK_THROWS_WITH(JobLedger(d.path / "bad.ledger"), Catch::Matchers::Contains("bad.ledger:1") &&
                                                          Catch::Matchers::Contains("\"options\" is not a string"));
}

TEST_CASE("job ledger: failed inputs are finished and not retried", "[job_ledger]") {
  TempDir d;
  const fs::path bad = d.path / "bad.mp4", missing = d.path / "missing.mp4";
  write_file(bad, "not a video");
  {
    JobLedger l(d.path / "j.ledger");
    REQUIRE(l.failed(bad.string(), "unsupported codec", 7));
    REQUIRE(l.failed(missing.string(), "no such file"));
  }
  JobLedger l(d.path / "j.ledger");
  REQUIRE(l.finished(bad.string()));
  REQUIRE(l.finished(missing.string()));  // recorded with size -1: still missing, still finished
  REQUIRE(l.failed_count() == 2);
  REQUIRE_FALSE(l.failed(bad.string(), "unsupported codec"));
  const auto recs = parse_lines(l.path());
  REQUIRE(recs[0]["frames"] == 7);
  REQUIRE(recs[1]["size"] == -1);
  REQUIRE(recs[1]["mtime_ns"] == -1);
  // A later success of a failed input is recorded (the status changed).
  REQUIRE(l.done(bad.string(), 10, {}));
  REQUIRE(l.failed_count() == 1);
}

TEST_CASE("job ledger: an input path that is not UTF-8 round-trips", "[job_ledger]") {
  TempDir d;
  const fs::path odd = d.path / std::string("caf\xe9.mp4");  // Latin-1 byte: not valid UTF-8
  write_file(odd, "x");
  {
    JobLedger l(d.path / "j.ledger");
    REQUIRE(l.done(odd.string(), 1, {odd.string()}));
  }
  JobLedger l(d.path / "j.ledger");
  REQUIRE(l.finished(odd.string()));
  REQUIRE(parse_lines(l.path())[0].contains("input_hex"));
}

TEST_CASE("job ledger: one holder at a time", "[job_ledger]") {
  TempDir d;
  auto l = std::make_unique<JobLedger>(d.path / "j.ledger");
  REQUIRE_THROWS_WITH(JobLedger(d.path / "j.ledger", std::chrono::milliseconds(0)), Catch::Contains("in use"));
  // A holder that lets go while the next one waits (a reload tearing down the old pipeline).
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    l.reset();
  });
  JobLedger next(d.path / "j.ledger", std::chrono::seconds(10));
  release.join();
  REQUIRE(next.resumed_count() == 0);
}

TEST_CASE("job ledger: the path is stable and differs per job", "[job_ledger]") {
  const fs::path state = "/var/lib/sluice";
  const auto p = job_ledger_path(state, "default", {"/data/b.mp4", "/data/a.mp4"});
  REQUIRE(p == "/var/lib/sluice/jobs/default-1cd7e9aabe2b91ad.ledger");  // FNV-1a 64 of "default\0/data/a.mp4\0/data/b.mp4\0"
  REQUIRE(job_ledger_path(state, "default", {"/data/a.mp4", "/data/b.mp4"}) == p);  // order does not matter
  REQUIRE(job_ledger_path(state, "default", {"/data/a.mp4", "/data/b.mp4", "/data/a.mp4"}) == p);
  REQUIRE(job_ledger_path(state, "other", {"/data/a.mp4", "/data/b.mp4"}) != p);
  REQUIRE(job_ledger_path(state, "default", {"/data/a.mp4"}) != p);
  REQUIRE(job_ledger_path(state, "default", {"/data/a.mp4/data/b.mp4"}) != p);  // separators count
  const auto odd = job_ledger_path(state, "../my pipe", {"/x"});
  REQUIRE(odd.parent_path() == state / "jobs");
  REQUIRE(odd.filename().string().rfind(".._my_pipe-", 0) == 0);
}

TEST_CASE("job ledger: kill -9 at random moments loses no reported record and records none twice", "[job_ledger]") {
  TempDir d;
  constexpr int n = 400;
  std::vector<std::string> inputs;
  fs::create_directories(d.path / "in");
  for (int i = 0; i < n; ++i) {
    inputs.push_back((d.path / "in" / ("clip" + std::to_string(i) + ".mp4")).string());
    write_file(inputs.back(), std::string(static_cast<std::size_t>(i % 97), 'x'));
  }
  const fs::path file = d.path / "state" / "jobs" / "crash.ledger";
  std::mt19937 rng(std::random_device{}());
  std::set<int> reported;
  int killed_mid_run = 0;

  for (int round = 0; round < 6; ++round) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {  // the child: a job that records inputs until it is killed
      ::close(fds[0]);
      try {
        JobLedger l(file);
        for (int i = 0; i < n; ++i) {
          if (l.finished(inputs[static_cast<std::size_t>(i)])) continue;
          l.done(inputs[static_cast<std::size_t>(i)], static_cast<std::uint64_t>(i), {"/out/" + std::to_string(i)});
          if (::write(fds[1], &i, sizeof i) != static_cast<ssize_t>(sizeof i)) ::_exit(3);  // after done() returned
        }
      } catch (...) {
        ::_exit(2);
      }
      ::_exit(0);
    }
    ::close(fds[1]);
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 15000)(rng)));
    ::kill(pid, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    if (WIFEXITED(status)) REQUIRE(WEXITSTATUS(status) == 0);  // 2 or 3: the child failed, not killed
    if (WIFSIGNALED(status)) ++killed_mid_run;
    int i = 0;
    while (::read(fds[0], &i, sizeof i) == static_cast<ssize_t>(sizeof i)) reported.insert(i);
    ::close(fds[0]);

    // The parent reopens: every record the child reported is there, and the file parses.
    JobLedger check(file);
    for (int r : reported) REQUIRE(check.finished(inputs[static_cast<std::size_t>(r)]));
  }
  INFO("rounds killed mid-run: " << killed_mid_run << ", records reported: " << reported.size());

  // Finish the job in this process, then every input is in the file exactly once.
  {
    JobLedger l(file);
    for (const auto& in : inputs)
      if (!l.finished(in)) l.done(in, 0, {});
    REQUIRE(l.finished_count() == static_cast<std::size_t>(n));
  }
  std::map<std::string, int> seen;
  for (const auto& rec : parse_lines(file)) seen[rec.at("input").get<std::string>()]++;
  REQUIRE(seen.size() == static_cast<std::size_t>(n));
  for (const auto& [input, count] : seen) {
    INFO(input);
    REQUIRE(count == 1);
  }
}

TEST_CASE("job ledger: writers and readers on several threads", "[job_ledger]") {
  TempDir d;
  constexpr int per_thread = 40, threads = 4;
  fs::create_directories(d.path / "in");
  JobLedger l(d.path / "j.ledger");
  std::vector<std::thread> pool;
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop) (void)(l.finished_count() + l.failed_count() + (l.finished((d.path / "in" / "0-0").string()) ? 1 : 0));
  });
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        const auto in = (d.path / "in" / (std::to_string(t) + "-" + std::to_string(i))).string();
        if (i % 5 == 0) l.failed(in, "bad"); else l.done(in, static_cast<std::uint64_t>(i), {});
      }
    });
  for (auto& th : pool) th.join();
  stop = true;
  reader.join();
  REQUIRE(l.finished_count() == static_cast<std::size_t>(threads * per_thread));
  REQUIRE(parse_lines(l.path()).size() == static_cast<std::size_t>(threads * per_thread));
}

TEST_CASE("job ledger: failed inputs keep their reason and frames for the report of a resumed run", "[job_ledger]") {
  TempDir d;
  const fs::path bad = d.path / "bad.mp4", good = d.path / "good.mp4";
  write_file(bad, "half a video");
  write_file(good, "a video");
  {
    JobLedger l(d.path / "j.ledger");
    REQUIRE(l.failed(bad.string(), "truncated at frame 51", 51));
    REQUIRE(l.done(good.string(), 80, {}));
  }
  JobLedger l(d.path / "j.ledger");
  const auto failed = l.failed_inputs();
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].input == bad.string());
  CHECK(failed[0].reason == "truncated at frame 51");
  CHECK(failed[0].frames == 51);
  write_file(bad, "the whole video now");  // replaced: a run redoes it, it is no longer a failure to report
  CHECK(l.failed_inputs().empty());
}

TEST_CASE("job ledger: another process holding the job fails a second run at once, naming its pid, creating nothing",
          "[job_ledger]") {
  TempDir d;
  const fs::path ledger = d.path / "jobs" / "j.ledger";
  fs::create_directories(ledger.parent_path());
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t holder = ::fork();
  REQUIRE(holder >= 0);
  if (holder == 0) {  // a running sluiced: holds the lock and has written its pid (system calls only)
    const std::string lock = (ledger.parent_path() / ".j.ledger.sluice-lock").string();
    const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT, 0644);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0) ::_exit(1);
    char text[32];
    const int n = std::snprintf(text, sizeof text, "%d\n", static_cast<int>(::getpid()));
    if (::write(fd, text, static_cast<std::size_t>(n)) != n || ::write(ready[1], "k", 1) != 1) ::_exit(1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  ::close(ready[0]);
  // A long wait would apply to a holder in this process only: another process's lock fails at once.
  CHECK_THROWS_WITH(JobLedger(ledger, std::chrono::hours(1)),
                    Catch::Contains("in use by another sluiced (pid " + std::to_string(holder) + ","));
  CHECK_FALSE(fs::exists(ledger));  // touched nothing: not even created
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  JobLedger after(ledger);  // the holder died: its lock went with it
  CHECK(after.resumed_count() == 0);
}

TEST_CASE("job ledger: reading is bounded and arbitrary bytes are refused with the line, never a crash",
          "[job_ledger]") {
  const std::string record =
      R"({"input":"/a.mp4","size":1,"mtime_ns":2,"status":"failed","frames":51,"outputs":[],"reason":"cut","at":"x"})";
  auto parsed = JobLedger::parse(record + "\n" + record.substr(0, 20), "t.ledger");
  CHECK(parsed.records == 1);
  CHECK(parsed.entries.at("/a.mp4").frames == 51);
  CHECK(parsed.entries.at("/a.mp4").reason == "cut");
  CHECK(parsed.torn_at == record.size() + 1);
  CHECK_THROWS_WITH(JobLedger::parse(std::string(JobLedger::kMaxLineBytes + 1, 'x') + "\n" + record + "\n", "t.ledger"),
                    Catch::Contains("t.ledger:1") && Catch::Contains("limit of 1048576 bytes"));
  CHECK_THROWS_WITH(JobLedger::parse("\xff\xfe\n" + record + "\n", "t.ledger"), Catch::Contains("t.ledger:1"));
  CHECK_THROWS_WITH(JobLedger::parse(R"({"input":"/a","size":1e400,"mtime_ns":1,"status":"done"})" "\n" + record + "\n",
                                     "t.ledger"),
                    Catch::Contains("t.ledger:1"));
  CHECK_THROWS_WITH(JobLedger::parse(R"({"input":{"x":1},"size":1,"mtime_ns":1,"status":"done"})" "\n", "t.ledger"),
                    Catch::Contains("not a ledger record"));
}

TEST_CASE("job ledger: a size or time that is a float or past int64 is refused, not converted", "[job_ledger]") {
  // 1e20 as "size" was converted to int64 (undefined behaviour; found by fuzz/ledger_fuzz.cpp).
  const std::string good = R"({"input":"/b","size":1,"mtime_ns":1,"status":"done"})";
  for (const std::string bad : {R"({"input":"/a","size":1.04855e20,"mtime_ns":1,"status":"done"})",
                                R"({"input":"/a","size":1,"mtime_ns":18446744073709551615,"status":"done"})",
                                R"({"input":"/a","size":1.5,"mtime_ns":1,"status":"done"})"}) {
    INFO(bad);
    CHECK_THROWS_WITH(JobLedger::parse(bad + "\n" + good + "\n", "t.ledger"),
                      Catch::Contains("t.ledger:1") && Catch::Contains("not a ledger record"));
  }
}

TEST_CASE("job ledger: an input started and not finished is interrupted at the next open", "[job_ledger]") {
  TempDir d;
  const fs::path a = d.path / "a.mp4", b = d.path / "b.mp4", c = d.path / "c\xe9.mp4";
  write_file(a, "aa");
  write_file(b, "bbb");
  write_file(c, "c");
  const fs::path file = d.path / "j.ledger";
  {
    JobLedger l(file);
    REQUIRE(l.interrupted().empty());
    l.started({a.string(), b.string()});
    l.started({a.string(), c.string()});  // a: once per run
    REQUIRE(l.done(a.string(), 2, {"/out/x.jsonl"}));
    REQUIRE(l.failed(b.string(), "corrupt", 1));
    REQUIRE_FALSE(l.finished(c.string()));
  }
  const auto recs = parse_lines(file);
  REQUIRE(recs.size() == 5);
  REQUIRE(recs[0]["status"] == "started");
  REQUIRE(recs[1]["status"] == "started");
  REQUIRE(recs[2]["status"] == "started");
  REQUIRE(recs[2].contains("input_hex"));  // c is not UTF-8: kept exactly
  {
    JobLedger l(file);
    REQUIRE(l.interrupted() == std::set<std::string>{c.string()});  // a done, b failed after they started
    REQUIRE(l.finished(a.string()));
    REQUIRE(l.finished(b.string()));
    REQUIRE_FALSE(l.finished(c.string()));
    REQUIRE(l.resumed_count() == 2);  // done and failed records
    l.started({c.string()});          // redone in this run, killed again
  }
  {
    JobLedger l(file);
    REQUIRE(l.interrupted() == std::set<std::string>{c.string()});
    REQUIRE(l.done(c.string(), 1, {}));
  }
  JobLedger l(file);
  REQUIRE(l.interrupted().empty());
  REQUIRE(l.finished(c.string()));
}

TEST_CASE("job ledger: a done input started again (it changed) is interrupted, no longer finished", "[job_ledger]") {
  const auto p = JobLedger::parse(
      "{\"input\":\"/a\",\"size\":1,\"mtime_ns\":2,\"status\":\"done\"}\n"
      "{\"input\":\"/a\",\"size\":3,\"mtime_ns\":4,\"status\":\"started\"}\n"
      "{\"input\":\"/b\",\"size\":1,\"mtime_ns\":2,\"status\":\"started\"}\n"
      "{\"input\":\"/b\",\"size\":1,\"mtime_ns\":2,\"status\":\"done\"}\n",
      "t.ledger");
  REQUIRE(p.interrupted == std::set<std::string>{"/a"});
  REQUIRE(p.entries.count("/a") == 0);
  REQUIRE(p.entries.count("/b") == 1);
  REQUIRE(p.records == 2);
  REQUIRE_THROWS_WITH(JobLedger::parse("{\"input\":\"/a\",\"size\":1.5,\"mtime_ns\":2,\"status\":\"started\"}\n{}\n", "t"),
                      Catch::Contains("t:1") && Catch::Contains("size"));
}
