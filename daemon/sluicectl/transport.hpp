#pragma once
// sluicectl's transport: one request line to sluiced's control socket (UNIX, or its TCP listener) and one
// reply line back, every step (connect, send, receive) before one deadline. Plain POSIX sockets and poll();
// Ctrl-C (interrupt.hpp) ends a wait early. Knows nothing of what the requests mean.
#include <chrono>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace sluice::ctl {

using Clock = std::chrono::steady_clock;

constexpr const char* kDefaultSocket = "/run/sluice/control.sock";
constexpr double kDefaultTimeout = 5.0;
constexpr std::size_t kMaxReply = 16u << 20;
constexpr std::size_t kMaxTraceReply = std::size_t{1} << 30;  // a trace reply carries every event recorded

// Where and how to reach the daemon (sluicectl's global options).
struct Connection {
  std::string socket;
  std::string tcp;    // HOST:PORT: talk to --control-tcp instead of the UNIX socket
  std::string token;  // sent as "token" with every request (the daemon's --control-token)
  double timeout_s = kDefaultTimeout;
  // The address requests go to, for messages.
  const std::string& address() const { return tcp.empty() ? socket : tcp; }
};

struct Outcome {
  int code = 0;  // kExitOk, kExitRefused, kExitConnect, kExitTimeout, kExitUsage (cli.hpp)
  bool interrupted = false;
  std::string error;             // for code != 0: the message (without the "sluicectl: " prefix)
  nlohmann::ordered_json reply;  // for kExitOk / kExitRefused, in the daemon's key order (status --json)
};

// Sends `request` (with the connection's token added) and waits up to `timeout_s` for a reply: a JSON
// object with a boolean "ok", at most `max_reply` bytes.
Outcome exchange(const Connection& connection, const nlohmann::json& request, double timeout_s,
                 std::size_t max_reply = kMaxReply);

// Prints the outcome's error, if any, on stderr and returns its exit code.
int report_failure(const Outcome& outcome);

// Milliseconds until `deadline` for poll(): 0 once it passed.
int ms_left(Clock::time_point deadline);

// The control token: the file's first line (a trailing newline dropped). Refuses a file others may read,
// as sluiced does, so a secret left readable is noticed on the client side too.
bool read_token_file(const std::string& path, std::string& token, std::string& error);

}  // namespace sluice::ctl
