// classify_boxes: a secondary model on each detected box (DeepStream's secondary GIE). Every box of a batch that
// passes the filters (detector class, minimum size) is cropped from the frame it was found in (Batch::pictures:
// the frames the preprocess stage read, kept by reference), resized and normalised as the preprocess stage does
// (kernels/roi_crop*); the crops of all frames and sources of the batch go through an image classifier together
// (the infer stage with output: classes, run inside this one), and each box gets the model's top-k as an attribute
// (records: detections[].attributes.<name>). The boxes are read on the host (after download); on the GPU the crops,
// the model and the scatter of the scores into the records (pinned memory, written in place) run on this stage's
// stream, so the host never waits for them.
#include <algorithm>
#include <charconv>
#include <cstring>
#include <set>
#include <spdlog/spdlog.h>

#include "kernels/detect.hpp"
#include "kernels/roi_crop_cpu.hpp"
#include "kernels/scatter_scores.hpp"
#include "runtime/errors.hpp"
#include "runtime/stage_registrar.hpp"
#include "stages/infer.hpp"
#include "stages/preprocess.hpp"
#if SLUICE_WITH_CUDA
#include "kernels/roi_crop.cuh"
#include "kernels/scatter_scores.cuh"
#endif

namespace sluice {
namespace {

using kernels::ClassScore;
using kernels::Detection;
using kernels::DetectionsHeader;
using kernels::RoiRect;

// The infer stage's parameters that classify_boxes passes on to the classifier it runs (declared there once).
constexpr const char* kClassifierParams[] = {"model", "output_name", "precision", "top_k", "softmax", "labels",
                                             "algo_cache", "cuda_graph", "cpu_threads"};

// The classifier's parameters: what the pipeline gave for kClassifierParams, the infer stage's defaults for the
// rest, and output: classes.
ParamValues classifier_params(const ParamValues& given) {
  ParamValues values;
  for (const ParamSpec& spec : infer_stage().params) {
    if (given.all().count(spec.name)) {
      values.set(spec.name, given.all().at(spec.name), given.was_given(spec.name));
      continue;
    }
    std::string error;
    const auto parsed = parse_param(spec, spec.default_value, error);
    values.set(spec.name, parsed ? *parsed : ParamValue(std::string()), false);
  }
  values.set("output", std::string("classes"), true);
  return values;
}

// The detector classes named in `classes` (labels, or indices when the detector has no labels file or a name is
// a number), as a set; empty: every class.
std::set<std::int32_t> chosen_classes(const std::vector<std::string>& names, const PayloadDesc& in) {
  std::set<std::int32_t> ids;
  for (const std::string& name : names) {
    if (in.labels) {
      const auto it = std::find(in.labels->begin(), in.labels->end(), name);
      if (it != in.labels->end()) {
        ids.insert(static_cast<std::int32_t>(it - in.labels->begin()));
        continue;
      }
    }
    int id = -1;
    const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), id);
    if (ec != std::errc() || end != name.data() + name.size() || id < 0 || id >= in.classes) {
      std::string known;
      if (in.labels)
        for (std::size_t i = 0; i < in.labels->size() && i < 20; ++i) known += (i ? ", " : "") + (*in.labels)[i];
      throw ConfigError("classes: '" + name + "' is neither a label of the detector" +
                        (in.labels ? " (" + known + (in.labels->size() > 20 ? ", ..." : "") + ")" : " (it has no labels file)") +
                        " nor a class index 0.." + std::to_string(in.classes - 1));
    }
    ids.insert(id);
  }
  return ids;
}

