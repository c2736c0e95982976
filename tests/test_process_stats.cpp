// /proc parsers (daemon/process_stats) and per-thread-group CPU counters (daemon/thread_cpu).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <iterator>
#include <thread>

#include "daemon/process_stats.hpp"
#include "daemon/thread_cpu.hpp"
#include "runtime/thread_name.hpp"

using namespace sluice;

namespace {
// A stat line shaped like the kernel's, with utime 7, stime 3, 9 threads, start 12345, vsize 104857600, rss 2560.
std::string stat_line(const std::string& comm) {
  return "4242 (" + comm +
         ") S 1 4242 4242 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 9 0 12345 104857600 2560 18446744073709551615 1 1 0 0 "
         "0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
}
}  // namespace

TEST_CASE("parse_proc_stat reads the fields after the name, whatever the name holds", "[process]") {
  for (const std::string comm : {"sluiced", "a b", "x) S 1 2 3 (y", "", "))"}) {
    INFO(comm);
    const auto st = parse_proc_stat(stat_line(comm));
    REQUIRE(st);
    CHECK(st->comm == comm);
    CHECK(st->utime_ticks == 7);
    CHECK(st->stime_ticks == 3);
    CHECK(st->num_threads == 9);
    CHECK(st->start_ticks == 12345);
    CHECK(st->vsize_bytes == 104857600);
    CHECK(st->rss_pages == 2560);
  }
}

TEST_CASE("parse_proc_stat refuses what is not a stat line", "[process]") {
  CHECK_FALSE(parse_proc_stat(""));
  CHECK_FALSE(parse_proc_stat("4242 sluiced S 1"));                 // no parentheses
  CHECK_FALSE(parse_proc_stat("4242 (sluiced) S 1 4242 4242 0 -1"));  // too few fields
  std::string line = stat_line("x");
  CHECK_FALSE(parse_proc_stat(line.replace(line.find(" 7 3 "), 5, " 7 z ")));       // stime not a number
  CHECK_FALSE(parse_proc_stat(stat_line("x").replace(line.find(" 2560 "), 6, " -1 ")));  // negative rss
  CHECK_FALSE(parse_proc_stat(") (x"));                             // ')' before '('
  line = stat_line("x");
  CHECK_FALSE(parse_proc_stat(line.replace(line.find(" 7 3 "), 5, " 99999999999999999999999 3 ")));  // overflows

}

TEST_CASE("parse_max_open_files and parse_boot_time", "[process]") {
  const std::string limits =
      "Limit                     Soft Limit           Hard Limit           Units     \n"
      "Max cpu time              unlimited            unlimited            seconds   \n"
      "Max open files            1024                 1048576              files     \n";
  CHECK(parse_max_open_files(limits) == 1024u);
  CHECK_FALSE(parse_max_open_files("Max open files            unlimited            unlimited            files\n"));
  CHECK_FALSE(parse_max_open_files("Max open files\n"));
  CHECK_FALSE(parse_max_open_files("Max cpu time 5 5 seconds\n"));
  CHECK(parse_boot_time("cpu  1 2 3\nintr 5\nbtime 1764633600\nprocesses 7\n") == 1764633600u);
  CHECK_FALSE(parse_boot_time("btime\n"));
  CHECK_FALSE(parse_boot_time("btime x\n"));
  CHECK_FALSE(parse_boot_time("cpu 1 2 3\n"));
}

