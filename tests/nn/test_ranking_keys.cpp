// nn/ranking.hpp's rank_key, which the CUDA TopK of long rows sorts: a stable sort of (key, index) pairs must give
// comes_before's order exactly (NaN, -0/+0, infinities, ties), also when the low bits the f16/bf16 sorts skip are
// skipped: keys equal above them are values that tie.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/half.hpp"
#include "nn/ranking.hpp"

using namespace sluice::nn;

namespace {

enum class Held { f32, f16, bf16 };

std::vector<float> values(std::uint32_t seed, Held held, std::size_t n) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> wide(-1000.f, 1000.f);
  std::vector<float> v(n);
  for (auto& x : v) {
    switch (rng() % 12) {
      case 0: x = std::nanf(""); break;
      case 1: x = -std::nanf(""); break;
      case 2: x = -0.f; break;
      case 3: x = 0.f; break;
      case 4: x = std::numeric_limits<float>::infinity(); break;
      case 5: x = -std::numeric_limits<float>::infinity(); break;
      case 6: x = std::numeric_limits<float>::denorm_min() * static_cast<float>(rng() % 5); break;
      case 7: x = static_cast<float>(static_cast<int>(rng() % 9) - 4) / 2; break;  // ties
      default: x = wide(rng) * std::pow(10.f, static_cast<float>(static_cast<int>(rng() % 7) - 4)); break;
    }
    if (held == Held::f16) x = sluice::kernels::half_bits_to_float(sluice::kernels::float_to_half_bits(x));
    if (held == Held::bf16) x = sluice::kernels::bf16_bits_to_float(sluice::kernels::float_to_bf16_bits(x));
  }
  return v;
}

}  // namespace

TEST_CASE("rank_key sorted stably is comes_before's order for TopK, NaN, -0 and ties included", "[nn][ranking]") {
  for (const Held held : {Held::f32, Held::f16, Held::bf16})
    for (const bool largest : {true, false}) {
      const RankOrder o = top_k_order(largest);
      const int skip = held == Held::f16 ? kRankKeySameBitsF16 : held == Held::bf16 ? kRankKeySameBitsBf16 : 0;
      const auto v = values(static_cast<std::uint32_t>(10 + static_cast<int>(held) * 2 + largest), held, 3000);
      INFO("held " << static_cast<int>(held) << " largest " << largest);
      std::vector<std::int64_t> want(v.size()), got(v.size());
      std::iota(want.begin(), want.end(), 0);
      std::iota(got.begin(), got.end(), 0);
      std::sort(want.begin(), want.end(), [&](std::int64_t a, std::int64_t b) {
        return comes_before(v[static_cast<std::size_t>(a)], a, v[static_cast<std::size_t>(b)], b, o);
      });
      std::vector<std::uint32_t> key(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) key[i] = rank_key(v[i], o);
      std::stable_sort(got.begin(), got.end(), [&](std::int64_t a, std::int64_t b) {
        return (key[static_cast<std::size_t>(a)] >> skip) < (key[static_cast<std::size_t>(b)] >> skip);
      });
      CHECK(got == want);
      // Neighbours in the sorted order: equal keys (above the skipped bits) exactly where the values tie.
      std::size_t wrong = 0;
      for (std::size_t i = 1; i < got.size(); ++i) {
        const auto a = static_cast<std::size_t>(got[i - 1]), b = static_cast<std::size_t>(got[i]);
        const bool tie = (std::isnan(v[a]) && std::isnan(v[b])) || v[a] == v[b];
        wrong += tie != ((key[a] >> skip) == (key[b] >> skip));
      }
      CHECK(wrong == 0);
    }
}
