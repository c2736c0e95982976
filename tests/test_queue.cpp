// BoundedQueue: order and no loss under stress, close() semantics, leaky policies, counters, timeouts.
// Catch2 assertions run on the test thread only; worker threads return what they saw.
// Every blocking scenario runs under a watchdog, so a lost wake-up fails the test instead of hanging it.
#include "runtime/bounded_queue.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using sluice::BoundedQueue;
using sluice::QueuePolicy;

// boost::lockfree's MPMC queue reads a node that another thread may be recycling (the value is discarded
// when its CAS then fails), and it type-puns its freelist links over the atomic `next` fields: data races
// by the letter of the memory model, by design, reported by TSan with both stacks inside boost
// (boostorg/lockfree#78). BoundedQueue's own shared state is all std::atomic. Suppress only those frames.
#if defined(__SANITIZE_THREAD__)
#define SLUICE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SLUICE_TSAN 1
#endif
#endif
#ifdef SLUICE_TSAN
extern "C" const char* __tsan_default_suppressions() { return "race:boost::lockfree::queue\n"; }
#endif

namespace {

// Sanitized builds run 10-50x slower: they get fewer stress items, so the suite stays at a few seconds.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// Runs fn on its own thread and returns its result, or std::nullopt if it has not finished within `limit`
// (the thread is then abandoned, holding its own references). Not a timing assertion: the limit is a hang
// guard, far above the expected run time.
template <typename Fn>
auto finishes(Fn fn, std::chrono::seconds limit = 240s) -> std::optional<decltype(fn())> {
  using R = decltype(fn());
  auto task = std::make_shared<std::packaged_task<R()>>(std::move(fn));
  auto result = task->get_future();
  std::thread([task] { (*task)(); }).detach();
  if (result.wait_for(limit) != std::future_status::ready) return std::nullopt;
  return result.get();
}

using Q = BoundedQueue<std::uint64_t>;

// Pops until end of stream; returns everything in the order popped.
std::vector<std::uint64_t> drain(Q& q) {
  std::vector<std::uint64_t> got;
  while (auto v = q.pop()) got.push_back(*v);
  return got;
}

// Item encoding for several producers: producer id in the high half, sequence number in the low half.
constexpr std::uint64_t item(std::uint64_t producer, std::uint64_t seq) { return producer << 32 | seq; }
constexpr std::uint64_t producer_of(std::uint64_t v) { return v >> 32; }
constexpr std::uint64_t seq_of(std::uint64_t v) { return v & 0xffffffffu; }

// Each consumer must see each producer's items in increasing order (FIFO), and over all consumers and the
// dropped lists every item of every producer appears exactly once. Returns a description of the first
// violation, or "" if none.
std::string check_exactly_once(const std::vector<std::vector<std::uint64_t>>& consumed,
                               const std::vector<std::vector<std::uint64_t>>& dropped, std::uint64_t producers,
                               std::uint64_t per_producer) {
  std::vector<std::vector<std::uint8_t>> seen(producers, std::vector<std::uint8_t>(per_producer, 0));
  auto mark = [&](std::uint64_t v) -> std::string {
    if (producer_of(v) >= producers || seq_of(v) >= per_producer) return "unknown item " + std::to_string(v);
    if (seen[producer_of(v)][seq_of(v)]++) return "duplicate item " + std::to_string(v);
    return "";
  };
  for (const auto& list : consumed) {
    std::vector<std::int64_t> last(producers, -1);
    for (auto v : list) {
      if (auto e = mark(v); !e.empty()) return e;
      auto& l = last[producer_of(v)];
      if (static_cast<std::int64_t>(seq_of(v)) <= l) return "out of order item " + std::to_string(v);
      l = static_cast<std::int64_t>(seq_of(v));
    }
  }
  for (const auto& list : dropped)
    for (auto v : list)
      if (auto e = mark(v); !e.empty()) return e;
  for (std::uint64_t p = 0; p < producers; ++p)
    for (std::uint64_t s = 0; s < per_producer; ++s)
      if (!seen[p][s]) return "lost item " + std::to_string(item(p, s));
  return "";
}

}  // namespace

