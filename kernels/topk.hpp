#pragma once
// Classification post-processing: per item, the k best classes of a row of logits, best first, with their
// softmax probability (or the raw logit). Selection is on the logits (softmax keeps their order); ties go to the
// lower class index, so the GPU kernel and its CPU twin pick the same classes. Compiled as C++17 by nvcc too.
#include <cstdint>

namespace sluice::kernels {

struct ClassScore {
  float score;         // softmax probability, or the logit when softmax is off
  std::int32_t index;  // class index in the model's output
};
static_assert(sizeof(ClassScore) == 8, "PayloadDesc::item_bytes() counts 8 bytes per class entry");

struct TopKParams {
  int items = 0;    // rows
  int classes = 0;  // logits per row (contiguous, f32)
  int k = 1;        // 1 <= k <= min(classes, kMaxTopK)
  bool softmax = true;
};

constexpr int kMaxTopK = 32;

// Throws std::invalid_argument naming the bad field.
void validate(const TopKParams& p);

// CPU twin: logits [items x classes] -> out [items x k].
void topk_cpu(const TopKParams& p, const float* logits, ClassScore* out);

}  // namespace sluice::kernels
