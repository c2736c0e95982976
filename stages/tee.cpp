// tee: hands every batch it gets to each of its branches (pipeline `branches`; docs/stages.md, "Several sinks: a
// tee"). The runner does the work: the batch is shared by reference, not copied, and goes back to its pool when
// the last branch let go of it. The stage itself forwards its input and runs on the host without waiting for the GPU.
#include "runtime/errors.hpp"
#include "runtime/stage_registrar.hpp"

namespace sluice {
namespace {

class TeeStage final : public Stage {
 public:
  explicit TeeStage(const StageInit& init) : out_(*init.input) {}
  PayloadDesc output() const override { return out_; }
  bool forwards_input() const override { return true; }
  BatchLease process(Batch*, StageContext&) override { return {}; }

 private:
  PayloadDesc out_;
};

}  // namespace

static StageInfo tee_stage() {
  return {"tee", StageRole::transform,
          "one output to several branches: `branches` is a list of at least two branches, each a list of stages "
          "ending in a sink (or {stages, queue_depth, leaky} for the queue into it); every branch gets every batch "
          "by reference (no copy); a frame is delivered once every branch's sink delivered it",
          {},
          [](const StageInit& init) {
            if (!init.input) throw ConfigError("a tee needs an upstream stage");
            return std::make_unique<TeeStage>(init);
          }};
}
SLUICE_REGISTER_STAGE(tee_stage);

}  // namespace sluice
