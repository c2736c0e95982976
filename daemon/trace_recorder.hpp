#pragma once
// The `trace` request's one recorder. The live pipeline records one trace at a time (Pipeline::record_trace
// starts a new recording and ends the one before), so two peers' traces cannot overlap: without this a 1 s
// trace from one peer cut another's 10 s trace short while its reply still said 10 s. Here every reply says
// what it got:
//   - a trace asked for while another records is refused at once, saying how long the running one has left;
//   - unless the asker's class outranks the running one's (PeerClass: an admin over a TCP peer): then the
//     running trace ends at once with an error that says so, and the asker's starts. A peer of a lower class
//     never holds the recorder against an admin.
// Runs on the service's io_context thread.
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "daemon/control_protocol.hpp"

namespace sluice {

class TraceRecorder {
 public:
  using Reply = std::function<void(nlohmann::json reply)>;
  // Starts the pipeline's recording of `duration`.
  using Begin = std::function<void(std::chrono::nanoseconds duration)>;
  // The whole reply once the recording ended (an error reply when the pipeline went away meanwhile).
  using Finish = std::function<nlohmann::json()>;

  explicit TraceRecorder(boost::asio::io_context& io) : timer_(io) {}
  ~TraceRecorder();  // a recording still running is answered with an error

  // A trace of `seconds` (within arg::seconds' bounds) for a peer of class `asker`: `reply` gets finish()'s
  // reply after the recording, or an error at once when the recorder is taken.
  void record(double seconds, PeerClass asker, Begin begin, Finish finish, Reply reply);
  // Ends a running recording (stop): its peer gets an error naming `why`.
  void cancel(const std::string& why);
  bool recording() const { return running_.has_value(); }

 private:
  struct Running {
    std::uint64_t id;
    PeerClass owner;
    double seconds;
    std::chrono::steady_clock::time_point started, ends;
    Finish finish;
    Reply reply;
  };
  void finished();

  boost::asio::steady_timer timer_;
  std::optional<Running> running_;
  std::uint64_t last_id_ = 0;
};

}  // namespace sluice
