// upload and download: one asynchronous copy per batch on the stage's stream (a batch is contiguous, so
// one copy moves it). On the CPU, and where the input already is where it should go (frames a GPU decoder or
// the decode stage put in device memory), they forward their input untouched: counted, not copied.
#include "runtime/errors.hpp"
#include "runtime/stage_registrar.hpp"

namespace sluice {
namespace {

class CopyStage final : public Stage {
 public:
  CopyStage(const StageInit& init, MemoryKind from, MemoryKind to) {
    const PayloadDesc& in = *init.input;
    on_gpu_ = init.device == Device::cuda && in.memory != to;
    const bool from_ok = from == MemoryKind::device ? in.memory == MemoryKind::device : in.memory != MemoryKind::device;
    if (on_gpu_ && !from_ok)
      throw ConfigError(std::string("expects its input in ") + (from == MemoryKind::device ? "device" : "host") +
                        " memory, got " + in.describe());
    out_ = in;
    if (on_gpu_) out_.memory = to;
  }
  PayloadDesc output() const override { return out_; }
  bool forwards_input() const override { return !on_gpu_; }
  bool uses_gpu() const override { return on_gpu_; }

  BatchLease process(Batch* in, StageContext& ctx) override {
    if (!on_gpu_) return {};
    BatchLease out = ctx.acquire();
    if (!out) throw StageError("output pool closed");
    gpu::copy_async(out->memory.data(), in->memory.data(), in->desc.item_bytes() * static_cast<std::size_t>(in->count),
                    ctx.stream);
    return out;
  }

 private:
  bool on_gpu_;
  PayloadDesc out_;
};

}  // namespace

static StageInfo upload_stage() {
  return {"upload", StageRole::transform,
          "host to device: one async copy per batch from pinned memory on the stage's stream; pass-through on the CPU "
          "and for batches already in device memory (decode's frame_memory: device)",
          {},
          [](const StageInit& init) { return std::make_unique<CopyStage>(init, MemoryKind::pinned, MemoryKind::device); }};
}
SLUICE_REGISTER_STAGE(upload_stage);

static StageInfo download_stage() {
  return {"download", StageRole::transform,
          "device to host: one async copy per batch into pinned memory on the stage's stream; pass-through on the CPU",
          {},
          [](const StageInit& init) { return std::make_unique<CopyStage>(init, MemoryKind::device, MemoryKind::pinned); }};
}
SLUICE_REGISTER_STAGE(download_stage);

}  // namespace sluice
