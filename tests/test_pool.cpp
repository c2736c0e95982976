#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "runtime/pool.hpp"

using namespace sluice;

namespace {
PayloadDesc small_frames(int batch) {
  PayloadDesc d;
  d.kind = PayloadKind::frames;
  d.memory = MemoryKind::host;
  d.batch = batch;
  d.width = 16;
  d.height = 8;
  d.pixel = PixelFormat::bgr8;
  return d;
}
}  // namespace

TEST_CASE("pool hands out every slot once before any is released", "[pool]") {
  BatchPool pool("p", small_frames(4), 3, false);
  REQUIRE(pool.bytes() == 3u * 4u * 16u * 8u * 3u);
  std::set<Batch*> seen;
  std::vector<BatchLease> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(pool.acquire(nullptr));
    REQUIRE(held.back());
    REQUIRE(seen.insert(held.back().get()).second);
    REQUIRE(held.back()->memory.bytes() == 4u * 16u * 8u * 3u);
    REQUIRE(held.back()->frames.capacity() >= 4u);
  }
  REQUIRE(pool.free_slots() == 0);

  // A fourth acquire blocks until a slot comes back, and then gets exactly that slot.
  std::atomic<Batch*> got{nullptr};
  std::thread waiter([&] { got = pool.acquire(nullptr).detach(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(got.load() == nullptr);
  Batch* returned = held[1].get();
  held[1].reset();
  waiter.join();
  REQUIRE(got.load() == returned);
  BatchLease::adopt(got.load()).reset();
}

TEST_CASE("pool resets a recycled batch and keeps its memory", "[pool]") {
  BatchPool pool("p", small_frames(2), 1, false);
  std::byte* mem = nullptr;
  {
    BatchLease b = pool.acquire(nullptr);
    mem = b->memory.data();
    b->count = 2;
    b->frames.resize(2);
    b->ready_pending = true;
  }
  BatchLease again = pool.acquire(nullptr);
  REQUIRE(again->memory.data() == mem);
  REQUIRE(again->count == 0);
  REQUIRE(again->frames.empty());
  REQUIRE_FALSE(again->ready_pending);
}

TEST_CASE("closing a pool wakes a blocked acquire with an empty lease", "[pool]") {
  BatchPool pool("p", small_frames(1), 1, false);
  BatchLease held = pool.acquire(nullptr);
  std::atomic<bool> empty{false};
  std::thread waiter([&] { empty = !pool.acquire(nullptr); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  pool.close();
  waiter.join();
  REQUIRE(empty.load());
}
