#include "daemon/trace_recorder.hpp"

#include <cstdio>

namespace sluice {
namespace {

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

double seconds_between(std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

TraceRecorder::~TraceRecorder() {
  if (running_) cancel("sluiced is stopping");
}

void TraceRecorder::record(double seconds, PeerClass asker, Begin begin, Finish finish, Reply reply) {
  const auto now = std::chrono::steady_clock::now();
  if (running_) {
    if (asker <= running_->owner) {
      reply(error_reply("trace refused: another trace is recording (" + seconds_text(seconds_between(now, running_->ends)) +
                        " left) and the pipeline records one at a time; trace again then"));
      return;
    }
    cancel("trace ended after " + seconds_text(seconds_between(running_->started, now)) + " of the " +
           seconds_text(running_->seconds) + " asked for: " + std::string(peer_class_name(asker)) +
           " outrank " + std::string(peer_class_name(running_->owner)) + " and one of them started a trace; trace again");
  }
  const auto duration = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(seconds));
  begin(duration);
  const std::uint64_t id = ++last_id_;
  running_ = Running{id, asker, seconds, now, now + duration, std::move(finish), std::move(reply)};
  timer_.expires_at(running_->ends);
  // The id: a wait that had already completed when cancel() ran still calls this; it must not end the next one.
  timer_.async_wait([this, id](boost::system::error_code ec) {
    if (!ec && running_ && running_->id == id) finished();
  });
}

void TraceRecorder::finished() {
  Running done = std::move(*running_);
  running_.reset();
  nlohmann::json answer;
  try {  // runs on the io_context outside any request: nothing may escape it
    answer = done.finish();
  } catch (const std::exception& e) {
    answer = error_reply(std::string("trace failed: ") + e.what());
  }
  done.reply(std::move(answer));
}

void TraceRecorder::cancel(const std::string& why) {
  if (!running_) return;
  Running ended = std::move(*running_);
  running_.reset();
  timer_.cancel();
  ended.reply(error_reply(why));
}

}  // namespace sluice