class ClassifyBoxesStage final : public Stage {
 public:
  explicit ClassifyBoxesStage(const StageInit& init) : on_gpu_(init.device == Device::cuda) {
    const PayloadDesc& in = *init.input;
    if (in.kind != PayloadKind::detections)
      throw ConfigError("classifies detected boxes: needs detections (the infer stage's output: detections), got " +
                        in.describe());
    if (in.memory == MemoryKind::device)
      throw ConfigError("reads the boxes on the host: put it after download (its input is " + in.describe() + ")");
    if (!init.pictures)
      throw ConfigError("crops each box from the frame it was found in, and no frames are kept for it: it needs a "
                        "preprocess stage before it on the trunk (the pipeline's stages before any tee)");
    pictures_ = *init.pictures;
    if (!in.geometry.known() || in.geometry.frame_width != pictures_.width ||
        in.geometry.frame_height != pictures_.height)
      throw ConfigError("its boxes are in pixels of " + in.geometry.describe() + ", not of the " +
                        pictures_.describe() + " they would be cropped from");
    if (on_gpu_ != (pictures_.memory == MemoryKind::device))
      throw ConfigError(std::string("runs on the ") + (on_gpu_ ? "GPU" : "CPU") + " but the frames are " +
                        pictures_.describe());
    const ParamValues& p = init.params;
    crop_ = preprocess_params(p, pictures_, false);
    crop_batch_ = static_cast<int>(p.integer("crop_batch"));
    crop_.batch = crop_batch_;
    try {
      kernels::validate_roi_crop(crop_, pictures_.batch);
    } catch (const std::invalid_argument& e) {
      throw ConfigError(e.what());
    }
    max_boxes_ = static_cast<int>(p.integer("max_boxes"));
    min_width_ = static_cast<float>(p.number("min_width"));
    min_height_ = static_cast<float>(p.number("min_height"));
    classes_ = chosen_classes(p.strings("classes"), in);
    attribute_ = p.string("attribute").empty() ? init.name : p.string("attribute");
    const bool plain = attribute_.size() <= 64 && std::all_of(attribute_.begin(), attribute_.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    });
    if (!plain)  // a key in JSON records and a field name in .npy headers
      throw ConfigError("attribute '" + attribute_ + "': use at most 64 letters, digits, '_' or '-'" +
                        (p.string("attribute").empty() ? " (it defaults to the stage's name; set `attribute`)" : ""));
    for (const char* field : {"count", "candidates", "cut", "events", "boxes"})  // the npy sink's other fields
      if (attribute_ == field)
        throw ConfigError("attribute '" + attribute_ + "' is a name the detections already use (set `attribute`)");
    for (const BoxAttribute& a : in.attributes)
      if (a.name == attribute_)
        throw ConfigError("attribute '" + attribute_ + "' is already set by a stage before it (name this one's "
                          "`attribute` differently)");

    crops_desc_.kind = PayloadKind::tensor;
    crops_desc_.memory = on_gpu_ ? MemoryKind::device : MemoryKind::host;
    crops_desc_.batch = crop_batch_;
    crops_desc_.width = crop_.out_width;
    crops_desc_.height = crop_.out_height;
    crops_desc_.channels = crop_.out_channels();
    crops_desc_.dtype = crop_.dtype;
    crops_desc_.layout = crop_.layout;
    classifier_values_ = classifier_params(p);
    StageInit sub{init.name, classifier_values_, crops_desc_, init.device, crop_batch_, 0, init.stage_names,
                  init.index, init.pipeline_file, init.shared, init.state_dir, 0};
    classifier_ = infer_stage().make(sub);
    scores_desc_ = classifier_->output();
    k_ = scores_desc_.channels;
    model_ = p.string("model");

