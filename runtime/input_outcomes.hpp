#pragma once
// What became of each input of a job once the pipeline is through with it, for sources that must answer to
// someone outside (the Redis source acknowledges an entry only once its input is durably committed).
// The runner tells it after the sink finished the input's outputs and the job ledger recorded it
// (runtime/pipeline.cpp finish_inputs); a source listens for the inputs of its own id.
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace sluice {

enum class InputOutcome : std::uint8_t {
  done,    // outputs committed and (with a job ledger) recorded done: durable
  failed,  // the input itself cannot be processed (missing, corrupt, unsupported); recorded failed, with why
  retry,   // not committed (a stage failed frames, the sink could not finish it, the ledger could not be
           // written, the input was interrupted): it must be done again
};

struct InputResult {
  std::uint32_t source_id = 0;
  std::string uri;
  InputOutcome outcome = InputOutcome::retry;
  std::string reason;  // failed and retry: why
  std::string options;  // the input's own options (InputOptions::text()), "" when none

  void fail(std::string why) {
    outcome = InputOutcome::failed;
    reason = std::move(why);
  }
};

class InputOutcomes {
 public:
  using Listener = std::function<void(const InputResult&)>;
  // `fn` hears of every input of source `source_id` from now on, until unlisten(); it is called on the sink's
  // thread and must return promptly (queue the work, never block on a network).
  std::uint64_t listen(std::uint32_t source_id, Listener fn) {
    std::lock_guard lock(mu_);
    listeners_.emplace(++next_token_, std::make_pair(source_id, std::move(fn)));
    return next_token_;
  }
  // After it returns, the listener is never called again.
  void unlisten(std::uint64_t token) {
    std::lock_guard lock(mu_);
    listeners_.erase(token);
  }
  void notify(const InputResult& r) const {
    std::lock_guard lock(mu_);
    for (const auto& [token, listener] : listeners_)
      if (listener.first == r.source_id) listener.second(r);
  }

 private:
  mutable std::mutex mu_;
  std::uint64_t next_token_ = 0;
  std::map<std::uint64_t, std::pair<std::uint32_t, Listener>> listeners_;
};

}  // namespace sluice