TEST_CASE("queue policy names round-trip and reject others", "[queue]") {
  for (auto p : {QueuePolicy::block, QueuePolicy::leaky_oldest, QueuePolicy::leaky_newest})
    CHECK(sluice::parse_queue_policy(sluice::to_string(p)) == p);
  CHECK(sluice::parse_queue_policy("oldest") == QueuePolicy::leaky_oldest);
  CHECK(sluice::parse_queue_policy("newest") == QueuePolicy::leaky_newest);
  CHECK(sluice::parse_queue_policy("block") == QueuePolicy::block);
  CHECK_FALSE(sluice::parse_queue_policy("leaky"));
  CHECK_FALSE(sluice::parse_queue_policy("Oldest"));
  CHECK_FALSE(sluice::parse_queue_policy(""));
}

TEST_CASE("queue capacity must be 1..max_capacity", "[queue]") {
  CHECK_THROWS_AS(Q(0, QueuePolicy::block), std::invalid_argument);
  CHECK_THROWS_AS(Q(Q::max_capacity + 1, QueuePolicy::block), std::invalid_argument);
  Q big(Q::max_capacity, QueuePolicy::block);
  std::size_t accepted = 0;
  for (std::uint64_t i = 0; i < Q::max_capacity; ++i) accepted += big.push(i).accepted;
  CHECK(accepted == Q::max_capacity);
  CHECK(big.depth() == Q::max_capacity);
  CHECK(big.try_pop() == std::optional<std::uint64_t>(0));
}

TEST_CASE("SPSC stress: every item arrives once and in order", "[queue][stress]") {
  const std::size_t capacity = GENERATE(1, 2, 64);
  constexpr std::uint64_t n = kSanitized ? 50'000 : 200'000;
  CAPTURE(capacity, n);
  auto q = std::make_shared<Q>(capacity, QueuePolicy::block);

  struct Seen {
    std::uint64_t count = 0, sum = 0, out_of_order = 0, rejected = 0;
  };
  auto seen = finishes([q] {
    Seen s;
    std::thread producer([&] {
      for (std::uint64_t i = 1; i <= n; ++i)
        if (!q->push(i).accepted) ++s.rejected;
      q->close();
    });
    std::uint64_t expect = 1;
    while (auto v = q->pop()) {
      if (*v != expect) ++s.out_of_order;
      expect = *v + 1;
      ++s.count;
      s.sum += *v;
    }
    producer.join();
    return s;
  });
  REQUIRE(seen);
  CHECK(seen->rejected == 0);
  CHECK(seen->count == n);
  CHECK(seen->sum == n * (n + 1) / 2);
  CHECK(seen->out_of_order == 0);
  CHECK(q->closed_and_empty());
  CHECK(q->depth() == 0);
  CHECK(q->high_water() >= 1);
  CHECK(q->high_water() <= capacity);
  CHECK(q->drops() == 0);
}

TEST_CASE("MPMC 4x4 stress: every item seen exactly once", "[queue][stress]") {
  const std::size_t capacity = GENERATE(1, 8);
  constexpr std::uint64_t producers = 4, consumers = 4;
  constexpr std::uint64_t per_producer = kSanitized ? 10'000 : 50'000;
  CAPTURE(capacity);
  auto q = std::make_shared<Q>(capacity, QueuePolicy::block);

  auto consumed = finishes([q] {
    std::vector<std::vector<std::uint64_t>> got(consumers);
    std::vector<std::thread> threads;
    for (std::uint64_t c = 0; c < consumers; ++c) threads.emplace_back([&, c] { got[c] = drain(*q); });
    std::vector<std::thread> pushers;
    for (std::uint64_t p = 0; p < producers; ++p)
      pushers.emplace_back([&, p] {
        for (std::uint64_t s = 0; s < per_producer; ++s) q->push(item(p, s));
      });
    for (auto& t : pushers) t.join();
    q->close();
    for (auto& t : threads) t.join();
    return got;
  });
  REQUIRE(consumed);
  CHECK(check_exactly_once(*consumed, {}, producers, per_producer) == "");
  CHECK(q->closed_and_empty());
  CHECK(q->drops() == 0);
}