    in_item_bytes_ = in.item_bytes();
    out_ = in;
    out_.memory = on_gpu_ ? MemoryKind::pinned : MemoryKind::host;  // the GPU writes the scores in place
    out_.attributes.push_back({attribute_, k_, scores_desc_.classes, scores_desc_.labels});
    block_offset_ = out_.attribute_offset(out_.attributes.size() - 1);
  }

  PayloadDesc output() const override { return out_; }
  bool uses_gpu() const override { return on_gpu_; }
  bool reads_pictures() const override { return true; }

  std::string plan_note() const override {
    std::string which = "every class";
    if (!classes_.empty()) {
      which = "classes";
      for (const std::int32_t c : classes_)
        which += " " + (out_.labels && static_cast<std::size_t>(c) < out_.labels->size() ? (*out_.labels)[static_cast<std::size_t>(c)]
                                                                                         : std::to_string(c));
    }
    char sizes[160];
    std::snprintf(sizes, sizeof sizes, "boxes at least %gx%g px, up to %d per batch", static_cast<double>(min_width_),
                  static_cast<double>(min_height_), max_boxes_);
    return "crops " + which + " (" + sizes + ") from the " + pictures_.describe() + " kept by reference, " +
           (crop_.letterbox ? "letterboxed" : "stretched") + " to " + std::to_string(crop_.out_width) + "x" +
           std::to_string(crop_.out_height) + "; '" + model_ + "' on up to " + std::to_string(crop_batch_) +
           " crops at a time: attribute '" + attribute_ + "' = its top-" + std::to_string(k_) + " of " +
           std::to_string(scores_desc_.classes) + " classes";
  }

  void open(StageContext& ctx) override {
    sub_ctx_.stream = ctx.stream;
    sub_ctx_.stop = ctx.stop;
    sub_ctx_.pause = ctx.pause;
    scores_pool_ = std::make_unique<BatchPool>(attribute_ + " scores", scores_desc_, 1, false);  // one stream: no events
    sub_ctx_.out_pool = scores_pool_.get();
    classifier_->open(sub_ctx_);
    crops_.desc = crops_desc_;
    crops_.memory = Memory(crops_desc_.memory, crops_desc_.batch_bytes());
    const auto boxes = static_cast<std::size_t>(max_boxes_);
    const MemoryKind staging = on_gpu_ ? MemoryKind::pinned : MemoryKind::host;
    rects_host_ = Memory(staging, boxes * sizeof(RoiRect));
    offsets_host_ = Memory(staging, boxes * sizeof(std::uint64_t));
    if (on_gpu_) {
      rects_device_ = Memory(MemoryKind::device, boxes * sizeof(RoiRect));
      offsets_device_ = Memory(MemoryKind::device, boxes * sizeof(std::uint64_t));
      staged_ = Event::create();
    }
  }

  std::string warm_up_plan() const override { return classifier_->warm_up_plan(); }
  void warm_up(StageContext&) override { classifier_->warm_up(sub_ctx_); }

  BatchLease process(Batch* in, StageContext& ctx) override {
    const Batch* pictures = in->pictures;
    if (!pictures || pictures->count != in->count)
      throw StageError("the frames of the batch's boxes are missing (" + std::to_string(pictures ? pictures->count : 0) +
                       " pictures for " + std::to_string(in->count) + " frames)");
    BatchLease out = ctx.acquire_for_host();  // the boxes are copied on the host, the scores written by the GPU
    if (!out) throw StageError("output pool closed");
    if (staged_pending_) gpu::event_synchronize(staged_.get());  // the last batch's rects have left the staging
    staged_pending_ = false;
    auto* rects = reinterpret_cast<RoiRect*>(rects_host_.data());
    auto* offsets = reinterpret_cast<std::uint64_t*>(offsets_host_.data());
    const std::size_t out_item = out_.item_bytes(), per_slot = sizeof(ClassScore) * static_cast<std::size_t>(k_);
    const int slots = out_.channels;
    const bool yuv = kernels::is_yuv(pictures_.pixel);
    int n = 0, over = 0;
    for (int i = 0; i < in->count; ++i) {
      std::byte* item = out->item(i);
      std::memcpy(item, in->item(i), in_item_bytes_);
      auto* unset = reinterpret_cast<ClassScore*>(item + block_offset_);
      std::fill(unset, unset + static_cast<std::size_t>(slots) * static_cast<std::size_t>(k_), ClassScore{0.f, -1});
      DetectionsHeader h;
      std::memcpy(&h, item, sizeof h);
      const int boxes = std::clamp(h.count, 0, slots);
      const auto* d = reinterpret_cast<const Detection*>(item + sizeof h);
      for (int j = 0; j < boxes; ++j) {
        if (!classes_.empty() && !classes_.count(d[j].class_id)) continue;
        if (!(d[j].x2 - d[j].x1 >= min_width_) || !(d[j].y2 - d[j].y1 >= min_height_)) continue;  // NaN: skipped
        const RoiRect r = kernels::roi_rect_from_box(i, d[j].x1, d[j].y1, d[j].x2, d[j].y2, pictures_.width,
                                                     pictures_.height, yuv);
        if (!kernels::roi_rect_usable(r, pictures->count, pictures_.width, pictures_.height, yuv)) continue;
        if (n == max_boxes_) {
          ++over;
          continue;
        }
        rects[n] = r;
        offsets[n] = static_cast<std::uint64_t>(i) * out_item + block_offset_ + static_cast<std::uint64_t>(j) * per_slot;
        ++n;
      }
    }
    if (over > 0) warn_over_limit(over);
    const auto* frames = reinterpret_cast<const std::uint8_t*>(pictures->memory.data());
#if SLUICE_WITH_CUDA
    if (on_gpu_) {
      if (n == 0) return out;
      gpu::copy_async(rects_device_.data(), rects, sizeof(RoiRect) * static_cast<std::size_t>(n), ctx.stream);
      gpu::copy_async(offsets_device_.data(), offsets, sizeof(std::uint64_t) * static_cast<std::size_t>(n), ctx.stream);
      gpu::event_record(staged_.get(), ctx.stream);
      staged_pending_ = true;
      const auto* rects_device = reinterpret_cast<const RoiRect*>(rects_device_.data());
      const auto* offsets_device = reinterpret_cast<const std::uint64_t*>(offsets_device_.data());
      for (int first = 0; first < n; first += crop_batch_) {
        kernels::PreprocessParams p = crop_;
        p.batch = std::min(crop_batch_, n - first);
        kernels::roi_crop_gpu(p, frames, pictures->count, rects_device + first, nullptr, crops_.memory.data(), ctx.stream);
        const BatchLease scores = classify(p.batch);
        kernels::scatter_scores_gpu(reinterpret_cast<const ClassScore*>(scores->memory.data()), k_,
                                    offsets_device + first, p.batch, out->memory.data(), ctx.stream);
      }
      return out;
    }
#endif
    for (int first = 0; first < n; first += crop_batch_) {
      kernels::PreprocessParams p = crop_;
      p.batch = std::min(crop_batch_, n - first);
      kernels::roi_crop_cpu(p, frames, pictures->count, rects + first, p.batch, crops_.memory.data());
      const BatchLease scores = classify(p.batch);
      kernels::scatter_scores_cpu(reinterpret_cast<const ClassScore*>(scores->memory.data()), k_, offsets + first,
                                  p.batch, out->memory.data());
    }
    return out;
  }

  void close(StageContext&) override {
    classifier_->close(sub_ctx_);
    crops_.memory = Memory();
    rects_device_ = Memory();
    offsets_device_ = Memory();
  }

 private:
  // The classifier on the first `count` crops: their top-k scores, in the classifier's own one-slot pool.
  BatchLease classify(int count) {
    crops_.count = count;
    BatchLease scores = classifier_->process(&crops_, sub_ctx_);
    if (!scores) throw StageError("the classifier gave no scores");
    return scores;
  }

  void warn_over_limit(int over) {
    const std::uint64_t before = over_limit_;
    over_limit_ += static_cast<std::uint64_t>(over);
    if (before == 0 || before / 1000 != over_limit_ / 1000)
      spdlog::warn("classify_boxes '{}': {} boxes so far left unclassified: more than max_boxes ({}) in a batch",
                   attribute_, over_limit_, max_boxes_);
  }

  bool on_gpu_;
  PayloadDesc pictures_, out_, crops_desc_, scores_desc_;
  kernels::PreprocessParams crop_;
  int crop_batch_ = 1, max_boxes_ = 1, k_ = 1;
  float min_width_ = 0, min_height_ = 0;
  std::set<std::int32_t> classes_;
  std::string attribute_, model_;
  std::size_t in_item_bytes_ = 0, block_offset_ = 0;
  ParamValues classifier_values_;
  std::unique_ptr<Stage> classifier_;  // the infer stage, output: classes, on crops_
  StageContext sub_ctx_;               // the classifier's: this stage's stream, its own scores pool
  std::unique_ptr<BatchPool> scores_pool_;
  Batch crops_;                        // the crop tensors of up to crop_batch_ boxes
  Memory rects_host_, offsets_host_, rects_device_, offsets_device_;
  Event staged_;  // recorded after the rects and offsets were copied from their staging to the device
  bool staged_pending_ = false;
  std::uint64_t over_limit_ = 0;
};

}  // namespace

