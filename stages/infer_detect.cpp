#include "stages/infer_detect.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "kernels/detect_cpu.hpp"
#include "nn/graph.hpp"
#include "nn/npy.hpp"
#include "runtime/errors.hpp"

namespace sluice {
namespace {

using kernels::HeadKind;
using Shape = std::vector<std::int64_t>;

// `detect.activation`; nullopt (auto): the head's own.
constexpr Choice<std::optional<kernels::ScoreActivation>> kActivationChoices[] = {
    {"auto", std::nullopt},
    {"none", kernels::ScoreActivation::none},
    {"sigmoid", kernels::ScoreActivation::sigmoid},
    {"softmax", kernels::ScoreActivation::softmax}};

std::string shape_text(const Shape& s) {
  std::string t = "[";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string head_names() {
  std::string s;
  for (const auto& h : kernels::kHeads) s += (s.empty() ? "" : ", ") + std::string(h.name);
  return s;
}

const kernels::HeadInfo& head_of(const std::string& name) {
  for (const auto& h : kernels::kHeads)
    if (name == h.name) return h;
  if (name.empty()) throw ConfigError("output: detections needs key 'detect.head' (one of " + head_names() + ")");
  throw ConfigError("key 'detect.head': unknown head layout '" + name + "' (one of " + head_names() + ")");
}

// How many model outputs a head reads.
std::size_t outputs_taken(HeadKind k, std::size_t strides) {
  switch (k) {
    case HeadKind::yolo_anchor_free: return 1;
    case HeadKind::yolo_anchor_based: return strides;
    case HeadKind::ssd: return 2;
    case HeadKind::nms_included: return 4;
    case HeadKind::detr: return 2;
  }
  return 1;
}

[[noreturn]] void shape_error(const std::string& head, const std::string& output, const Shape& got,
                              const std::string& expected) {
  throw ConfigError("detect.head " + head + ": output '" + output + "' is " + shape_text(got) + ", expected " +
                    expected);
}

int whole(double v, const std::string& key) {
  if (v != std::floor(v)) throw ConfigError("key '" + key + "': expected whole numbers, got " + std::to_string(v));
  return static_cast<int>(v);
}

}  // namespace

std::vector<ParamSpec> detect_param_specs() {
  std::string heads = "head layout: ";
  for (const auto& h : kernels::kHeads) heads += std::string(h.name) + " (" + h.doc + "); ";
  heads.resize(heads.size() - 2);
  return {
      {"detect.head", ParamType::string, "", heads},
      {"detect.outputs", ParamType::strings, "[]",
       "model outputs the head reads, in the head's order (default: the model's outputs in order)"},
      {"detect.classes", ParamType::integer, "0",
       "classes the model tells apart (0: from the output shapes; nms_included needs it)", 0.0,
       static_cast<double>(kernels::kMaxDetectClasses)},
      {"detect.activation", ParamType::choice, "auto",
       "class score activation (auto: sigmoid for raw YOLO heads and detr, none for yolo_anchor_free with reg_max 1 "
       "and nms_included, softmax for ssd)", {}, {}, choice_names(kActivationChoices)},
      {"detect.reg_max", ParamType::integer, "1",
       "yolo_anchor_free: DFL bins per box side (1: the output holds decoded cx,cy,w,h; YOLOv8 raw heads: 16)", 1.0,
       static_cast<double>(kernels::kMaxRegMax)},
      {"detect.strides", ParamType::numbers, "[]",
       "YOLO heads: strides of the levels, in output order (e.g. [8, 16, 32]); DFL and anchor-based heads need them",
       1.0, 4096.0, {}, -1},
      {"detect.anchors", ParamType::numbers, "[]",
       "yolo_anchor_based: anchor w,h pairs in input pixels, the same count for each stride, stride by stride", 0.0,
       65536.0, {}, -1},
      {"detect.priors", ParamType::string, "",
       "ssd: .npy file of priors [A, 4] cx,cy,w,h relative to the input (relative paths: to the pipeline file)"},
      {"detect.variances", ParamType::numbers, "[0.1, 0.1, 0.2, 0.2]", "ssd: box coder variances (dx, dy, dw, dh)",
       1e-6, 100.0, {}, 4},
      {"detect.background_class", ParamType::integer, "-1",
       "ssd: the class that means no object, never reported (-1: none)", -1.0,
       static_cast<double>(kernels::kMaxDetectClasses)},
      {"detect.score_threshold", ParamType::number, "0.25", "candidates need at least this score", 0.0, 1e30},
      {"detect.class_thresholds", ParamType::numbers, "[]",
       "per-class score thresholds, one per class (replaces score_threshold)", 0.0, 1e30, {}, -1},
      {"detect.multi_label", ParamType::boolean, "false",
       "every class above its threshold is a candidate (else only the best class of each anchor; detr: true unless "
       "given)"},
      {"detect.iou_threshold", ParamType::number, "0.45",
       "class-aware NMS: a box overlapping a better one of its class by more than this is dropped", 0.0, 1.0},
      {"detect.pre_nms_top_k", ParamType::integer, "1000",
       "candidates per item entering NMS (the best by score; detr: the number of queries unless given)",
       1.0, static_cast<double>(kernels::kMaxPreNmsTopK)},
      {"detect.max_detections", ParamType::integer, "100", "boxes per item after NMS", 1.0,
       static_cast<double>(kernels::kMaxDetections)},
  };
}

std::vector<std::string> detect_output_names(const ParamValues& p, const std::vector<std::string>& model_outputs) {
  const kernels::HeadInfo& head = head_of(p.string("detect.head"));
  const std::size_t want = outputs_taken(head.kind, p.numbers("detect.strides").size());
  std::vector<std::string> names = p.strings("detect.outputs");
  if (names.empty()) {
    if (model_outputs.size() < want)
      throw ConfigError("detect.head " + std::string(head.name) + " reads " + std::to_string(want) +
                        " outputs but the model has " + std::to_string(model_outputs.size()));
    names.assign(model_outputs.begin(), model_outputs.begin() + static_cast<std::ptrdiff_t>(want));
  }
  if (names.size() != want)
    throw ConfigError("key 'detect.outputs': detect.head " + std::string(head.name) + " reads " + std::to_string(want) +
                      " outputs" + (head.kind == HeadKind::yolo_anchor_based ? " (one per stride)" : "") + ", got " +
                      std::to_string(names.size()));
  for (const auto& n : names) {
    bool found = false;
    std::string all;
    for (const auto& m : model_outputs) found |= m == n, all += (all.empty() ? "" : ", ") + m;
    if (!found) throw ConfigError("key 'detect.outputs': the model has no output '" + n + "' (it has: " + all + ")");
  }
  return names;
}

DetectSetup setup_detect(const ParamValues& p, const std::vector<std::string>& names,
                         const std::vector<Shape>& shapes, int batch, const PayloadDesc& input,
                         const std::string& priors_path) {
  const kernels::HeadInfo& head = head_of(p.string("detect.head"));
  const std::string hn = head.name;
  DetectSetup s;
  kernels::DetectParams& d = s.params;
  d.head = head.kind;
  d.input_width = input.width;
  d.input_height = input.height;
  d.reg_max = static_cast<int>(p.integer("detect.reg_max"));
  const auto& strides = p.numbers("detect.strides");
  if (strides.size() > static_cast<std::size_t>(kernels::kMaxDetectLevels))
    throw ConfigError("key 'detect.strides': at most " + std::to_string(kernels::kMaxDetectLevels) + " strides, got " +
                      std::to_string(strides.size()));
  d.levels = static_cast<int>(strides.size());
  for (std::size_t l = 0; l < strides.size(); ++l) {
    d.strides[l] = whole(strides[l], "detect.strides");
    if (input.width % d.strides[l] || input.height % d.strides[l])
      throw ConfigError("key 'detect.strides': stride " + std::to_string(d.strides[l]) +
                        " does not divide the model input " + std::to_string(input.width) + "x" +
                        std::to_string(input.height));
  }
  const std::int64_t given_classes = p.integer("detect.classes");
  auto set_classes = [&](std::int64_t from_shape, const std::string& how) {
    if (from_shape < 1 || from_shape > kernels::kMaxDetectClasses)
      throw ConfigError("detect.head " + hn + ": " + how + " gives " + std::to_string(from_shape) +
                        " classes (1.." + std::to_string(kernels::kMaxDetectClasses) + " supported)");
    if (given_classes && given_classes != from_shape)
      throw ConfigError("key 'detect.classes' is " + std::to_string(given_classes) + " but " + how + " gives " +
                        std::to_string(from_shape));
    d.classes = static_cast<int>(from_shape);
  };
  const auto check_batch = [&](std::size_t i, std::size_t rank, const std::string& expected) {
    if (shapes[i].size() != rank || shapes[i][0] != batch) shape_error(hn, names[i], shapes[i], expected);
    for (const std::int64_t v : shapes[i])
      if (v < 1) shape_error(hn, names[i], shapes[i], expected);
  };
  std::string how;
  switch (head.kind) {
    case HeadKind::yolo_anchor_free: {
      check_batch(0, 3, "[N, 4*reg_max + classes, anchors]");
      set_classes(shapes[0][1] - 4LL * d.reg_max, "its channels " + std::to_string(shapes[0][1]) + " - 4*reg_max");
      d.anchor_points = shapes[0][2];
      if (d.reg_max > 1 && d.levels == 0)
        throw ConfigError("key 'detect.strides': detect.reg_max " + std::to_string(d.reg_max) +
                          " (DFL) places anchor points by stride; give the strides, e.g. [8, 16, 32]");
      how = d.reg_max > 1 ? "DFL over " + std::to_string(d.reg_max) + " bins" : "boxes cx,cy,w,h in input pixels";
      break;
    }
    case HeadKind::yolo_anchor_based: {
      if (d.levels == 0) throw ConfigError("key 'detect.strides': yolo_anchor_based needs one stride per output");
      const auto& anchors = p.numbers("detect.anchors");
      const std::size_t per_level = anchors.size() / static_cast<std::size_t>(d.levels);
      if (anchors.empty() || anchors.size() % (2 * static_cast<std::size_t>(d.levels)) ||
          per_level / 2 > static_cast<std::size_t>(kernels::kMaxAnchorsPerLevel))
        throw ConfigError("key 'detect.anchors': expected w,h pairs, the same number (1.." +
                          std::to_string(kernels::kMaxAnchorsPerLevel) + ") for each of the " +
                          std::to_string(d.levels) + " strides, got " + std::to_string(anchors.size()) + " numbers");
      d.anchors_per_level = static_cast<int>(per_level / 2);
      for (int l = 0; l < d.levels; ++l)
        for (int k = 0; k < d.anchors_per_level; ++k)
          for (int j = 0; j < 2; ++j) {
            const double v = anchors[static_cast<std::size_t>(l) * per_level + 2 * static_cast<std::size_t>(k) + j];
            if (!(v > 0)) throw ConfigError("key 'detect.anchors': anchor sizes must be > 0, got " + std::to_string(v));
            d.anchors[l][k][j] = static_cast<float>(v);
          }
      for (int l = 0; l < d.levels; ++l) {
        const std::size_t i = static_cast<std::size_t>(l);
        const std::int64_t gh = input.height / d.strides[l], gw = input.width / d.strides[l];
        const std::string expected = "[N, " + std::to_string(d.anchors_per_level) + "*(5 + classes), " +
                                     std::to_string(gh) + ", " + std::to_string(gw) + "] for stride " +
                                     std::to_string(d.strides[l]);
        check_batch(i, 4, expected);
        if (shapes[i][2] != gh || shapes[i][3] != gw || shapes[i][1] % d.anchors_per_level)
          shape_error(hn, names[i], shapes[i], expected);
        const std::int64_t c = shapes[i][1] / d.anchors_per_level - 5;
        if (l == 0) set_classes(c, "output '" + names[i] + "'");
        else if (c != d.classes) shape_error(hn, names[i], shapes[i], expected);
      }
      d.anchor_points = kernels::expected_anchor_points(d);
      how = std::to_string(d.anchors_per_level) + " anchors per stride";
      break;
    }
    case HeadKind::ssd: {
      check_batch(0, 3, "[N, A, 4] box offsets");
      check_batch(1, 3, "[N, A, classes] scores");
      if (shapes[0][2] != 4) shape_error(hn, names[0], shapes[0], "[N, A, 4] box offsets");
      if (shapes[1][1] != shapes[0][1]) shape_error(hn, names[1], shapes[1], "[N, " + std::to_string(shapes[0][1]) + ", classes]");
      set_classes(shapes[1][2], "output '" + names[1] + "'");
      d.anchor_points = shapes[0][1];
      if (priors_path.empty()) throw ConfigError("detect.head ssd needs key 'detect.priors' (.npy [A, 4] cx,cy,w,h)");
      nn::NpyArray priors;
      try {
        priors = nn::read_npy(priors_path);
      } catch (const nn::ModelError& e) {
        throw ConfigError(std::string("key 'detect.priors': ") + e.what());
      }
      if (priors.shape != Shape{d.anchor_points, 4})
        throw ConfigError("key 'detect.priors': '" + priors_path + "' is " + shape_text(priors.shape) + ", expected [" +
                          std::to_string(d.anchor_points) + ", 4] (one prior per row of '" + names[0] + "')");
      for (const float v : priors.data)
        if (!(std::isfinite(v) && v >= -16.f && v <= 16.f))
          throw ConfigError("key 'detect.priors': '" + priors_path + "' holds " + std::to_string(v) +
                            "; priors are input-relative (-16..16)");
      s.priors = std::move(priors.data);
      how = "priors from " + priors_path;
      break;
    }
    case HeadKind::nms_included: {
      check_batch(0, 3, "[N, M, 4] boxes");
      if (shapes[0][2] != 4) shape_error(hn, names[0], shapes[0], "[N, M, 4] boxes");
      const std::int64_t m = shapes[0][1];
      for (std::size_t i : {std::size_t{1}, std::size_t{2}})
        if (shapes[i] != Shape{batch, m}) shape_error(hn, names[i], shapes[i], "[N, " + std::to_string(m) + "]");
      if (shapes[3] != Shape{batch} && shapes[3] != Shape{batch, 1}) shape_error(hn, names[3], shapes[3], "[N] or [N, 1]");
      if (!given_classes)
        throw ConfigError("detect.head nms_included needs key 'detect.classes' (the outputs do not say how many)");
      d.classes = static_cast<int>(given_classes);
      d.anchor_points = m;
      how = "the model's own NMS kept, at most " + std::to_string(m) + " rows";
      break;
    }
    case HeadKind::detr: {
      const std::string logits = "[N, Q, classes] class logits, then boxes (detect.outputs: [LOGITS, BOXES])";
      check_batch(0, 3, logits);
      check_batch(1, 3, "[N, Q, 4] boxes cx,cy,w,h relative to the input");
      if (shapes[1][2] != 4 || shapes[1][1] != shapes[0][1])
        shape_error(hn, names[1], shapes[1], "[N, " + std::to_string(shapes[0][1]) + ", 4] boxes cx,cy,w,h relative to the input");
      set_classes(shapes[0][2], "output '" + names[0] + "'");
      d.anchor_points = shapes[0][1];
      how = std::to_string(d.anchor_points) + " queries";
      break;
    }
  }
  const std::string& act = p.string("detect.activation");  // as given, for the errors below
  d.activation = p.choice("detect.activation", kActivationChoices)
                     .value_or(head.kind == HeadKind::ssd ? kernels::ScoreActivation::softmax
                               : head.kind == HeadKind::yolo_anchor_based || head.kind == HeadKind::detr ||
                                       (head.kind == HeadKind::yolo_anchor_free && d.reg_max > 1)
                                   ? kernels::ScoreActivation::sigmoid
                                   : kernels::ScoreActivation::none);
  if (head.kind == HeadKind::yolo_anchor_based && d.activation != kernels::ScoreActivation::sigmoid)
    throw ConfigError("key 'detect.activation': yolo_anchor_based scores are sigmoid(objectness) * sigmoid(class); got " + act);
  if (head.kind == HeadKind::nms_included && d.activation != kernels::ScoreActivation::none)
    throw ConfigError("key 'detect.activation': nms_included scores are used as the model gives them; got " + act);
  const auto& variances = p.numbers("detect.variances");
  for (int i = 0; i < 4; ++i) d.variances[i] = static_cast<float>(variances[static_cast<std::size_t>(i)]);
  d.background_class = static_cast<int>(p.integer("detect.background_class"));
  if (d.background_class >= d.classes)
    throw ConfigError("key 'detect.background_class': " + std::to_string(d.background_class) + " is not a class (0.." +
                      std::to_string(d.classes - 1) + ")");
  d.score_threshold = static_cast<float>(p.number("detect.score_threshold"));
  const auto& thresholds = p.numbers("detect.class_thresholds");
  if (!thresholds.empty() && thresholds.size() != static_cast<std::size_t>(d.classes))
    throw ConfigError("key 'detect.class_thresholds': one per class, " + std::to_string(d.classes) + " numbers, got " +
                      std::to_string(thresholds.size()));
  for (const double t : thresholds) s.class_thresholds.push_back(static_cast<float>(t));
  // DETR's post-processing ranks every query x class pair and keeps the best Q (one per query at most, on
  // average): the defaults when not given.
  const bool detr = head.kind == HeadKind::detr;
  d.multi_label = detr && !p.was_given("detect.multi_label") ? true : p.boolean("detect.multi_label");
  d.iou_threshold = static_cast<float>(p.number("detect.iou_threshold"));
  d.pre_nms_top_k = detr && !p.was_given("detect.pre_nms_top_k")
                        ? static_cast<int>(std::min<std::int64_t>(d.anchor_points, kernels::kMaxPreNmsTopK))
                        : static_cast<int>(p.integer("detect.pre_nms_top_k"));
  d.max_detections = static_cast<int>(p.integer("detect.max_detections"));
  const SourceGeometry& g = input.geometry;
  if (g.known()) d.map = {g.frame_width, g.frame_height, g.crop_x, g.crop_y, g.crop_w, g.crop_h, g.img_x, g.img_y, g.img_w, g.img_h};
  try {
    kernels::validate(d);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string("detect: ") + e.what());
  }
  const char* acts[] = {"none", "sigmoid", "softmax"};
  s.summary = "detect " + hn + " (" + how + "): " + std::to_string(d.classes) + " classes, " +
              std::to_string(d.anchor_points) + (head.kind == HeadKind::nms_included ? " rows" : " anchor points") +
              ", scores " + acts[static_cast<int>(d.activation)] + ", threshold " +
              (s.class_thresholds.empty() ? number(d.score_threshold) : std::string("per class")) +
              (d.multi_label ? ", multi-label" : detr ? ", best class per query" : ", best class per anchor") +
              (head.kind == HeadKind::nms_included ? std::string(", no NMS (the model's)")
               : detr                              ? std::string(", no NMS (one box per query)")
                                                   : ", class-aware NMS IoU > " + number(d.iou_threshold)) +
              ", top " + std::to_string(d.pre_nms_top_k) + (kernels::head_runs_nms(head.kind) ? " before NMS" : "") +
              ", at most " + std::to_string(d.max_detections) +
              " per frame; boxes " +
              (g.known() ? "mapped to the frame (" + g.describe() + ")"
                         : std::string("in model-input pixels (the tensor's geometry is unknown: no preprocess stage)"));
  return s;
}

}  // namespace sluice
