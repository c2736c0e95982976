#pragma once
// Who may do what over the control protocol (docs/THREAT_MODEL.md), as checks without I/O beyond the
// filesystem lookups they name: a request's peer and token against the allow lists and the TCP shared
// secret; the paths and URIs a request introduces against the configured roots and hosts.
//
//   UNIX peers   read always; mutate when no allow list is set, or as root, sluiced's own user, or a
//                listed user / member of a listed group (SO_PEERCRED).
//   TCP peers    read always; mutate only with the configured token ("token" in the request, compared in
//                constant time). No token configured: read-only. A wrong token refuses the request.
//   reload       only the file sluiced was started with, or a file under a config root (real path).
//   source-add   testsrc: always; local paths (files, directories, globs, sequences, cameras) under an
//                input root (real path, no '..'); network URIs whose host (or host:port) is allowed.
//   reload sink  with output roots set, every sink path of the new pipeline lies under one.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "daemon/control_protocol.hpp"

namespace sluice {

struct PipelineSpec;

struct SourceHostRule {
  std::string scheme;  // empty: any stream scheme
  std::string host;    // lower case; IPv6 without brackets
  int port = -1;       // -1: any port
};
// "HOST", "HOST:PORT", "[IPV6]:PORT", optionally "SCHEME://" in front. Throws std::invalid_argument.
SourceHostRule parse_source_host_rule(const std::string& text);

struct AccessSettings {
  std::vector<std::string> allow_users, allow_groups;  // UNIX peers that may mutate (empty: all)
  std::optional<std::string> control_token;            // the shared secret for TCP peers (its content)
  std::string config_file;                             // the file sluiced was started with
  std::vector<std::string> config_roots, input_roots, output_roots;
  std::vector<std::string> allow_source_hosts;
};

// nullopt: allowed; else the reason, for the peer (valid UTF-8, names the option that would allow it).
using Refusal = std::optional<std::string>;

class AccessPolicy {
 public:
  // Resolves the roots (each must exist: std::invalid_argument naming it otherwise) and parses host rules.
  explicit AccessPolicy(AccessSettings settings);

  // Every request passes here first: check_token, then, for a request the table (protocol.hpp) marks
  // mutating, may_mutate.
  Refusal check_request(const PeerCredentials& peer, RequestKind kind, const std::optional<std::string>& token) const;
  // A TCP request carrying a token that is not the configured one is refused whatever it asks (a guess is
  // never answered as if it were a read).
  Refusal check_token(const PeerCredentials& peer, const std::optional<std::string>& token) const;
  // A connection's class, when it connects: TCP peers are `tcp` (a token grants changes request by request,
  // never a slot); UNIX peers that may mutate (may_mutate without a token) are `admin`, the others `reader`.
  PeerClass peer_class(const PeerCredentials& peer) const;
  // May this peer send a mutating request?
  Refusal may_mutate(const PeerCredentials& peer, const std::optional<std::string>& token) const;
  // `path` (absolute) names the configured file or lies under a config root; `resolved` gets its real
  // path, the one to open. Decided before the file is opened.
  Refusal check_reload_path(const std::string& path, std::string& resolved) const;
  // A source-add URI (as the request gives it).
  Refusal check_source_uri(const std::string& uri) const;
  // Every sink path of a pipeline that a reload would start (only when output roots are configured).
  Refusal check_output_paths(const PipelineSpec& spec) const;

  bool tcp_may_mutate() const { return settings_.control_token.has_value(); }

 private:
  static Refusal check_under(const std::vector<std::filesystem::path>& roots, const std::string& path,
                             const char* what, const char* option, std::filesystem::path* resolved = nullptr);
  AccessSettings settings_;
  std::filesystem::path config_file_;
  std::vector<std::filesystem::path> config_roots_, input_roots_, output_roots_;
  std::vector<SourceHostRule> host_rules_;
};

// Constant time in the length of `expected` (not in what `given` holds): no early exit on a mismatch.
bool tokens_equal(const std::string& expected, const std::string& given);

// Reads the shared secret from `path`: a regular file owned by this process's user and readable by no one
// else (mode 0600 or 0400), at most 4 KiB, one line of at least 16 printable characters (a trailing newline
// is dropped). Throws std::invalid_argument naming the file and, for a bad mode, the mode.
std::string load_control_token(const std::string& path);

// True when every address `listen` ("HOST:PORT", "[V6]:PORT", ":PORT") may bind is a loopback address:
// an IP literal is checked directly, "localhost" is loopback, ":PORT" (every interface) and other names
// are not.
bool listen_is_loopback(const std::string& listen);

}  // namespace sluice
