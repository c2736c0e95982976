#pragma once
// A sink stage built from its declaration, and batches of classes made here to drive it (test_sinks, test_redis).
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/topk.hpp"
#include "runtime/stage.hpp"
#include "stage_params.hpp"

namespace sluice::test {

// Top-2 classes of three labelled ones per frame.
inline PayloadDesc classes_desc(int batch) {
  PayloadDesc d;
  d.kind = PayloadKind::classes;
  d.batch = batch;
  d.channels = 2;
  d.classes = 3;
  d.labels = std::make_shared<const std::vector<std::string>>(std::vector<std::string>{"bars", "shapes", "noise"});
  return d;
}

// One batch of `frames`, each with classes (frame's sequence % 3 first).
struct ClassesBatch {
  Batch b;
  ClassesBatch(const PayloadDesc& desc, const std::vector<FrameMeta>& frames) {
    b.desc = desc;
    b.count = static_cast<int>(frames.size());
    b.memory = Memory(MemoryKind::host, desc.batch_bytes());
    b.frames = frames;
    for (int i = 0; i < b.count; ++i) {
      auto* scores = reinterpret_cast<kernels::ClassScore*>(b.item(i));
      const auto best = static_cast<std::int32_t>(frames[static_cast<std::size_t>(i)].sequence % 3);
      scores[0] = {0.75f, best};
      scores[1] = {0.25f, (best + 1) % 3};
    }
  }
};

// The sink stage's declaration, as registered.
inline const StageInfo& sink_info() { return *StageRegistry::builtin().find("sink"); }

// The sink of a decode -> infer -> sink pipeline, with the pipeline's shared state (a source named "cam" as id 0).
struct SinkRig {
  std::shared_ptr<PipelineShared> shared = std::make_shared<PipelineShared>();
  ParamValues params;
  PayloadDesc desc;
  std::unique_ptr<Stage> stage;
  StageContext ctx;

  explicit SinkRig(const std::map<std::string, std::string>& given, int batch = 8)
      : params(params_of(sink_info(), given)), desc(classes_desc(batch)) {
    shared->inputs.name_source(0, "cam");
    StageInit init{"sink", params, desc};
    init.stage_names = {"decode", "infer", "sink"};
    init.index = 2;
    init.shared = shared;
    stage = sink_info().make(init);
  }
  std::string health() const { return stage->health(); }
};

}  // namespace sluice::test
