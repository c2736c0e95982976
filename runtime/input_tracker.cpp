#include "runtime/input_tracker.hpp"

#include <utility>

#include "runtime/source_control.hpp"
#include "runtime/stats.hpp"

namespace sluice {

double InputProgress::rate_fps(std::int64_t now) const {
  const std::int64_t until = complete ? completed_ns : now;
  const double seconds = static_cast<double>(until - started_ns) / 1e9;
  return seconds > 0 ? static_cast<double>(settled()) / seconds : 0;
}

std::optional<double> InputProgress::eta_s(std::int64_t now) const {
  if (complete) return 0.0;
  const double rate = rate_fps(now);
  if (frames_total < 0 || rate <= 0) return std::nullopt;
  const double left = static_cast<double>(frames_total) - static_cast<double>(settled());
  return left > 0 ? left / rate : 0.0;
}

void InputTracker::name_source(std::uint32_t source_id, std::string name) {
  std::lock_guard lock(mu_);
  source_names_[source_id] = std::move(name);
}

std::string InputTracker::source_name(std::uint32_t source_id) const {
  std::lock_guard lock(mu_);
  if (auto it = source_names_.find(source_id); it != source_names_.end()) return it->second;
  return unnamed_source(source_id);
}

std::uint32_t InputTracker::begin(std::uint32_t source_id, std::string uri, InputKind kind, std::int64_t frames_total,
                                  std::string options) {
  std::lock_guard lock(mu_);
  InputProgress p;
  p.id = next_id_++;
  p.source_id = source_id;
  if (auto it = source_names_.find(source_id); it != source_names_.end()) p.source = it->second;
  p.uri = std::move(uri);
  p.kind = kind;
  p.options = std::move(options);
  p.frames_total = frames_total;
  p.started_ns = now_ns();
  totals_.inputs++;
  const std::uint32_t id = p.id;
  open_.emplace(id, std::move(p));
  return id;
}

void InputTracker::decoded(std::uint32_t input, std::uint64_t n) {
  std::lock_guard lock(mu_);
  if (auto it = open_.find(input); it != open_.end()) it->second.decoded += n;
}

void InputTracker::end(std::uint32_t input, std::string error, bool transient) {
  std::lock_guard lock(mu_);
  auto it = open_.find(input);
  if (it == open_.end() || it->second.ended) return;
  it->second.ended = true;
  it->second.transient = transient && !error.empty();
  it->second.error = std::move(error);
  it->second.ended_ns = now_ns();
  maybe_complete(it->second);
}

void InputTracker::interrupt(std::uint32_t input, bool source_removed) {
  std::lock_guard lock(mu_);
  auto it = open_.find(input);
  if (it == open_.end() || it->second.ended) return;
  it->second.ended = true;
  it->second.interrupted = true;
  it->second.removed = source_removed;
  it->second.error = source_removed ? "its source was removed" : "stopped before its end";
  it->second.ended_ns = now_ns();
  maybe_complete(it->second);
}

void InputTracker::settle(std::span<const FrameMeta> frames, FrameFate fate) {
  std::lock_guard lock(mu_);
  for (const auto& f : frames) {
    if (f.input == 0) continue;
    auto it = open_.find(f.input);
    if (it == open_.end()) continue;
    auto& p = it->second;
    (fate == FrameFate::delivered ? p.delivered : fate == FrameFate::dropped ? p.dropped : p.failed)++;
    maybe_complete(p);
  }
}

void InputTracker::maybe_complete(InputProgress& p) {
  if (!p.ended || p.settled() < p.decoded) return;
  p.complete = true;
  p.completed_ns = now_ns();
  totals_.complete++;
  // A cut stream connection is the source's business (it reconnects); a file that could not be read is not.
  p.with_errors = (!p.error.empty() && !p.interrupted && !is_live(p.kind)) || p.failed > 0;
  if (p.with_errors) totals_.with_errors++;
  if (!p.error.empty() && !p.interrupted && !is_live(p.kind)) totals_.unreadable++;
  completed_.push_back(p);
  done_.push_back(p);
  while (done_.size() > 64) done_.pop_front();
  const std::uint32_t id = p.id;
  open_.erase(id);  // p is dangling from here on
}

void InputTracker::output_failed(std::uint32_t input, const std::string& reason) {
  std::lock_guard lock(mu_);
  for (auto& p : done_) {
    if (p.id != input) continue;
    const bool counted = (!p.error.empty() && !p.interrupted && !is_live(p.kind)) || p.failed > 0;
    if (!counted) totals_.with_errors++;
    p.error = p.error.empty() ? "output: " + reason : p.error + "; output: " + reason;
    return;
  }
  totals_.with_errors++;  // no longer in the recent list: still counted
}

void InputTracker::handed_back(const InputProgress& input, bool counted_with_errors) {
  std::lock_guard lock(mu_);
  totals_.handed_back++;
  if (counted_with_errors) totals_.handed_back_with_errors++;
  totals_.handed_back_failed_frames += input.failed;
}

std::vector<InputProgress> InputTracker::take_completed() {
  std::lock_guard lock(mu_);
  return std::exchange(completed_, {});
}

std::optional<InputProgress> InputTracker::get(std::uint32_t input) const {
  std::lock_guard lock(mu_);
  if (auto it = open_.find(input); it != open_.end()) return it->second;
  for (const auto& p : done_)
    if (p.id == input) return p;
  return std::nullopt;
}

std::vector<InputProgress> InputTracker::snapshot(std::size_t recent) const {
  std::lock_guard lock(mu_);
  std::vector<InputProgress> out;
  const std::size_t skip = done_.size() > recent ? done_.size() - recent : 0;
  for (std::size_t i = skip; i < done_.size(); ++i) out.push_back(done_[i]);
  for (const auto& [id, p] : open_) out.push_back(p);
  return out;
}

InputTracker::Totals InputTracker::totals() const {
  std::lock_guard lock(mu_);
  return totals_;
}

}  // namespace sluice
