#include "media/jpeg_thumbnail_tap.hpp"

#include <algorithm>
#include <vector>

#include <opencv2/imgcodecs.hpp>

#include "media/frame_to_bgr.hpp"
#include "runtime/stats.hpp"

namespace sluice {

namespace {

std::int64_t ns(std::chrono::milliseconds d) { return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(); }

// The media library's thumbnails are the program's (runtime/thumbnail_tap.hpp): registered when it is linked.
const bool registered = [] {
  thumbnail_tap_factory() = [] { return std::make_shared<JpegThumbnailTap>(); };
  return true;
}();

}  // namespace

constexpr std::int64_t kDrawnWinsNs = 2'000'000'000;

void JpegThumbnailTap::put(const FrameMeta& meta, const FrameTarget& frame) { keep(meta, frame, false); }
void JpegThumbnailTap::put_drawn(const FrameMeta& meta, const FrameTarget& frame) { keep(meta, frame, true); }

void JpegThumbnailTap::keep(const FrameMeta& meta, const FrameTarget& frame, bool drawn) {
  const std::int64_t now = now_ns();
  if (now > any_watched_until_ns_.load(std::memory_order_relaxed)) return;  // nobody is looking: no cost
  if (frame.device || frame.data == nullptr || frame.width <= 0 || frame.height <= 0) return;
  {
    std::lock_guard lock(mu_);
    const auto it = entries_.find(meta.source_id);
    if (it == entries_.end()) return;
    Entry& e = it->second;
    if (drawn) e.drawn_until_ns = now + kDrawnWinsNs;
    else if (now < e.drawn_until_ns) return;
    if (!e.wanted || now > e.watched_until_ns || e.converting || now - e.last_kept_ns < ns(settings_.min_interval))
      return;
    e.wanted = false;  // the next frame is kept once someone has asked again: conversions follow the viewers' pace
    e.converting = true;
    e.last_kept_ns = now;
  }
  const double scale = std::min(1.0, static_cast<double>(settings_.max_side) / std::max(frame.width, frame.height));
  const int width = std::max(2, static_cast<int>(frame.width * scale) & ~1);
  const int height = std::max(2, static_cast<int>(frame.height * scale) & ~1);
  cv::Mat bgr(height, width, CV_8UC3);
  bool ok = true;
  try {
    frame_to_bgr(frame, bgr);
  } catch (...) {
    ok = false;  // a frame OpenCV cannot convert is simply not shown; the source goes on
  }
  std::lock_guard lock(mu_);
  const auto it = entries_.find(meta.source_id);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  e.converting = false;
  if (!ok) return;
  e.bgr = std::move(bgr);
  e.sequence = meta.sequence;
  e.have = true;
  e.drawn = drawn;
  e.encoded = false;
  kept_.fetch_add(1, std::memory_order_relaxed);
}

std::optional<ThumbnailTap::Picture> JpegThumbnailTap::jpeg(std::uint32_t source_id) {
  const std::int64_t now = now_ns();
  const std::int64_t until = now + ns(settings_.watch_for);
  cv::Mat bgr;
  std::uint64_t sequence = 0;
  bool drawn = false;
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(source_id);
    if (it == entries_.end()) {
      if (entries_.size() >= settings_.max_sources)
        std::erase_if(entries_, [&](const auto& kv) { return kv.second.watched_until_ns < now && !kv.second.converting; });
      if (entries_.size() >= settings_.max_sources) return std::nullopt;
      it = entries_.emplace(source_id, Entry{}).first;
    }
    Entry& e = it->second;
    e.watched_until_ns = until;
    e.wanted = true;
    if (any_watched_until_ns_.load() < until) any_watched_until_ns_.store(until);
    if (!e.have) return std::nullopt;
    if (e.encoded && e.jpeg_sequence == e.sequence) return Picture{e.jpeg, e.sequence, e.drawn};
    bgr = e.bgr;  // shares the pixels: put() replaces e.bgr, never writes into it
    sequence = e.sequence;
    drawn = e.drawn;
  }
  std::vector<unsigned char> buf;
  if (!cv::imencode(".jpg", bgr, buf, {cv::IMWRITE_JPEG_QUALITY, settings_.quality})) return std::nullopt;
  std::string out(buf.begin(), buf.end());
  std::lock_guard lock(mu_);
  if (auto it = entries_.find(source_id); it != entries_.end() && it->second.sequence == sequence) {
    it->second.jpeg = out;
    it->second.jpeg_sequence = sequence;
    it->second.encoded = true;
  }
  return Picture{std::move(out), sequence, drawn};
}

std::size_t JpegThumbnailTap::watched() const {
  const std::int64_t now = now_ns();
  std::lock_guard lock(mu_);
  return static_cast<std::size_t>(
      std::count_if(entries_.begin(), entries_.end(), [&](const auto& kv) { return kv.second.watched_until_ns >= now; }));
}

}  // namespace sluice