static StageInfo classify_boxes_stage() {
  StageInfo info{"classify_boxes",
                 StageRole::transform,
                 "a secondary classifier on each detected box: crops the boxes from the frames they were found in "
                 "(kept by reference since preprocess), resizes and normalises them as preprocess does, runs an ONNX "
                 "image classifier on the crops of the whole batch and attaches its top-k to each box (detections in, "
                 "detections with an attribute out)",
                 {
                     {"attribute", ParamType::string, "",
                      "the attribute's name in the records (detections[].attributes.NAME; default: the stage's name)"},
                     {"classes", ParamType::strings, "[]",
                      "detector classes to classify, by label or index (empty: every class)"},
                     {"min_width", ParamType::number, "0", "skip boxes narrower than this, in frame pixels", 0.0, 65536.0},
                     {"min_height", ParamType::number, "0", "skip boxes lower than this, in frame pixels", 0.0, 65536.0},
                     {"max_boxes", ParamType::integer, "256",
                      "boxes classified per batch at most (across its frames); the rest stay unclassified, with a "
                      "warning", 1.0, 65536.0},
                     {"crop_batch", ParamType::integer, "16", "crops the classifier runs at once (its batch size)",
                      1.0, 1024.0},
                 },
                 [](const StageInit& init) -> std::unique_ptr<Stage> { return std::make_unique<ClassifyBoxesStage>(init); }};
  for (ParamSpec& spec : preprocess_param_specs(false)) {
    spec.doc = "crops: " + spec.doc;
    info.params.push_back(std::move(spec));
  }
  for (ParamSpec spec : infer_stage().params) {
    if (std::find(std::begin(kClassifierParams), std::end(kClassifierParams), spec.name) == std::end(kClassifierParams))
      continue;
    for (const std::string_view scope : {"classes, detections: ", "classes: "})  // infer's output kinds: here, classes
      if (spec.doc.rfind(scope, 0) == 0) spec.doc.erase(0, scope.size());
    info.params.push_back(std::move(spec));
  }
  return info;
}
SLUICE_REGISTER_STAGE(classify_boxes_stage);

}  // namespace sluice
