#pragma once
// The control protocol's vocabulary (docs/protocol.md), shared by sluiced and sluicectl: one table of the
// requests, each with its name on the wire, whether it changes what the daemon does (the access policy's
// question), its arguments (key, kind, required, bounds) and one line of help. The service's parser checks
// every line against it, its dispatcher and the access policy ask it what mutates, and sluicectl builds its
// requests and checks its options' bounds with it, so no request name, argument key or bound is spelled
// twice in code (help texts describe them; a test holds docs/protocol.md's request table to this one).
// Adding a request: an entry here, its handler in the service (a switch the compiler checks for
// completeness), and its command in sluicectl.
//
// Light on purpose: nlohmann/json and the standard library, nothing of the runtime (sluicectl links none).
#include <nlohmann/json.hpp>

#include <cstddef>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "runtime/latency_budget_limit.hpp"

namespace sluice {

enum class ArgumentKind { string, boolean, number };

// One argument of a request: `key` in the request object.
struct Argument {
  std::string_view key;
  ArgumentKind kind;
  bool required = false;
  // number: the accepted range, [min, max] or (min, max] with min_exclusive; always finite.
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_exclusive = false;
  // string: non-empty, without NUL, at most this many bytes.
  std::size_t max_bytes = 4096;
  std::string_view help;  // what it means, with its unit: shown in errors after the kind and bounds
};

namespace arg {
inline constexpr Argument token{.key = "token", .kind = ArgumentKind::string,
                                .help = "the shared secret of --control-token, for TCP peers"};
inline constexpr Argument seconds{.key = "seconds", .kind = ArgumentKind::number, .required = true, .min = 0,
                                  .max = 60, .min_exclusive = true, .help = "seconds to record"};
inline constexpr Argument path{.key = "path", .kind = ArgumentKind::string,
                               .help = "the pipeline file; default: the current one"};
inline constexpr Argument uri{.key = "uri", .kind = ArgumentKind::string, .required = true,
                              .help = "what to read: a file, directory, glob, image, camera, stream or testsrc:"};
inline constexpr Argument name{.key = "name", .kind = ArgumentKind::string, .max_bytes = 256,
                               .help = "the source's name"};
inline constexpr Argument leaky{.key = "leaky", .kind = ArgumentKind::boolean,
                                .help = "drop the oldest frame when the pipeline is behind"};
inline constexpr Argument loop{.key = "loop", .kind = ArgumentKind::boolean, .help = "files: start again at the end"};
inline constexpr Argument rate_limit{.key = "rate_limit", .kind = ArgumentKind::number, .min = 0,
                                     .help = "frames per second, 0 = unlimited"};
inline constexpr Argument latency_budget_ms{.key = "latency_budget_ms", .kind = ArgumentKind::number, .min = 0,
                                            .max = kMaxLatencyBudgetMs, .help = "milliseconds, 0 = none"};
inline constexpr Argument source{.key = "source", .kind = ArgumentKind::string, .required = true, .max_bytes = 256,
                                 .help = "an id or a name"};
}  // namespace arg

// The key every request names itself with: {"request": NAME, ...arguments}.
inline constexpr std::string_view kRequestKey = "request";

// In the table's order; the table is indexed by it.
enum class RequestKind { version, status, sources, trace, pause, resume, reload, stop, source_add, source_remove };

struct RequestSpec {
  RequestKind kind;
  std::string_view name;  // "request" on the wire
  bool mutating;          // changes what the daemon does: refused to peers that may only read
  std::span<const Argument* const> arguments;  // besides `arg::token`, which every request may carry
  std::string_view help;
};

namespace detail {
inline constexpr const Argument* kTraceArguments[] = {&arg::seconds};
inline constexpr const Argument* kReloadArguments[] = {&arg::path};
inline constexpr const Argument* kSourceAddArguments[] = {&arg::uri,  &arg::name,       &arg::leaky,
                                                          &arg::loop, &arg::rate_limit, &arg::latency_budget_ms};
inline constexpr const Argument* kSourceRemoveArguments[] = {&arg::source};
inline constexpr std::span<const Argument* const> kNone{};
}  // namespace detail

inline constexpr RequestSpec kRequests[] = {
    {RequestKind::version, "version", false, detail::kNone, "the daemon's version and whether it was built with CUDA"},
    {RequestKind::status, "status", false, detail::kNone,
     "state, stages, queues, the frame ledger, latency, sources and inputs"},
    {RequestKind::sources, "sources", false, detail::kNone, "the run-time sources and the inputs being decoded"},
    {RequestKind::trace, "trace", false, detail::kTraceArguments,
     "record a Chrome/Perfetto trace of the live pipeline; the reply comes after the recording"},
    {RequestKind::pause, "pause", true, detail::kNone, "sources stop producing; frames in flight still reach the sink"},
    {RequestKind::resume, "resume", true, detail::kNone, "sources produce again"},
    {RequestKind::reload, "reload", true, detail::kReloadArguments,
     "validate a pipeline file and switch to it; on error the running pipeline stays"},
    {RequestKind::stop, "stop", true, detail::kNone, "the daemon drains frames in flight and exits"},
    {RequestKind::source_add, "source-add", true, detail::kSourceAddArguments,
     "start a source in the running pipeline"},
    {RequestKind::source_remove, "source-remove", true, detail::kSourceRemoveArguments,
     "stop a source; frames it already decoded still reach the sink"},
};

constexpr bool table_in_kind_order() {
  for (std::size_t i = 0; i < std::size(kRequests); ++i)
    if (static_cast<std::size_t>(kRequests[i].kind) != i) return false;
  return true;
}
static_assert(table_in_kind_order(), "kRequests must list every RequestKind once, in the enum's order");

constexpr const RequestSpec& request_spec(RequestKind kind) { return kRequests[static_cast<std::size_t>(kind)]; }
constexpr std::string_view request_name(RequestKind kind) { return request_spec(kind).name; }
constexpr bool is_mutating(RequestKind kind) { return request_spec(kind).mutating; }

// The spec named `name` on the wire, or nullptr.
const RequestSpec* find_request(std::string_view name);

// "version, status, ..." (every request) or only those that do not mutate, for messages.
std::string request_list(bool read_only = false);

// What `argument` accepts, for messages: its kind and bounds, then its help: "a number in (0, 60] (seconds to
// record)", "a number >= 0 (frames per second, 0 = unlimited)", "true or false (...)", "a non-empty string (...)".
std::string describe(const Argument& argument);

// A number argument's bounds: finite, above min (or at it, unless min_exclusive), at most max.
bool within_bounds(const Argument& argument, double value);

// Why `value` is not acceptable for `argument` ("'rate_limit' must be a number >= 0 (frames per second, 0 =
// unlimited)"), or nullopt. Never throws but bad_alloc; the message quotes none of `value`.
std::optional<std::string> check_argument(const Argument& argument, const nlohmann::json& value);

// A request object to send: {"request": NAME}, then set() its arguments. Numbers that are whole go out as
// integers (1, not 1.0). set() checks nothing: check_argument is the daemon's (and a client's option parser's).
class RequestBuilder {
 public:
  explicit RequestBuilder(RequestKind kind) : body_{{std::string(kRequestKey), std::string(request_name(kind))}} {}
  RequestBuilder& set(const Argument& argument, std::string_view value);
  RequestBuilder& set(const Argument& argument, const char* value) { return set(argument, std::string_view(value)); }
  RequestBuilder& set(const Argument& argument, bool value);
  RequestBuilder& set(const Argument& argument, double value);
  const nlohmann::json& body() const { return body_; }

 private:
  nlohmann::json body_;
};

}  // namespace sluice
