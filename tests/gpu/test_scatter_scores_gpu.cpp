// The score scatter kernel against its CPU twin: random scores to random distinct slots, into device memory and
// into pinned host memory (where classify_boxes has the GPU write its records in place). Exact: it only copies.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/scatter_scores.cuh"
#include "runtime/gpu_handles.hpp"
#include "runtime/gpu.hpp"

using namespace sluice;
using kernels::ClassScore;

TEST_CASE("score scatter: GPU equals the CPU twin, to device and to pinned memory", "[gpu][scatter_scores]") {
  std::mt19937 rng(7);
  for (const int k : {1, 3, 32}) {
    for (const int count : {0, 1, 17, 300}) {
      const int slots = count * 2 + 1;
      const std::size_t bytes = static_cast<std::size_t>(slots) * k * sizeof(ClassScore) + 64;
      std::vector<ClassScore> scores(static_cast<std::size_t>(count) * k);
      for (auto& s : scores) s = {std::uniform_real_distribution<float>(-5, 5)(rng), std::uniform_int_distribution<int>(0, 999)(rng)};
      std::vector<int> order(static_cast<std::size_t>(slots));
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<std::uint64_t> offsets(static_cast<std::size_t>(count));
      for (int c = 0; c < count; ++c) offsets[static_cast<std::size_t>(c)] = 16 + static_cast<std::uint64_t>(order[static_cast<std::size_t>(c)]) * k * sizeof(ClassScore);
      std::vector<std::byte> expected(bytes, std::byte{0x5a});
      kernels::scatter_scores_cpu(scores.data(), k, offsets.data(), count, expected.data());

      Stream stream = Stream::create();
      Memory scores_dev(MemoryKind::device, std::max<std::size_t>(1, scores.size() * sizeof(ClassScore)));
      Memory offsets_dev(MemoryKind::device, std::max<std::size_t>(1, offsets.size() * sizeof(std::uint64_t)));
      Memory pinned(MemoryKind::pinned, bytes), device(MemoryKind::device, bytes);
      std::memset(pinned.data(), 0x5a, bytes);
      REQUIRE(cudaMemcpy(scores_dev.data(), scores.data(), scores.size() * sizeof(ClassScore), cudaMemcpyHostToDevice) == cudaSuccess);
      REQUIRE(cudaMemcpy(offsets_dev.data(), offsets.data(), offsets.size() * sizeof(std::uint64_t), cudaMemcpyHostToDevice) == cudaSuccess);
      REQUIRE(cudaMemcpy(device.data(), pinned.data(), bytes, cudaMemcpyHostToDevice) == cudaSuccess);
      const auto* s = reinterpret_cast<const ClassScore*>(scores_dev.data());
      const auto* o = reinterpret_cast<const std::uint64_t*>(offsets_dev.data());
      kernels::scatter_scores_gpu(s, k, o, count, pinned.data(), stream.get());
      kernels::scatter_scores_gpu(s, k, o, count, device.data(), stream.get());
      gpu::stream_synchronize(stream.get());
      std::vector<std::byte> from_device(bytes);
      REQUIRE(cudaMemcpy(from_device.data(), device.data(), bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
      INFO("k " << k << " count " << count);
      CHECK(std::memcmp(pinned.data(), expected.data(), bytes) == 0);
      CHECK(from_device == expected);
    }
  }
}
