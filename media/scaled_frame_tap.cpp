#include "media/scaled_frame_tap.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include <opencv2/core.hpp>

#include "media/frame_to_bgr.hpp"

namespace sluice {

ScaledFrameTap::ScaledFrameTap(int width, int height, std::size_t capacity, std::size_t max_bytes)
    : width_(width), height_(height),
      slot_bytes_(static_cast<std::size_t>(std::max(width, 0)) * static_cast<std::size_t>(std::max(height, 0)) * 3),
      max_bytes_(max_bytes), slots_(std::max<std::size_t>(capacity, 1)) {
  if (width == 0 && height == 0) return;  // sized by the first frame
  if (width <= 0 || height <= 0)
    throw std::invalid_argument("frame tap: size must be positive, got " + std::to_string(width) + "x" +
                                std::to_string(height));
}

void ScaledFrameTap::put(const FrameMeta& meta, const FrameTarget& frame) {
  if (frame.width <= 0 || frame.height <= 0 || frame.data == nullptr) return;  // nothing to keep
  std::size_t slot = 0;
  int width = 0, height = 0;
  {
    std::lock_guard lock(mu_);
    if (width_ == 0) {  // the first frame decides the size
      width_ = frame.width;
      height_ = frame.height;
      slot_bytes_ = static_cast<std::size_t>(width_) * static_cast<std::size_t>(height_) * 3;
      if (max_bytes_) slots_.resize(std::clamp<std::size_t>(max_bytes_ / slot_bytes_, 1, slots_.size()));
    }
    width = width_;
    height = height_;
    slot = slots_.size();
    if (pixels_.empty()) pixels_.resize(slot_bytes_ * slots_.size());
    std::size_t oldest = slots_.size();
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].state == State::free) {
        slot = i;
        break;
      }
      if (slots_[i].state == State::ready && (oldest == slots_.size() || slots_[i].age < slots_[oldest].age))
        oldest = i;
    }
    if (slot == slots_.size()) {
      ++evicted_;  // the oldest frame goes; or this one, when every slot is being written right now
      if (oldest == slots_.size()) return;
      slot = oldest;
    }
    slots_[slot] = Slot{meta.source_id, meta.sequence, ++clock_, State::writing, {frame.width, frame.height}};
  }
  cv::Mat dst(height, width, CV_8UC3, pixels_.data() + slot * slot_bytes_);
  try {
    frame_to_bgr(frame, dst);
  } catch (...) {
    std::lock_guard lock(mu_);
    slots_[slot].state = State::free;
    throw;
  }
  std::lock_guard lock(mu_);
  slots_[slot].state = State::ready;
}

bool ScaledFrameTap::take(std::uint32_t source_id, std::uint64_t sequence, std::vector<std::uint8_t>& bgr,
                          SourceSize* source) {
  std::lock_guard lock(mu_);
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.state != State::ready || s.source_id != source_id || s.sequence != sequence) continue;
    bgr.resize(slot_bytes_);
    std::memcpy(bgr.data(), pixels_.data() + i * slot_bytes_, slot_bytes_);
    if (source) *source = s.source;
    s.state = State::free;
    return true;
  }
  return false;
}

int ScaledFrameTap::width() const {
  std::lock_guard lock(mu_);
  return width_;
}

int ScaledFrameTap::height() const {
  std::lock_guard lock(mu_);
  return height_;
}

std::size_t ScaledFrameTap::capacity() const {
  std::lock_guard lock(mu_);
  return slots_.size();
}

std::size_t ScaledFrameTap::size() const {
  std::lock_guard lock(mu_);
  return static_cast<std::size_t>(
      std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.state != State::free; }));
}

std::uint64_t ScaledFrameTap::evicted() const {
  std::lock_guard lock(mu_);
  return evicted_;
}

}  // namespace sluice
