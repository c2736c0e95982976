#pragma once
// When each coded picture of a live stream arrived, found again when its decoded frame comes out: latency counts
// from the network, so the time a picture spends in the demuxer and the decoder (reordering, a parser waiting for
// the next picture, a decode queue) is part of capture-to-sink and never hidden. Pictures are matched by their
// presentation time; a few are remembered (a live decoder holds a handful), the oldest forgotten first, so a
// picture that never comes out (lost, dropped by the decoder) costs nothing.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <utility>

namespace sluice {

class ArrivalTimes {
 public:
  explicit ArrivalTimes(std::size_t capacity = 64) : capacity_(capacity > 0 ? capacity : 1) {}

  // The picture with presentation time `pts_ns` arrived at `arrived_ns` (steady clock).
  void note(std::int64_t pts_ns, std::int64_t arrived_ns) {
    if (seen_.size() == capacity_) seen_.pop_front();
    seen_.emplace_back(pts_ns, arrived_ns);
  }
  // When the picture with this presentation time arrived, forgetting it; none when it was not noted (or was
  // forgotten). Of pictures with equal times (a stream without a clock), the earliest noted.
  std::optional<std::int64_t> take(std::int64_t pts_ns) {
    for (auto it = seen_.begin(); it != seen_.end(); ++it)
      if (it->first == pts_ns) {
        const std::int64_t arrived = it->second;
        seen_.erase(it);
        return arrived;
      }
    return std::nullopt;
  }
  std::size_t size() const noexcept { return seen_.size(); }

 private:
  std::size_t capacity_;
  std::deque<std::pair<std::int64_t, std::int64_t>> seen_;
};

}  // namespace sluice
