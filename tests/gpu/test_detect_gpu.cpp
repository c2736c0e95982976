// The detection kernels (decode, segmented sort, class-aware NMS, mapping) against their CPU twin on random head
// outputs (fixed seeds), every head layout, single- and multi-label, per-class thresholds, a partial batch, and
// hostile values (NaN, Inf, huge). Both keep the same candidates in the same order (score descending, then
// candidate index), so counts and classes must match exactly; boxes and scores differ only by expf/division
// rounding between host and device (a few ulp): 1e-4 relative plus 1e-3 pixels. A candidate whose score lies
// within those ulp of a threshold could flip; the seeds below have none.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/detect.cuh"
#include "kernels/detect_cpu.hpp"
#include "runtime/gpu.hpp"
#include "runtime/gpu_handles.hpp"

using namespace sluice;
using namespace sluice::kernels;

namespace {

struct Case {
  const char* name;
  DetectParams p;
  std::vector<std::size_t> output_sizes;
  std::size_t priors = 0;
  bool hostile = false;
  std::vector<float> thresholds;
};

DetectParams base(HeadKind head, int items, int classes) {
  DetectParams p;
  p.head = head;
  p.items = items;
  p.classes = classes;
  p.input_width = 128;
  p.input_height = 96;
  p.score_threshold = 0.3f;
  p.iou_threshold = 0.5f;
  p.pre_nms_top_k = 300;
  p.max_detections = 50;
  p.map = {640, 480, 0, 0, 640, 480, 0, 12, 128, 72};
  return p;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  {
    DetectParams p = base(HeadKind::yolo_anchor_free, 5, 7);
    p.anchor_points = 2000;
    out.push_back({"anchor_free decoded", p, {5ul * 11 * 2000}});
    p.multi_label = true;
    out.push_back({"anchor_free decoded multi-label", p, {5ul * 11 * 2000}, 0, false, {0.2f, 0.5f, 0.3f, 0.9f, 0.1f, 0.4f, 0.6f}});
    p.multi_label = false;
    p.items = 3;
    out.push_back({"anchor_free decoded hostile", p, {3ul * 11 * 2000}, 0, true});
  }
  {
    DetectParams p = base(HeadKind::yolo_anchor_free, 4, 5);
    p.reg_max = 16, p.levels = 3, p.strides[0] = 8, p.strides[1] = 16, p.strides[2] = 32;
    p.activation = ScoreActivation::sigmoid;
    p.anchor_points = expected_anchor_points(p);
    const std::size_t n = 4ul * (64 + 5) * static_cast<std::size_t>(p.anchor_points);
    out.push_back({"anchor_free DFL", p, {n}});
    out.push_back({"anchor_free DFL hostile", p, {n}, 0, true});
  }
  {
    DetectParams p = base(HeadKind::yolo_anchor_based, 3, 6);
    p.levels = 3, p.strides[0] = 8, p.strides[1] = 16, p.strides[2] = 32, p.anchors_per_level = 3;
    for (int l = 0; l < 3; ++l)
      for (int k = 0; k < 3; ++k) p.anchors[l][k][0] = 10.f * (l + 1) + k, p.anchors[l][k][1] = 12.f * (l + 1) + 2 * k;
    p.activation = ScoreActivation::sigmoid;
    p.score_threshold = 0.2f;
    p.anchor_points = expected_anchor_points(p);
    std::vector<std::size_t> sizes;
    for (int l = 0; l < 3; ++l) sizes.push_back(3ul * 3 * 11 * (128 / p.strides[l]) * (96 / p.strides[l]));
    out.push_back({"anchor_based", p, sizes});
    p.multi_label = true;
    out.push_back({"anchor_based multi-label hostile", p, sizes, 0, true});
  }
  {
    DetectParams p = base(HeadKind::ssd, 4, 9);
    p.anchor_points = 1500;
    p.activation = ScoreActivation::softmax;
    p.background_class = 0;
    p.score_threshold = 0.15f;
    p.multi_label = true;
    out.push_back({"ssd softmax", p, {4ul * 1500 * 4, 4ul * 1500 * 9}, 1500 * 4});
    p.activation = ScoreActivation::sigmoid;
    p.background_class = -1;
    p.score_threshold = 0.6f;
    out.push_back({"ssd sigmoid hostile", p, {4ul * 1500 * 4, 4ul * 1500 * 9}, 1500 * 4, true});
  }
  {
    DetectParams p = base(HeadKind::nms_included, 6, 4);
    p.anchor_points = 100;
    out.push_back({"nms_included hostile", p, {6ul * 100 * 4, 6ul * 100, 6ul * 100, 6ul}, 0, true});
  }
  {
    DetectParams p = base(HeadKind::detr, 5, 80);  // RT-DETR's shapes: 300 queries, COCO's 80 classes
    p.anchor_points = 300;
    p.activation = ScoreActivation::sigmoid;
    p.multi_label = true;
    p.pre_nms_top_k = 300;
    p.max_detections = 300;
    p.score_threshold = 0.5f;
    out.push_back({"detr sigmoid", p, {5ul * 300 * 80, 5ul * 300 * 4}});
    p.activation = ScoreActivation::softmax;
    p.background_class = 79;
    p.multi_label = false;
    p.score_threshold = 0.05f;
    out.push_back({"detr softmax hostile", p, {5ul * 300 * 80, 5ul * 300 * 4}, 0, true});
  }
  return out;
}

void fill(const Case& c, std::size_t which, std::vector<float>& v, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.f, 2.f);
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), 3e38f, -3e38f};
  const DetectParams& p = c.p;
  const std::size_t A = static_cast<std::size_t>(p.anchor_points);
  for (std::size_t i = 0; i < v.size(); ++i) {
    float x = normal(rng);
    if (p.head == HeadKind::yolo_anchor_free && p.reg_max == 1) {
      const std::size_t ch = (i / A) % (4 + static_cast<std::size_t>(p.classes));
      // clustered boxes: centres on a coarse grid so NMS has overlaps; scores uniform
      x = ch < 2 ? 16.f * std::floor(unit(rng) * 8.f) + normal(rng) : ch < 4 ? 10.f + 20.f * unit(rng) : unit(rng);
    } else if (p.head == HeadKind::detr && which == 1) {
      x = unit(rng);  // boxes relative to the input
    } else if (p.head == HeadKind::nms_included) {
      if (which == 0) x = 120.f * unit(rng);
      if (which == 1) x = unit(rng);
      if (which == 2) x = std::floor(unit(rng) * 6.f) - 1.f;  // -1 and 4 are not classes
      if (which == 3) x = 40.f + 100.f * unit(rng);          // above M = 100 sometimes
    }
    if (c.hostile && unit(rng) < 0.05f) x = specials[rng() % 5];
    v[i] = x;
  }
}

}  // namespace

