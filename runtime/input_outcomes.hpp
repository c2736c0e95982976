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
#include <vector>

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
  bool earlier = false;  // done: in an earlier run (the job ledger says so), not done again now
  // failed and retry: the failure may pass if the input is tried again later (a remote file's fetch failed for
  // want of its server or the network: InputProgress::transient). Failed so: its source would not try it again.
  bool transient = false;

  void fail(std::string why) {
    outcome = InputOutcome::failed;
    reason = std::move(why);
  }
};

class InputOutcomes {
 public:
  using Listener = std::function<void(const InputResult&)>;
  // Asked on the sink's thread before an input's outputs are committed (`result` names it; its outcome is not
  // known yet): is it still this worker's to commit? A source that shares its inputs with other workers (the
  // Redis source) asks its server and may block meanwhile; false: another worker took it over, so it is
  // neither committed nor recorded here.
  using Owner = std::function<bool(const InputResult&)>;
  // Asked on the sink's thread when an input failed transiently (`result` names it, outcome not decided yet):
  // will its source try it again later (the Redis source: attempts left under max_deliveries)? Returns at once.
  using Retries = std::function<bool(const InputResult&)>;
  // `fn` hears of every input of source `source_id` from now on, until unlisten(); it is called on the sink's
  // thread and must return promptly (queue the work, never block on a network). `owner`, when given, answers
  // still_ours() for the source's inputs, `retries` retries().
  std::uint64_t listen(std::uint32_t source_id, Listener fn, Owner owner = {}, Retries retries = {}) {
    std::lock_guard lock(mu_);
    listeners_.emplace(++next_token_, Entry{source_id, std::move(fn), std::move(owner), std::move(retries)});
    return next_token_;
  }
  // After it returns, the listener is never called again.
  void unlisten(std::uint64_t token) {
    std::lock_guard lock(mu_);
    listeners_.erase(token);
  }
  // True when some listener heard it (the input's source answers for it outside).
  bool notify(const InputResult& r) const {
    std::lock_guard lock(mu_);
    bool heard = false;
    for (const auto& [token, listener] : listeners_)
      if (listener.source_id == r.source_id) {
        listener.fn(r);
        heard = true;
      }
    return heard;
  }
  // True unless the owner of the input's source says another worker took it over (true without an owner).
  bool still_ours(const InputResult& r) const {
    std::vector<Owner> owners;
    {
      std::lock_guard lock(mu_);
      for (const auto& [token, listener] : listeners_)
        if (listener.source_id == r.source_id && listener.owner) owners.push_back(listener.owner);
    }
    for (const Owner& owner : owners)  // outside the lock: an owner may wait for its server
      if (!owner(r)) return false;
    return true;
  }
  // True when a listener of the input's source will try it again after a transient failure (false without one).
  bool retries(const InputResult& r) const {
    std::lock_guard lock(mu_);
    for (const auto& [token, listener] : listeners_)
      if (listener.source_id == r.source_id && listener.retries && listener.retries(r)) return true;
    return false;
  }

 private:
  struct Entry {
    std::uint32_t source_id;
    Listener fn;
    Owner owner;
    Retries retries;
  };
  mutable std::mutex mu_;
  std::uint64_t next_token_ = 0;
  std::map<std::uint64_t, Entry> listeners_;
};

}  // namespace sluice
