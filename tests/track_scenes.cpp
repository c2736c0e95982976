#include "tests/track_scenes.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

namespace sluice::test {
namespace {

struct Object {
  float x, y, w, h, vx, vy, growth;
  int class_id;
};

}  // namespace

std::vector<std::vector<kernels::Detection>> make_scene(const SceneParams& p, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const auto uniform = [&](float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); };
  const auto chance = [&](float q) { return uniform(0, 1) < q; };
  std::normal_distribution<float> noise(0, p.noise);
  const float area_w = p.crowd ? p.width / 2 : p.width, area_h = p.crowd ? p.height / 2 : p.height;
  const auto spawn = [&] {
    // Within the area (large objects: max_side near the frame's size).
    const float w = std::min(uniform(p.min_side, p.max_side), area_w);
    const float h = std::min(std::clamp(w * uniform(0.5f, 2.5f), p.min_side, 2 * p.max_side), area_h);
    return Object{uniform(0, area_w - w), uniform(0, area_h - h), w, h, uniform(-p.max_speed, p.max_speed),
                  uniform(-p.max_speed, p.max_speed), uniform(-0.003f, 0.003f),
                  std::uniform_int_distribution<int>(0, 3)(rng)};
  };
  std::vector<Object> objects;
  for (int i = 0; i < p.objects; ++i) objects.push_back(spawn());

  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const kernels::Detection hostile[] = {{nan, 0, 10, 10, 0.9f, 0, 0, 0},     {0, 0, inf, 10, 0.9f, 0, 0, 0},
                                        {0, 0, 10, 10, nan, 0, 0, 0},        {10, 0, 0, 10, 0.9f, 0, 0, 0},
                                        {5, 5, 5, 5, 0.9f, 0, 0, 0},         {-3e38f, 0, 3e38f, 10, 0.9f, 0, 0, 0},
                                        {0, 0, 2e7f, 10, 0.9f, 0, 0, 0},     {0, 0, 10, 10, -inf, 0, 0, 0}};

  std::vector<std::vector<kernels::Detection>> frames(static_cast<std::size_t>(std::max(p.frames, 0)));
  for (auto& boxes : frames) {
    for (Object& o : objects) {
      if (chance(p.turnover)) o = spawn();
      o.x += o.vx, o.y += o.vy;
      o.w *= 1 + o.growth, o.h *= 1 + o.growth;
      if (o.x < 0 || o.x + o.w > area_w) o.vx = -o.vx;
      if (o.y < 0 || o.y + o.h > area_h) o.vy = -o.vy;
      if (chance(p.missed)) continue;
      if (p.churn > 0 && chance(p.churn)) {
        const float w = uniform(p.min_side, p.churn_side), h = uniform(p.min_side, p.churn_side);
        const float x = uniform(0, std::max(p.width - w, 0.0f)), y = uniform(0, std::max(p.height - h, 0.0f));
        boxes.push_back({x, y, x + w, y + h, uniform(0.05f, 1.0f), o.class_id, -1, 0});
        continue;
      }
      const float score = chance(p.low_score) ? uniform(0.1f, 0.5f) : uniform(0.5f, 0.98f);
      const kernels::Detection d{o.x + noise(rng), o.y + noise(rng), o.x + o.w + noise(rng), o.y + o.h + noise(rng),
                                 score, o.class_id, -1, 0};
      boxes.push_back(d);
      if (chance(p.duplicates)) boxes.push_back(d);
    }
    const int fp = static_cast<int>(p.false_positives * static_cast<float>(objects.size()) + uniform(0, 1));
    for (int i = 0; i < fp; ++i) {
      const float w = std::min(uniform(p.min_side, p.max_side), area_w);
      const float h = std::min(uniform(p.min_side, p.max_side), area_h);
      const float x = uniform(0, area_w - w), y = uniform(0, area_h - h);
      boxes.push_back({x, y, x + w, y + h, uniform(0.05f, 0.9f), 0, -1, 0});
    }
    if (chance(p.hostile))
      boxes.push_back(hostile[std::uniform_int_distribution<std::size_t>(0, std::size(hostile) - 1)(rng)]);
    if (chance(p.quantised))
      for (kernels::Detection& d : boxes)
        if (std::isfinite(d.score)) d.score = std::round(d.score * 20) / 20;
    std::shuffle(boxes.begin(), boxes.end(), rng);
  }
  return frames;
}

}  // namespace sluice::test
