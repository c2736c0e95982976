#pragma once
// When sluiced may ping the systemd watchdog. Healthy: some stage moved a frame since the last look, or
// nothing is in flight (an idle live source waiting for frames is not a wedge), or the pipeline is not
// running (paused, reloading). Wedged: frames in flight and no stage progress for `stall` — pings stop
// and systemd restarts the service.
#include <chrono>
#include <cstdint>

namespace sluice {

class WatchdogRule {
 public:
  using Clock = std::chrono::steady_clock;
  explicit WatchdogRule(std::chrono::duration<double> stall, Clock::time_point start = Clock::now())
      : stall_(stall), last_progress_at_(start) {}

  // `progress`: any counter that grows when a stage handles a frame (frames + drops + errors, summed).
  bool healthy(std::uint64_t progress, std::uint64_t in_flight, bool running, Clock::time_point now) {
    if (progress != last_progress_ || in_flight == 0 || !running) {
      last_progress_ = progress;
      last_progress_at_ = now;
    }
    return now - last_progress_at_ < stall_;
  }
  double stalled_s(Clock::time_point now) const { return std::chrono::duration<double>(now - last_progress_at_).count(); }

 private:
  std::chrono::duration<double> stall_;
  std::uint64_t last_progress_ = 0;
  Clock::time_point last_progress_at_;
};

}  // namespace sluice