TEST_CASE("leaky queues under concurrency: each item delivered or handed back as dropped exactly once",
          "[queue][stress]") {
  const auto policy = GENERATE(QueuePolicy::leaky_oldest, QueuePolicy::leaky_newest);
  const std::size_t capacity = GENERATE(1, 4);
  constexpr std::uint64_t producers = 2, consumers = 2;
  constexpr std::uint64_t per_producer = kSanitized ? 20'000 : 200'000;
  CAPTURE(sluice::to_string(policy), capacity);
  auto q = std::make_shared<Q>(capacity, policy);

  struct Fates {
    std::vector<std::vector<std::uint64_t>> consumed, dropped;
    std::uint64_t rejected = 0;
  };
  auto fates = finishes([q] {
    Fates f;
    f.consumed.resize(consumers);
    f.dropped.resize(producers);
    std::vector<std::uint64_t> rejected(producers, 0);
    std::vector<std::thread> threads;
    for (std::uint64_t c = 0; c < consumers; ++c) threads.emplace_back([&, c] { f.consumed[c] = drain(*q); });
    std::vector<std::thread> pushers;
    for (std::uint64_t p = 0; p < producers; ++p)
      pushers.emplace_back([&, p] {
        for (std::uint64_t s = 0; s < per_producer; ++s) {
          auto r = q->push(item(p, s));
          if (!r.accepted) ++rejected[p];
          if (r.dropped) f.dropped[p].push_back(*r.dropped);
        }
      });
    for (auto& t : pushers) t.join();
    q->close();
    for (auto& t : threads) t.join();
    f.rejected = std::accumulate(rejected.begin(), rejected.end(), std::uint64_t{0});
    return f;
  });
  REQUIRE(fates);
  CHECK(fates->rejected == 0);
  CHECK(check_exactly_once(fates->consumed, fates->dropped, producers, per_producer) == "");
  std::uint64_t dropped = 0;
  for (const auto& d : fates->dropped) dropped += d.size();
  CHECK(q->drops() == dropped);
  CHECK(q->closed_and_empty());
}

