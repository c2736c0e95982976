// The top-k kernel against its CPU twin on random logits (fixed seeds). Both select on the same logits with the
// same tie rule, so the indices must match exactly; scores differ only by the softmax sum: the twin sums in
// double; the kernel in float, each thread summing n/256 terms in turn before a tree: at most about n/256 ulp
// (2.3e-5 relative at n = 100000, typically far less), so 5e-5 relative.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/topk.cuh"
#include "runtime/gpu.hpp"
#include "runtime/gpu_handles.hpp"

using namespace sluice;
using namespace sluice::kernels;

TEST_CASE("top-k kernel matches its CPU twin", "[gpu][topk]") {
  std::mt19937 rng(7);
  Stream stream = Stream::create();
  struct Case {
    int items, classes, k;
    bool softmax;
  };
  for (const Case c : {Case{1, 5, 1, true}, Case{8, 5, 5, true}, Case{32, 1000, 5, true}, Case{3, 1000, 32, false},
                       Case{17, 257, 7, true}, Case{4, 100000, 10, true}, Case{64, 2, 2, false}}) {
    CAPTURE(c.items, c.classes, c.k, c.softmax);
    std::normal_distribution<float> logit(0.f, 3.f);
    std::vector<float> logits(static_cast<std::size_t>(c.items) * c.classes);
    for (float& x : logits) x = logit(rng);
    // Exact ties where they can happen in real outputs: repeated values must pick the lower index first.
    if (c.classes > 10) logits[3] = logits[9] = 50.f;
    const TopKParams p{c.items, c.classes, c.k, c.softmax};
    std::vector<ClassScore> want(static_cast<std::size_t>(c.items) * c.k), got(want.size());
    topk_cpu(p, logits.data(), want.data());

    Memory d_logits(MemoryKind::device, logits.size() * sizeof(float));
    Memory d_out(MemoryKind::device, got.size() * sizeof(ClassScore));
    gpu::copy_async(d_logits.data(), logits.data(), logits.size() * sizeof(float), stream.get());
    topk_gpu(p, reinterpret_cast<const float*>(d_logits.data()), reinterpret_cast<ClassScore*>(d_out.data()),
             stream.get());
    gpu::copy_async(got.data(), d_out.data(), got.size() * sizeof(ClassScore), stream.get());
    gpu::stream_synchronize(stream.get());
    for (std::size_t i = 0; i < want.size(); ++i) {
      INFO("entry " << i);
      REQUIRE(got[i].index == want[i].index);
      REQUIRE(std::abs(got[i].score - want[i].score) <= 5e-5f * std::abs(want[i].score) + 1e-7f);
    }
  }
}
