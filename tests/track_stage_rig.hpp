#pragma once
// The track stage on hand-made batches of detections (host memory), as the runner drives it: for
// tests/test_track.cpp and tests/test_track_threads.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/detect.hpp"
#include "runtime/pool.hpp"
#include "tests/stage_params.hpp"

namespace sluice::test {

struct TrackStageRig {
  static constexpr int kBoxes = 8;
  PayloadDesc in_desc;
  std::shared_ptr<PipelineShared> shared = std::make_shared<PipelineShared>();
  std::unique_ptr<Stage> stage;
  std::unique_ptr<BatchPool> in_pool, out_pool;
  StageContext ctx;

  explicit TrackStageRig(const std::map<std::string, std::string>& given = {}, int batch = 4, int boxes = kBoxes) {
    in_desc.kind = PayloadKind::detections;
    in_desc.batch = batch;
    in_desc.channels = boxes;
    in_desc.classes = 2;
    const StageInfo& info = *StageRegistry::builtin().find("track");
    const ParamValues params = params_of(info, given);
    StageInit init{"track", params, in_desc};
    init.shared = shared;
    stage = info.make(init);
    in_pool = std::make_unique<BatchPool>("in", in_desc, 1, false);
    out_pool = std::make_unique<BatchPool>("out", stage->output(), 1, false);
    ctx.out_pool = out_pool.get();
  }
  // One batch: per item its frame and header count, and its boxes (written up to the payload's capacity).
  struct Item {
    FrameMeta frame;
    std::int32_t count;
    std::vector<kernels::Detection> boxes;
  };
  // The output items: header and every slot.
  std::vector<std::pair<kernels::DetectionsHeader, std::vector<kernels::Detection>>> process(
      const std::vector<Item>& items) {
    BatchLease in = in_pool->acquire(nullptr);
    in->count = static_cast<int>(items.size());
    in->frames.clear();
    for (std::size_t i = 0; i < items.size(); ++i) {
      in->frames.push_back(items[i].frame);
      const kernels::DetectionsHeader h{items[i].count, 0, 0, 0};
      std::byte* item = in->item(static_cast<int>(i));
      std::memset(item, 0, in_desc.item_bytes());
      std::memcpy(item, &h, sizeof h);
      if (!items[i].boxes.empty())
        std::memcpy(item + sizeof h, items[i].boxes.data(),
                    sizeof(kernels::Detection) *
                        std::min<std::size_t>(items[i].boxes.size(), static_cast<std::size_t>(in_desc.channels)));
    }
    BatchLease out = stage->process(in.get(), ctx);
    REQUIRE(out);
    std::vector<std::pair<kernels::DetectionsHeader, std::vector<kernels::Detection>>> result;
    for (std::size_t i = 0; i < items.size(); ++i) {
      kernels::DetectionsHeader h;
      std::memcpy(&h, out->item(static_cast<int>(i)), sizeof h);
      std::vector<kernels::Detection> slots(static_cast<std::size_t>(out->desc.channels));
      std::memcpy(slots.data(), out->item(static_cast<int>(i)) + sizeof h, sizeof(kernels::Detection) * slots.size());
      result.emplace_back(h, std::move(slots));
    }
    return result;
  }
};

inline FrameMeta track_frame(std::uint32_t source, std::uint32_t input, std::uint64_t seq) {
  FrameMeta f;
  f.source_id = source, f.input = input, f.sequence = seq, f.input_frame = seq;
  return f;
}

}  // namespace sluice::test