TEST_CASE("close racing with pushes loses no accepted item", "[queue][close][stress]") {
  // close() lands while pushes are in flight (slot taken, item not yet stored): the consumer must still
  // get every item whose push was accepted before it sees end of stream.
  const auto policy = GENERATE(QueuePolicy::block, QueuePolicy::leaky_oldest);
  const std::size_t capacity = GENERATE(1, 16);
  constexpr int rounds = kSanitized ? 100 : 500;
  CAPTURE(sluice::to_string(policy), capacity);

  struct Tally {
    std::uint64_t in_count = 0, in_sum = 0, out_count = 0, out_sum = 0, bad_refusals = 0;
  };
  auto tally = finishes([policy, capacity] {
    Tally t;
    for (int r = 0; r < rounds; ++r) {
      Q q(capacity, policy);
      std::atomic<std::uint64_t> popped{0}, producers_done{0};
      std::uint64_t in_count[2] = {}, in_sum[2] = {}, out_count[2] = {}, out_sum[2] = {}, bad[2] = {};
      std::vector<std::thread> producers;
      for (std::uint64_t p = 0; p < 2; ++p)
        producers.emplace_back([&, p] {
          for (std::uint64_t s = 0; s < 1000; ++s) {
            const auto v = item(p, s);
            auto res = q.push(v);
            if (!res.accepted) {
              bad[p] += res.dropped != v;
              break;
            }
            ++in_count[p];
            in_sum[p] += v;
            if (res.dropped) {  // leaky_oldest: an older item's fate is decided here
              ++out_count[p];
              out_sum[p] += *res.dropped;
            }
          }
          producers_done.fetch_add(1);
        });
      std::uint64_t consumed_count = 0, consumed_sum = 0;
      std::thread consumer([&] {
        while (auto v = q.pop()) {
          ++consumed_count;
          consumed_sum += *v;
          popped.fetch_add(1, std::memory_order_relaxed);
        }
      });
      const std::uint64_t close_after = 1 + static_cast<std::uint64_t>(r) % 16;  // vary the moment
      while (popped.load(std::memory_order_relaxed) < close_after && producers_done.load() < 2)
        std::this_thread::yield();
      q.close();
      for (auto& th : producers) th.join();
      consumer.join();
      for (int p = 0; p < 2; ++p) {
        t.in_count += in_count[p];
        t.in_sum += in_sum[p];
        t.out_count += out_count[p];
        t.out_sum += out_sum[p];
        t.bad_refusals += bad[p];
      }
      t.out_count += consumed_count;
      t.out_sum += consumed_sum;
    }
    return t;
  });
  REQUIRE(tally);
  CHECK(tally->bad_refusals == 0);
  CHECK(tally->out_count == tally->in_count);
  CHECK(tally->out_sum == tally->in_sum);
}

TEST_CASE("end of stream reaches every consumer", "[queue][close][stress]") {
  // Several consumers race for the last items after close(): one that finds the storage empty while
  // another's pop is still in flight must wait for it, then learn that the stream ended.
  constexpr int rounds = kSanitized ? 300 : 1000;
  auto totals = finishes([] {
    std::uint64_t expected = 0, got = 0;
    for (int r = 0; r < rounds; ++r) {
      Q q(4, QueuePolicy::block);
      const std::uint64_t items = static_cast<std::uint64_t>(r) % 5;
      for (std::uint64_t i = 0; i < items; ++i) q.push(i);
      expected += items;
      std::uint64_t counts[3] = {};
      std::vector<std::thread> consumers;
      for (auto& c : counts) consumers.emplace_back([&q, &c] { c = drain(q).size(); });
      if (r % 2) std::this_thread::yield();  // sometimes close before, sometimes while, they pop
      q.close();
      for (auto& t : consumers) t.join();
      for (auto c : counts) got += c;
    }
    return std::pair{expected, got};
  });
  REQUIRE(totals);  // every consumer returned
  CHECK(totals->second == totals->first);
}

TEST_CASE("close wakes a blocked pop", "[queue][close]") {
  auto q = std::make_shared<Q>(4, QueuePolicy::block);
  auto popped = finishes(
      [q] {
        std::thread closer([&] {
          std::this_thread::sleep_for(50ms);  // let pop() reach its sleep (the test holds either way)
          q->close();
        });
        auto v = q->pop();
        closer.join();
        return v;
      },
      10s);
  REQUIRE(popped);  // pop() returned at all
  CHECK(*popped == std::nullopt);
  CHECK(q->closed_and_empty());
}

TEST_CASE("close wakes a blocked push which gets its item back", "[queue][close]") {
  auto q = std::make_shared<Q>(1, QueuePolicy::block);
  REQUIRE(q->push(1).accepted);
  auto pushed = finishes(
      [q] {
        std::thread closer([&] {
          std::this_thread::sleep_for(50ms);  // let push() reach its sleep (the test holds either way)
          q->close();
        });
        auto r = q->push(2);
        closer.join();
        return r;
      },
      10s);
  REQUIRE(pushed);  // push() returned at all
  CHECK_FALSE(pushed->accepted);
  CHECK(pushed->dropped == std::optional<std::uint64_t>(2));
  CHECK(q->drops() == 0);  // refused for closing, not dropped by policy
  CHECK(q->pop() == std::optional<std::uint64_t>(1));
  CHECK(q->pop() == std::nullopt);
}