TEST_CASE("read_process_stats and read_thread_samples describe this process", "[process]") {
  const ProcessStats p = read_process_stats();
  REQUIRE(p.cpu_s);
  REQUIRE(p.start_time_s);
  REQUIRE(p.resident_bytes);
  REQUIRE(p.virtual_bytes);
  REQUIRE(p.open_fds);
  REQUIRE(p.threads);
  CHECK(*p.resident_bytes > 0);
  CHECK(*p.virtual_bytes >= *p.resident_bytes);
  CHECK(*p.open_fds >= 3);  // stdin, stdout, stderr at least
  CHECK(*p.threads >= 1);
  // Started before now, and after 2020 (a start time in ticks since boot read as seconds would be tiny).
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  CHECK(*p.start_time_s <= now + 1);
  CHECK(*p.start_time_s > 1577836800.0);
  if (p.max_fds) CHECK(*p.max_fds >= *p.open_fds);

  // A named thread shows up with its name while it runs.
  std::atomic<bool> named{false}, done{false};
  std::thread t([&] {
    name_this_thread(kSourceThreadName);
    named = true;
    while (!done) std::this_thread::yield();
  });
  while (!named) std::this_thread::yield();
  const auto threads = read_thread_samples();
  done = true;
  t.join();
  bool found_main = false, found_named = false;
  for (const auto& s : threads) {
    if (s.tid == static_cast<long>(getpid())) found_main = true;
    if (s.comm == kSourceThreadName) found_named = true;
    CHECK(s.cpu_s >= 0);
  }
  CHECK(found_main);
  CHECK(found_named);
}

TEST_CASE("thread_group by name", "[process]") {
  CHECK(thread_group("anything", true) == "main");
  CHECK(thread_group(kStageThreadName, false) == "stages");
  CHECK(thread_group(kSourceThreadName, false) == "sources");
  CHECK(thread_group("av:h264:df0", false) == "sources");
  CHECK(thread_group("cuda-EvtHandlr", false) == "cuda");
  CHECK(thread_group("sluiced", false) == "other");
  CHECK(thread_group("", false) == "other");
}

TEST_CASE("ThreadCpuAccount: counters never decrease as threads come, rename and go", "[process]") {
  ThreadCpuAccount a;
  REQUIRE(a.seconds().size() == std::size(kThreadGroups));  // every group from the start: a fixed set of series
  for (const auto& [g, s] : a.seconds()) CHECK(s == 0);
  const long main = 100;
  // First sample: everything each live thread used so far; 0.5 s of threads that already ended.
  a.update({{100, 1, "sluiced", 1.0}, {101, 2, "sluice-stage", 2.0}, {102, 3, "sluice-source", 3.0}}, main, 6.5);
  CHECK(a.seconds().at("main") == Approx(1.0));
  CHECK(a.seconds().at("stages") == Approx(2.0));
  CHECK(a.seconds().at("sources") == Approx(3.0));
  CHECK(a.seconds().at("exited") == Approx(0.5));

  // The source thread ends after using 0.25 s more; its id comes back as a new stage thread (another start).
  // Only the process total knows the 0.25 s: it counts as exited, and the sources' counter does not drop.
  a.update({{100, 1, "sluiced", 1.5}, {101, 2, "sluice-stage", 2.5}, {102, 9, "sluice-stage", 0.125}}, main, 7.875);
  CHECK(a.seconds().at("main") == Approx(1.5));
  CHECK(a.seconds().at("stages") == Approx(2.5 + 0.125));
  CHECK(a.seconds().at("sources") == Approx(3.0));
  CHECK(a.seconds().at("exited") == Approx(0.75));

  // A thread that renamed itself: its time since the last sample goes to its new group. A reading below the
  // last one (never expected) and a process total below the sum (tick rounding) take nothing back.
  a.update({{100, 1, "sluiced", 1.4}, {101, 2, "sluice-source", 3.0}, {102, 9, "sluice-stage", 0.125}}, main, 1.0);
  CHECK(a.seconds().at("main") == Approx(1.5));
  CHECK(a.seconds().at("stages") == Approx(2.625));
  CHECK(a.seconds().at("sources") == Approx(3.5));
  CHECK(a.seconds().at("exited") == Approx(0.75));

  // Groups stay even when no thread of theirs lives.
  a.update({{100, 1, "sluiced", 2.0}}, main, 9.0);
  CHECK(a.seconds().size() == std::size(kThreadGroups));
  CHECK(a.seconds().at("cuda") == 0);
  double sum = 0;
  for (const auto& [g, s] : a.seconds()) sum += s;
  CHECK(sum == Approx(9.0));
}
