#pragma once
// A job whose inputs arrive while it runs (the Redis source, runtime/redis_source.hpp): the source set's decode
// threads take the next input from the feed instead of from a list fixed at start, and the feed hears what
// became of each input (runtime/input_outcomes.hpp) to answer for it outside.
#include <atomic>
#include <chrono>
#include <string>

#include "runtime/frame_reader.hpp"
#include "runtime/input_options.hpp"
#include "runtime/input_outcomes.hpp"

namespace sluice {

// One input a feed hands out: what to read and the options it carries (parsed and checked by the feed).
struct FedInput {
  std::string uri;
  InputKind kind = InputKind::file;
  InputOptions options;
};

class InputFeed {
 public:
  virtual ~InputFeed() = default;

  enum class Poll : std::uint8_t {
    input,  // `input` holds the next input
    idle,   // nothing yet: look at stop and status(), then poll again
    ended,  // the feed has no more inputs (or failed for good: failure() says why)
  };
  // Waits up to `wait` for the next input.
  virtual Poll next(FedInput& input, std::chrono::milliseconds wait) = 0;
  // What became of an input next() handed out (called on the sink's thread: returns at once); the result's uri
  // and options name it. Also called by the source for an input its job ledger lists as finished already with
  // the same options (not processed again).
  virtual void settled(const InputResult& result) = 0;
  // Asked on the sink's thread before the outputs of an input next() handed out are committed: is it still
  // this worker's? A feed shared with other workers checks with its server (and keeps the input for the
  // commit), waiting while the server is away; false when another worker took it over (then the input is
  // neither committed nor recorded here: settled() hears it as a retry) or the feed is stopping.
  virtual bool still_ours(const std::string& uri, const std::string& options) {
    (void)uri, (void)options;
    return true;
  }
  // Asked on the sink's thread when an input next() handed out failed transiently (its server refused, timed out,
  // answered 5xx): true when the feed will hand it out again later (then settled() hears it as a retry), false
  // when it will not (it is failed for good). Returns at once.
  virtual bool retries(const std::string& uri, const std::string& options) {
    (void)uri, (void)options;
    return false;
  }
  // The source is stopping (shutdown, removal): a still_ours() that would wait for a server that is away answers
  // no at once instead (the input is not committed and is done again), so a drain is not held up by it.
  virtual void stopping() {}
  // Empty while the feed is healthy, else why it cannot reach its inputs now (it keeps trying).
  virtual std::string trouble() const = 0;
  // Set once the feed gave up for good (ended because of it).
  virtual std::string failure() const = 0;
};

}  // namespace sluice