TEST_CASE("a blocked push resumes when a pop makes room", "[queue]") {
  auto q = std::make_shared<Q>(1, QueuePolicy::block);
  REQUIRE(q->push(1).accepted);
  auto popped = finishes(
      [q] {
        std::thread pusher([&] { q->push(2); });
        std::this_thread::sleep_for(20ms);
        std::vector<std::uint64_t> got;
        got.push_back(q->pop().value_or(0));
        got.push_back(q->pop().value_or(0));  // waits for the pusher
        pusher.join();
        return got;
      },
      10s);
  REQUIRE(popped);
  CHECK(*popped == std::vector<std::uint64_t>{1, 2});
  CHECK(q->depth() == 0);
}

TEST_CASE("after close pops drain what is left and then report end of stream", "[queue][close]") {
  Q q(8, QueuePolicy::block);
  for (std::uint64_t i = 1; i <= 3; ++i) REQUIRE(q.push(i).accepted);
  q.close();
  CHECK(q.closed());
  CHECK_FALSE(q.closed_and_empty());

  auto late = q.push(4);
  CHECK_FALSE(late.accepted);
  CHECK(late.dropped == std::optional<std::uint64_t>(4));

  CHECK(q.pop() == std::optional<std::uint64_t>(1));
  CHECK(q.try_pop() == std::optional<std::uint64_t>(2));
  CHECK(q.pop_for(1s) == std::optional<std::uint64_t>(3));
  CHECK(q.closed_and_empty());
  CHECK(q.pop() == std::nullopt);
  CHECK(q.try_pop() == std::nullopt);
  CHECK(q.pop_for(1s) == std::nullopt);
  CHECK(q.drops() == 0);
}

TEST_CASE("close refuses pushes under every policy", "[queue][close]") {
  const auto policy = GENERATE(QueuePolicy::block, QueuePolicy::leaky_oldest, QueuePolicy::leaky_newest);
  Q q(1, policy);
  REQUIRE(q.push(1).accepted);
  q.close();
  auto r = q.push(2);  // full and closed: closing wins over the policy
  CHECK_FALSE(r.accepted);
  CHECK(r.dropped == std::optional<std::uint64_t>(2));
  CHECK(q.drops() == 0);
  CHECK(drain(q) == std::vector<std::uint64_t>{1});
}

TEST_CASE("leaky_oldest keeps the newest N and hands back each dropped item once", "[queue][leaky]") {
  Q q(4, QueuePolicy::leaky_oldest);
  std::vector<std::uint64_t> dropped;
  for (std::uint64_t i = 1; i <= 10; ++i) {
    auto r = q.push(i);
    CHECK(r.accepted);
    if (r.dropped) dropped.push_back(*r.dropped);
    CHECK(q.drops() == dropped.size());
  }
  CHECK(dropped == std::vector<std::uint64_t>{1, 2, 3, 4, 5, 6});
  CHECK(q.drops() == 6);
  CHECK(q.depth() == 4);
  CHECK(q.high_water() == 4);
  q.close();
  CHECK(drain(q) == std::vector<std::uint64_t>{7, 8, 9, 10});
}

TEST_CASE("leaky_newest keeps the oldest N and hands back each refused item", "[queue][leaky]") {
  Q q(4, QueuePolicy::leaky_newest);
  std::vector<std::uint64_t> dropped;
  for (std::uint64_t i = 1; i <= 10; ++i) {
    auto r = q.push(i);
    CHECK(r.accepted);
    if (r.dropped) dropped.push_back(*r.dropped);
  }
  CHECK(dropped == std::vector<std::uint64_t>{5, 6, 7, 8, 9, 10});
  CHECK(q.drops() == 6);
  CHECK(q.depth() == 4);
  q.close();
  CHECK(drain(q) == std::vector<std::uint64_t>{1, 2, 3, 4});
}

