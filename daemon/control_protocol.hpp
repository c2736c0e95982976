#pragma once
// The control protocol's untrusted edge (docs/protocol.md), without sockets: one line of bytes from a
// peer becomes a typed, checked request or the text of an error reply; a reply becomes one line of valid
// UTF-8. Nothing here throws for any input bytes, and no reply carries bytes that are not valid UTF-8.
#include <nlohmann/json.hpp>
#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>

#include "daemon/protocol.hpp"

namespace sluice {

// The class of a connection, decided when it connects (AccessPolicy::peer_class). Each class has its own client
// budget, so peers of one class never take another's slots, and a lower class never holds what an admin needs
// (the trace recorder). Ordered from the lowest to the highest.
enum class PeerClass { tcp, reader, admin };
// "tcp peers", "local readers", "admins": for messages.
std::string_view peer_class_name(PeerClass c);

// Who sent a request: SO_PEERCRED on the UNIX socket; TCP peers have only an address.
struct PeerCredentials {
  bool known = false;  // SO_PEERCRED answered (UNIX socket)
  bool tcp = false;    // arrived over --control-tcp
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string remote;  // "pid P uid U gid G", or "tcp ADDRESS"
  PeerClass peer_class = PeerClass::tcp;  // set by the control server when the connection is accepted
};

// A request whose arguments have the kinds and bounds of its entry in the request table (protocol.hpp).
// Unknown keys are ignored; a key given twice in any object of the line is refused (never first or last wins).
struct ControlRequest {
  RequestKind kind = RequestKind::version;
  std::optional<std::string> token;  // arg::token: the TCP shared secret (never logged, never echoed)
  nlohmann::json arguments = nlohmann::json::object();  // the request's own arguments that were given, checked

  // An argument's value, nullopt when it was not given (a required one always was). Asking for an argument
  // the request does not have, or with the wrong accessor for its kind, throws std::logic_error: a handler's
  // mistake, which the control server answers as a failed request.
  std::optional<std::string> text(const Argument& argument) const;
  std::optional<double> number(const Argument& argument) const;
  std::optional<bool> flag(const Argument& argument) const;

 private:
  const nlohmann::json* find(const Argument& argument, ArgumentKind kind) const;
};

struct ParsedLine {
  std::optional<ControlRequest> request;  // set when the line is a valid request
  std::string error;                      // otherwise why not: valid UTF-8, at most a few hundred bytes
};

// One line (without its '\n'). Any bytes: malformed JSON, numbers out of range, invalid UTF-8, wrong types,
// a missing or unknown `request`, a missing required argument, arguments out of range, a duplicate key all give
// `error`.
// Never throws (but bad_alloc).
ParsedLine parse_request_line(std::string_view line);

// {"ok": false, "error": MESSAGE}, the message made valid UTF-8.
nlohmann::json error_reply(std::string_view message);

// The reply as one line ending in '\n': invalid UTF-8 in any string is replaced by U+FFFD, so serializing
// never fails on the reply's content.
std::string serialize_reply(const nlohmann::json& reply);

// A message for a peer, made from text that may hold foreign bytes: valid UTF-8, at most `limit` bytes of
// the original (then "…").
std::string safe_message(std::string_view text, std::size_t limit = 300);

// A configuration error for a peer that asked to reload a file: keeps "path:line:col: problem" but drops
// every quoted excerpt ('...' and "...": words taken from the file), so a file that is not a pipeline is
// never disclosed through the reply. An excerpt may hold quotes itself, so everything from the first quote to the
// last is replaced by one '…' (to the end when the quotes do not pair up: an excerpt cut short); only sluice's
// words before and after stay. The full message goes to the journal.
std::string redact_file_excerpts(std::string_view message);

}  // namespace sluice
