// The CPU top-k (the GPU kernel's twin) against a full sort and a double-precision softmax.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/topk.hpp"

using namespace sluice::kernels;

TEST_CASE("top-k picks the best classes with softmax scores", "[topk]") {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> few(0, 6);  // few distinct values: many ties
  for (const int classes : {1, 2, 5, 100, 1000}) {
    for (const int k : {1, 3, 5}) {
      if (k > classes) continue;
      CAPTURE(classes, k);
      const int items = 4;
      std::vector<float> logits(static_cast<std::size_t>(items) * classes);
      for (float& x : logits) x = static_cast<float>(few(rng)) * 0.7f;
      std::vector<ClassScore> out(static_cast<std::size_t>(items) * k);
      topk_cpu({items, classes, k, true}, logits.data(), out.data());
      for (int item = 0; item < items; ++item) {
        const float* row = &logits[static_cast<std::size_t>(item) * classes];
        std::vector<int> order(static_cast<std::size_t>(classes));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [row](int a, int b) { return row[a] > row[b]; });
        double sum = 0;
        for (int c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(row[c]));
        for (int i = 0; i < k; ++i) {
          const ClassScore s = out[static_cast<std::size_t>(item) * k + i];
          REQUIRE(s.index == order[static_cast<std::size_t>(i)]);
          REQUIRE(s.score == Approx(std::exp(static_cast<double>(row[s.index])) / sum).epsilon(1e-5));
        }
      }
    }
  }
}

TEST_CASE("top-k without softmax returns the logits", "[topk]") {
  const std::vector<float> logits{0.5f, -2.f, 3.f, 3.f};
  std::vector<ClassScore> out(2);
  topk_cpu({1, 4, 2, false}, logits.data(), out.data());
  CHECK(out[0].index == 2);
  CHECK(out[0].score == 3.f);
  CHECK(out[1].index == 3);
}

TEST_CASE("top-k refuses k outside 1 to classes", "[topk]") {
  std::vector<float> logits(4);
  std::vector<ClassScore> out(8);
  CHECK_THROWS_AS(topk_cpu({1, 4, 5, true}, logits.data(), out.data()), std::invalid_argument);
  CHECK_THROWS_AS(topk_cpu({1, 4, 0, true}, logits.data(), out.data()), std::invalid_argument);
  CHECK_THROWS_AS(topk_cpu({1, 0, 1, true}, logits.data(), out.data()), std::invalid_argument);
}