TEST_CASE("leaky queue with capacity 1 always holds the right single item", "[queue][leaky]") {
  Q oldest(1, QueuePolicy::leaky_oldest), newest(1, QueuePolicy::leaky_newest);
  for (std::uint64_t i = 1; i <= 3; ++i) {
    oldest.push(i);
    newest.push(i);
  }
  CHECK(oldest.try_pop() == std::optional<std::uint64_t>(3));
  CHECK(newest.try_pop() == std::optional<std::uint64_t>(1));
  CHECK(oldest.drops() == 2);
  CHECK(newest.drops() == 2);
}

TEST_CASE("depth and high_water and drops and capacity and policy report what happened", "[queue]") {
  Q q(8, QueuePolicy::block);
  CHECK(q.capacity() == 8);
  CHECK(q.policy() == QueuePolicy::block);
  CHECK(q.depth() == 0);
  CHECK(q.high_water() == 0);
  for (std::uint64_t i = 0; i < 5; ++i) q.push(i);
  CHECK(q.depth() == 5);
  CHECK(q.high_water() == 5);
  for (int i = 0; i < 3; ++i) REQUIRE(q.try_pop());
  CHECK(q.depth() == 2);
  CHECK(q.high_water() == 5);
  for (std::uint64_t i = 0; i < 4; ++i) q.push(i);
  CHECK(q.depth() == 6);
  CHECK(q.high_water() == 6);
  CHECK(q.drops() == 0);
  CHECK_FALSE(q.closed());

  Q leaky(2, QueuePolicy::leaky_newest);
  CHECK(leaky.policy() == QueuePolicy::leaky_newest);
  for (std::uint64_t i = 0; i < 5; ++i) leaky.push(i);
  CHECK(leaky.depth() == 2);
  CHECK(leaky.high_water() == 2);
  CHECK(leaky.drops() == 3);
}

TEST_CASE("pop_for times out on an empty open queue", "[queue][timeout]") {
  Q q(2, QueuePolicy::block);
  CHECK(q.pop_for(20ms) == std::nullopt);
  CHECK_FALSE(q.closed_and_empty());  // a timeout, not end of stream
  CHECK(q.pop_for(0ns) == std::nullopt);
  q.push(7);
  CHECK(q.pop_for(0ns) == std::optional<std::uint64_t>(7));
}

TEST_CASE("pop_for wakes for a push and for close", "[queue][timeout]") {
  auto q = std::make_shared<Q>(2, QueuePolicy::block);
  auto got = finishes(
      [q] {
        std::thread other([&] {
          std::this_thread::sleep_for(30ms);
          q->push(5);
          std::this_thread::sleep_for(30ms);
          q->close();
        });
        std::vector<std::optional<std::uint64_t>> r;
        r.push_back(q->pop_for(30s));
        r.push_back(q->pop_for(30s));
        other.join();
        return r;
      },
      10s);  // well under the 30 s timeouts: returning means a wake-up, not a timeout
  REQUIRE(got);
  CHECK((*got)[0] == std::optional<std::uint64_t>(5));
  CHECK((*got)[1] == std::nullopt);
  CHECK(q->closed_and_empty());
}

TEST_CASE("queue carries pointers (the engine's Batch*)", "[queue]") {
  int slots[3] = {0, 1, 2};
  BoundedQueue<int*> q(2, QueuePolicy::leaky_oldest);
  q.push(&slots[0]);
  q.push(&slots[1]);
  auto r = q.push(&slots[2]);
  REQUIRE(r.dropped);
  CHECK(*r.dropped == &slots[0]);  // handed back for recycling
  CHECK(q.pop() == std::optional<int*>(&slots[1]));
}
