// preprocess: crop + resize (optionally letterboxed) + colour conversion + normalisation + layout + dtype, one
// kernel launch per batch (kernels/preprocess.cu) or its CPU twin when the pipeline runs on the CPU.
#include "kernels/preprocess.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/preprocess_cpu.hpp"
#include "runtime/errors.hpp"
#include "runtime/stage_registrar.hpp"
#include "stages/preprocess.hpp"
#if SLUICE_WITH_CUDA
#include "kernels/preprocess.cuh"
#endif

namespace sluice {

using kernels::ChannelOrder;
using kernels::PreprocessParams;
using kernels::YuvMatrix;

constexpr Choice<ChannelOrder> kOrderChoices[] = {
    {"rgb", ChannelOrder::rgb}, {"bgr", ChannelOrder::bgr}, {"gray", ChannelOrder::gray}};
constexpr Choice<YuvMatrix> kYuvMatrixChoices[] = {{"bt601", YuvMatrix::bt601}, {"bt709", YuvMatrix::bt709}};
constexpr Choice<bool> kYuvFullRangeChoices[] = {{"limited", false}, {"full", true}};

kernels::PreprocessParams preprocess_params(const ParamValues& p, const PayloadDesc& in, bool with_crop) {
  PreprocessParams params;
  params.batch = in.batch;
  params.in_format = in.pixel;
  params.in_width = in.width;
  params.in_height = in.height;
  params.yuv_matrix = p.choice("yuv_matrix", kYuvMatrixChoices);
  params.yuv_full_range = p.choice("yuv_range", kYuvFullRangeChoices);
  params.out_order = p.choice("order", kOrderChoices);
  params.out_width = static_cast<int>(p.integer("width"));
  params.out_height = static_cast<int>(p.integer("height"));
  params.layout = *parse_layout(p.string("layout"));
  params.dtype = *parse_dtype(p.string("dtype"));
  if (with_crop) {
    const auto& crop = p.numbers("crop");
    int* const crop_fields[4] = {&params.crop_x, &params.crop_y, &params.crop_width, &params.crop_height};
    for (std::size_t i = 0; i < 4; ++i) {
      const double v = crop[i];
      if (v != std::floor(v))
        throw ConfigError("crop values must be whole pixels (got " + std::to_string(v) + " at position " +
                          std::to_string(i + 1) + " of [x, y, width, height])");
      *crop_fields[i] = static_cast<int>(v);  // the declaration bounds it to 0..65536
    }
  }
  params.letterbox = p.boolean("letterbox");
  params.pad_value = static_cast<float>(p.number("pad_value"));
  const auto& mean = p.numbers("mean");
  const auto& std = p.numbers("std");
  for (int c = 0; c < 3; ++c) {
    params.mean[c] = static_cast<float>(mean[static_cast<std::size_t>(c)]);
    params.std[c] = static_cast<float>(std[static_cast<std::size_t>(c)]);
  }
  try {
    kernels::validate(params);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  }
  return params;
}

namespace {

class PreprocessStage final : public Stage {
 public:
  explicit PreprocessStage(const StageInit& init) : on_gpu_(init.device == Device::cuda) {
    const PayloadDesc& in = *init.input;
    if (in.kind != PayloadKind::frames) throw ConfigError("takes frames, got " + in.describe());
    if (on_gpu_ && in.memory != MemoryKind::device)
      throw ConfigError("runs on the GPU and needs its input on the device (put an upload stage before it), got " +
                        in.describe());
    params_ = preprocess_params(init.params, in, true);
    out_.kind = PayloadKind::tensor;
    out_.memory = on_gpu_ ? MemoryKind::device : MemoryKind::host;
    out_.batch = in.batch;
    out_.width = params_.out_width;
    out_.height = params_.out_height;
    out_.channels = params_.out_channels();
    out_.dtype = params_.dtype;
    out_.layout = params_.layout;
    // Where the tensor's pixels came from, for stages that map results back to the frame (detections).
    const kernels::PreprocessGeometry g = kernels::preprocess_geometry(params_);
    out_.geometry = {in.width, in.height, g.crop_x, g.crop_y, g.crop_w, g.crop_h,
                     g.img_x, g.img_y, g.img_w, g.img_h, params_.letterbox};
  }

  PayloadDesc output() const override { return out_; }
  bool uses_gpu() const override { return on_gpu_; }

  BatchLease process(Batch* in, StageContext& ctx) override {
    BatchLease out = ctx.acquire();
    if (!out) throw StageError("output pool closed");
    PreprocessParams p = params_;
    p.batch = in->count;
    const auto* src = reinterpret_cast<const std::uint8_t*>(in->memory.data());
#if SLUICE_WITH_CUDA
    if (on_gpu_) {
      kernels::preprocess_gpu(p, src, out->memory.data(), ctx.stream);
      return out;
    }
#endif
    kernels::preprocess_cpu(p, src, out->memory.data());
    return out;
  }

 private:
  bool on_gpu_;
  PreprocessParams params_;
  PayloadDesc out_;
};

}  // namespace

std::vector<ParamSpec> preprocess_param_specs(bool with_crop) {
  std::vector<ParamSpec> specs{
    {"width", ParamType::integer, "224", "output width", 1.0, 8192.0},
    {"height", ParamType::integer, "224", "output height", 1.0, 8192.0},
    {"order", ParamType::choice, "rgb", "output channel order (gray: one channel)", {}, {},
     choice_names(kOrderChoices)},
    {"layout", ParamType::choice, "nchw", "tensor layout", {}, {}, {"nchw", "nhwc"}},
    {"dtype", ParamType::choice, "f32", "tensor element type", {}, {}, {"f32", "f16", "bf16"}},
    {"letterbox", ParamType::boolean, "false",
     "keep the aspect ratio: fit the crop inside width x height, centred, and pad the border"},
    {"pad_value", ParamType::number, "114", "letterbox border value in pixel units (0..255), every channel",
     0.0, 255.0},
    {"mean", ParamType::numbers, "[0.485, 0.456, 0.406]", "per-channel mean, in units of x/255", {}, {}, {}, 3},
    {"std", ParamType::numbers, "[0.229, 0.224, 0.225]", "per-channel standard deviation (> 0)", 1e-6, {}, {}, 3},
    {"yuv_matrix", ParamType::choice, "bt601", "YUV sources: colour matrix", {}, {},
     choice_names(kYuvMatrixChoices)},
    {"yuv_range", ParamType::choice, "limited", "YUV sources: value range", {}, {},
     choice_names(kYuvFullRangeChoices)},
  };
  if (with_crop)
    specs.insert(specs.begin() + 5,  // after dtype, where `sluiced inspect` has always listed it
                 {"crop", ParamType::numbers, "[0, 0, 0, 0]",
                  "source region [x, y, width, height] to resize (width/height 0: to the frame edge; even for YUV)",
                  0.0, 65536.0, {}, 4});
  return specs;
}

static StageInfo preprocess_stage() {
  return {"preprocess",
          StageRole::transform,
          "crop, bilinear resize (or letterbox), colour conversion, (x/255 - mean)/std, layout and dtype: frames in, "
          "model tensor out",
          preprocess_param_specs(true),
          [](const StageInit& init) -> std::unique_ptr<Stage> { return std::make_unique<PreprocessStage>(init); }};
}
SLUICE_REGISTER_STAGE(preprocess_stage);

}  // namespace sluice
