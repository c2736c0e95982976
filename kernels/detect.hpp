#pragma once
// Detection post-processing: a detector's raw outputs -> per item a bounded list of boxes in source-frame pixels.
// Three steps, each with a GPU kernel (detect.cuh) and a CPU twin (detect_cpu.hpp) that give the same result:
//   decode   the head's outputs -> candidates (box in model-input pixels, score, class) above the score threshold
//            (per-class thresholds when given); non-finite boxes and scores are dropped, never passed on;
//   select   the pre_nms_top_k best candidates (score descending, ties: lower candidate index first);
//   nms      class-aware greedy NMS (IoU > iou_threshold suppresses a box of the same class), the first
//            max_detections survivors mapped back through the preprocess geometry and clipped to the frame.
// Every count is bounded by the params: a model output with NaN, Inf or a huge "count" cannot overflow anything.
// Compiled as C++17 by nvcc too.
#include <cstddef>
#include <cstdint>

#include "kernels/host_device.hpp"

namespace sluice::kernels {

// One box in an item. Coordinates: x1 <= x2, y1 <= y2, in source-frame pixels (edges: a box covering the whole
// frame is 0,0,width,height). track_id is -1 until a tracker sets it.
struct Detection {
  float x1, y1, x2, y2;
  float score;
  std::int32_t class_id;
  std::int32_t track_id;
  std::int32_t reserved;  // 0 in a box (room for a secondary attribute's index); a TrackEvent in an event slot
};

// What happened to a track at this frame (the track stage, stages/track.cpp). An event slot is a Detection:
// track_id, `reserved` = the event, and a box: for track_new the box that confirmed the track (also among the
// frame's boxes), for track_lost the track's last box (score and class as the model gave them then).
enum class TrackEvent : std::int32_t {
  track_new = 1,   // the track was confirmed at this frame: its id appears for the first time
  track_lost = 2,  // the track ended (not found again within the track buffer): its id will not appear again
};
// The track stage's output holds this many slots per box of its input: the boxes, then at most as many "new"
// and as many "lost" events (a frame confirms at most one track per box, and the tracks that end at a frame
// were all matched to distinct boxes of one earlier frame).
constexpr int kTrackSlotsPerBox = 3;
static_assert(sizeof(Detection) == 32, "detections_item_bytes() counts 32 bytes per box");

// The head of each item: how many boxes follow (<= max_detections), how many candidates passed the score
// threshold before the top-k cut (saturates at INT32_MAX), and how many of them the top-k cut dropped; `events`:
// how many track events follow the boxes (slots count .. count + events - 1; 0 unless a track stage made it).
struct DetectionsHeader {
  std::int32_t count;
  std::int32_t candidates;
  std::int32_t cut;
  std::int32_t events;
};
static_assert(sizeof(DetectionsHeader) == 16, "detections_item_bytes() counts a 16-byte header");

constexpr std::size_t detections_item_bytes(int max_detections) noexcept {
  return sizeof(DetectionsHeader) + sizeof(Detection) * static_cast<std::size_t>(max_detections);
}

// The head layouts. Adding one: a row here, its decode in detect_cpu.cpp and detect.cu, its shape check in
// describe_head_shapes() (detect_cpu.cpp), and a test.
enum class HeadKind : std::uint8_t {
  yolo_anchor_free,   // YOLOv8/v11: one output [N, 4*reg_max + classes, A]
  yolo_anchor_based,  // YOLOv5/v7 raw heads: one output per stride [N, anchors*(5 + classes), H/s, W/s]
  ssd,                // SSD/RetinaNet: box offsets [N, A, 4] and class scores [N, A, classes], priors from a file
  nms_included,       // the model did NMS: boxes [N, M, 4] xyxy, scores [N, M], classes [N, M], count [N] or [N, 1]
  detr,               // DETR family (RT-DETR, DETR, D-FINE): class logits [N, Q, classes], boxes [N, Q, 4] cx,cy,w,h
                      // relative to the input; one box per query, so no NMS
};

// Whether the post-processing suppresses overlapping boxes: not where the model did (nms_included) or where its
// queries are already one box per object (detr).
SLUICE_HD constexpr bool head_runs_nms(HeadKind k) { return k != HeadKind::nms_included && k != HeadKind::detr; }

struct HeadInfo {
  HeadKind kind;
  const char* name;  // as YAML spells it (detect.head)
  const char* doc;   // what the outputs are
};

inline constexpr HeadInfo kHeads[] = {
    {HeadKind::yolo_anchor_free, "yolo_anchor_free",
     "YOLOv8/v11: one output [N, 4*reg_max + classes, A] (reg_max 1: boxes cx,cy,w,h in input pixels; >1: DFL "
     "distances per stride, anchor points from detect.strides)"},
    {HeadKind::yolo_anchor_based, "yolo_anchor_based",
     "YOLOv5/v7 raw heads: one output per stride [N, na*(5 + classes), H/s, W/s], anchors from detect.anchors, "
     "score = sigmoid(objectness) * sigmoid(class)"},
    {HeadKind::ssd, "ssd",
     "SSD/RetinaNet: box offsets [N, A, 4] (dx,dy,dw,dh against priors, detect.variances) and scores "
     "[N, A, classes]; priors cx,cy,w,h (input-relative, 0..1) from detect.priors (.npy [A, 4])"},
    {HeadKind::nms_included, "nms_included",
     "the model did NMS: boxes [N, M, 4] x1,y1,x2,y2 in input pixels, scores [N, M], classes [N, M], count [N] "
     "or [N, 1] (read as at most M)"},
    {HeadKind::detr, "detr",
     "DETR family (RT-DETR, DETR, D-FINE): class logits [N, Q, classes] and boxes [N, Q, 4] cx,cy,w,h relative to "
     "the input (0..1), in that order; no NMS: the best pre_nms_top_k of queries x classes (RT-DETR's "
     "post-processing) above the threshold"},
};

enum class ScoreActivation : std::uint8_t { none, sigmoid, softmax };

// Limits on what a pipeline may ask for (and so on what one batch may hold or take to compute).
constexpr int kMaxDetections = 4096;     // per item, after NMS
constexpr int kMaxPreNmsTopK = 16384;    // candidates per item entering NMS
constexpr int kMaxDetectClasses = 16384;
constexpr int kMaxRegMax = 64;
constexpr int kMaxDetectLevels = 8;       // strides
constexpr int kMaxAnchorsPerLevel = 16;   // yolo_anchor_based
constexpr std::int64_t kMaxAnchorPoints = 1 << 22;  // A (and M for nms_included)

// How model-input pixels map to the source frame (from the preprocess stage): a tensor pixel edge x maps to
// crop_x + (x - img_x) * crop_w / img_w, likewise y; boxes are clipped to [0, frame_width] x [0, frame_height].
// frame_width 0: unknown (boxes stay in model-input pixels, clipped to the input).
struct BoxMapping {
  int frame_width = 0, frame_height = 0;
  int crop_x = 0, crop_y = 0, crop_w = 1, crop_h = 1;
  int img_x = 0, img_y = 0, img_w = 1, img_h = 1;
};

struct DetectParams {
  HeadKind head = HeadKind::yolo_anchor_free;
  int items = 0;        // rows in this batch
  int classes = 0;      // C
  int input_width = 0;  // the model input, pixels
  int input_height = 0;
  ScoreActivation activation = ScoreActivation::none;
  int reg_max = 1;                      // yolo_anchor_free
  int levels = 0;                       // strides used
  int strides[kMaxDetectLevels] = {};   // yolo_anchor_free with reg_max > 1, yolo_anchor_based
  int anchors_per_level = 0;            // yolo_anchor_based: na
  float anchors[kMaxDetectLevels][kMaxAnchorsPerLevel][2] = {};  // w, h in input pixels
  float variances[4] = {0.1f, 0.1f, 0.2f, 0.2f};  // ssd
  int background_class = -1;            // ssd with softmax: the class that is not an object (-1: none)
  std::int64_t anchor_points = 0;       // A (nms_included: M), derived from the shapes
  float score_threshold = 0.25f;
  const float* class_thresholds = nullptr;  // host memory for the CPU twin, device memory for the kernel; or null
  bool multi_label = false;  // every class above its threshold is a candidate (else the best class per anchor)
  float iou_threshold = 0.45f;
  int pre_nms_top_k = 1000;
  int max_detections = 100;
  BoxMapping map;
};

// Throws std::invalid_argument naming the bad field and value.
void validate(const DetectParams& p);

// The number of anchor points (or rows) the head has, from the params alone (levels, strides, input size);
// -1 when the head takes it from the output shape (ssd, nms_included, and yolo_anchor_free with reg_max 1).
std::int64_t expected_anchor_points(const DetectParams& p) noexcept;

}  // namespace sluice::kernels