TEST_CASE("detection kernels match their CPU twin", "[gpu][detect]") {
  std::mt19937 rng(11);
  Stream stream = Stream::create();
  for (const Case& c : cases()) {
    CAPTURE(c.name);
    std::vector<std::vector<float>> outs;
    std::vector<Memory> d_outs;
    DetectInputs host, dev;
    for (std::size_t i = 0; i < c.output_sizes.size(); ++i) {
      outs.emplace_back(c.output_sizes[i]);
      fill(c, i, outs.back(), rng);
      d_outs.emplace_back(MemoryKind::device, outs.back().size() * sizeof(float));
      gpu::copy_async(d_outs.back().data(), outs.back().data(), outs.back().size() * sizeof(float), stream.get());
      host.outputs[i] = outs.back().data();
      dev.outputs[i] = reinterpret_cast<const float*>(d_outs.back().data());
    }
    std::vector<float> priors(c.priors);
    std::uniform_real_distribution<float> unit(0.05f, 0.9f);
    for (float& v : priors) v = unit(rng);
    host.priors = priors.empty() ? nullptr : priors.data();
    DetectParams p = c.p;
    p.class_thresholds = c.thresholds.empty() ? nullptr : c.thresholds.data();
    validate(p);
    const std::size_t item = detections_item_bytes(p.max_detections);
    std::vector<std::byte> want(item * static_cast<std::size_t>(p.items)), got(want.size());
    DetectWorkspaceCpu ws_cpu;
    detect_cpu(p, host, want.data(), ws_cpu);

    DetectParams workspace_params = c.p;
    workspace_params.items = p.items + 2;  // room for more: the kernels must handle a partial batch
    DetectWorkspaceGpu ws(workspace_params, c.thresholds, priors, stream.get());
    Memory d_out(MemoryKind::device, got.size());
    detect_gpu(c.p, dev, d_out.data(), ws, stream.get());
    gpu::copy_async(got.data(), d_out.data(), got.size(), stream.get());
    gpu::stream_synchronize(stream.get());
    int total = 0;
    for (int n = 0; n < p.items; ++n) {
      CAPTURE(n);
      DetectionsHeader hw, hg;
      std::memcpy(&hw, want.data() + item * n, sizeof hw);
      std::memcpy(&hg, got.data() + item * n, sizeof hg);
      REQUIRE(hg.count == hw.count);
      REQUIRE(hg.candidates == hw.candidates);
      REQUIRE(hg.cut == hw.cut);
      total += hw.count;
      for (int i = 0; i < p.max_detections; ++i) {
        CAPTURE(i);
        Detection w, g;
        std::memcpy(&w, want.data() + item * n + sizeof hw + sizeof w * i, sizeof w);
        std::memcpy(&g, got.data() + item * n + sizeof hw + sizeof g * i, sizeof g);
        if (i >= hw.count) {  // the tail is zero on both
          REQUIRE(std::memcmp(&w, &g, sizeof w) == 0);
          continue;
        }
        REQUIRE(g.class_id == w.class_id);
        REQUIRE(g.track_id == -1);
        REQUIRE(std::abs(g.score - w.score) <= 1e-4f * std::abs(w.score) + 1e-6f);
        const float gb[4] = {g.x1, g.y1, g.x2, g.y2}, wb[4] = {w.x1, w.y1, w.x2, w.y2};
        for (int k = 0; k < 4; ++k) REQUIRE(std::abs(gb[k] - wb[k]) <= 1e-4f * std::abs(wb[k]) + 1e-3f);
      }
    }
    CHECK(total > 0);  // the case exercises the selection: some boxes come through
  }
}
