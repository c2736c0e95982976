#include "daemon/access_policy.hpp"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio/ip/address.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "config/pipeline_spec.hpp"
#include "daemon/listen_address.hpp"
#include "runtime/source_kind.hpp"
#include "runtime/stage.hpp"
#include "runtime/utf8.hpp"

namespace sluice {
namespace fs = std::filesystem;

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

std::string octal_mode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// "host", "host:port", "[v6]:port" -> host (lower case, no brackets) and port (-1 when absent). False when
// the text is not one of those shapes.
bool split_host_port(const std::string& text, std::string& host, int& port) {
  port = -1;
  std::string rest;
  if (!text.empty() && text[0] == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos) return false;
    host = text.substr(1, close - 1);
    rest = text.substr(close + 1);
  } else {
    const auto colon = text.find(':');
    if (colon != std::string::npos && text.find(':', colon + 1) != std::string::npos) return false;  // bare IPv6
    host = text.substr(0, colon);
    rest = colon == std::string::npos ? "" : text.substr(colon);
  }
  if (host.empty()) return false;
  for (unsigned char c : host)
    if (!(std::isalnum(c) || c == '.' || c == '-' || c == '_' || c == ':')) return false;
  if (!rest.empty()) {
    if (rest[0] != ':' || rest.size() < 2 || rest.size() > 6) return false;
    int p = 0;
    for (std::size_t i = 1; i < rest.size(); ++i) {
      if (!std::isdigit(static_cast<unsigned char>(rest[i]))) return false;
      p = p * 10 + (rest[i] - '0');
    }
    if (p < 1 || p > 65535) return false;
    port = p;
  }
  host = lower(host);
  return true;
}

int default_port(const std::string& scheme) {
  if (scheme == "rtsp") return 554;
  if (scheme == "rtsps") return 322;
  if (scheme == "rtmp") return 1935;
  if (scheme == "rtmps" || scheme == "https") return 443;
  if (scheme == "http") return 80;
  return -1;
}

}  // namespace

SourceHostRule parse_source_host_rule(const std::string& text) {
  SourceHostRule rule;
  std::string rest = text;
  if (const auto sep = rest.find("://"); sep != std::string::npos) {
    rule.scheme = lower(rest.substr(0, sep));
    rest = rest.substr(sep + 3);
    if (rule.scheme.empty()) throw std::invalid_argument("--allow-source-host '" + to_valid_utf8(text) + "': empty scheme");
  }
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (!split_host_port(rest, rule.host, rule.port))
    throw std::invalid_argument("--allow-source-host '" + to_valid_utf8(text) +
                                "': expected HOST, HOST:PORT or [IPV6]:PORT (optionally SCHEME:// in front)");
  return rule;
}

AccessPolicy::AccessPolicy(AccessSettings settings) : settings_(std::move(settings)) {
  auto resolve_roots = [](const std::vector<std::string>& in, const char* option) {
    std::vector<fs::path> out;
    for (const auto& r : in) {
      if (r.empty() || r[0] != '/')
        throw std::invalid_argument(std::string(option) + " '" + to_valid_utf8(r) + "': must be an absolute path");
      std::error_code ec;
      fs::path p = fs::canonical(r, ec);
      if (ec) throw std::invalid_argument(std::string(option) + " " + to_valid_utf8(r) + ": " + ec.message());
      out.push_back(std::move(p));
    }
    return out;
  };
  config_roots_ = resolve_roots(settings_.config_roots, "--config-root");
  input_roots_ = resolve_roots(settings_.input_roots, "--input-root");
  output_roots_ = resolve_roots(settings_.output_roots, "--output-root");
  if (!settings_.config_file.empty()) {
    std::error_code ec;
    config_file_ = fs::weakly_canonical(fs::absolute(settings_.config_file), ec);
    if (ec) config_file_ = fs::absolute(settings_.config_file).lexically_normal();
  }
  for (const auto& h : settings_.allow_source_hosts) host_rules_.push_back(parse_source_host_rule(h));
}

Refusal AccessPolicy::check_request(const PeerCredentials& peer, RequestKind kind,
                                   const std::optional<std::string>& token) const {
  if (auto why = check_token(peer, token)) return why;
  if (is_mutating(kind)) return may_mutate(peer, token);
  return std::nullopt;
}

Refusal AccessPolicy::check_token(const PeerCredentials& peer, const std::optional<std::string>& token) const {
  if (!peer.tcp || !token) return std::nullopt;  // UNIX peers are known by their credentials
  if (!settings_.control_token)
    return "permission denied: this sluiced has no control token (--control-token); TCP peers may only read";
  if (!tokens_equal(*settings_.control_token, *token)) return "permission denied: wrong token";
  return std::nullopt;
}

PeerClass AccessPolicy::peer_class(const PeerCredentials& peer) const {
  if (peer.tcp) return PeerClass::tcp;
  return may_mutate(peer, std::nullopt) ? PeerClass::reader : PeerClass::admin;
}

Refusal AccessPolicy::may_mutate(const PeerCredentials& peer, const std::optional<std::string>& token) const {
  if (peer.tcp) {
    if (!settings_.control_token)
      return "permission denied: over TCP only " + request_list(/*read_only=*/true) +
             " are served unless sluiced has a control token (--control-token FILE); use the UNIX socket";
    if (!token) return "permission denied: send the control token ('token', sluicectl --token-file) to change things over TCP";
    if (!tokens_equal(*settings_.control_token, *token)) return "permission denied: wrong token";
    return std::nullopt;
  }
  if (settings_.allow_users.empty() && settings_.allow_groups.empty()) return std::nullopt;
  if (!peer.known) return "permission denied: " + peer.remote + " has no credentials (use the UNIX socket to change things)";
  if (peer.uid == 0 || peer.uid == getuid()) return std::nullopt;
  if (const passwd* pw = getpwuid(peer.uid)) {
    for (const auto& u : settings_.allow_users)
      if (u == pw->pw_name) return std::nullopt;
    for (const auto& g : settings_.allow_groups) {
      const group* gr = getgrnam(g.c_str());
      if (!gr) continue;
      if (gr->gr_gid == peer.gid) return std::nullopt;
      for (char** m = gr->gr_mem; *m; ++m)
        if (std::string(*m) == pw->pw_name) return std::nullopt;
    }
  }
  return "permission denied: uid " + std::to_string(peer.uid) + " is not in --allow-user/--allow-group";
}

Refusal AccessPolicy::check_under(const std::vector<fs::path>& roots, const std::string& path, const char* what,
                                  const char* option, fs::path* resolved) {
  const std::string shown = to_valid_utf8(path);
  if (roots.empty())
    return std::string(what) + " " + shown + " refused: no " + option + " is configured (set " + option +
           " DIR to allow paths under DIR)";
  if (path.empty() || path[0] != '/') return std::string(what) + " '" + shown + "' must be an absolute path";
  for (const auto& part : fs::path(path))
    if (part == "..") return std::string(what) + " " + shown + " refused: '..' is not allowed in it";
  std::error_code ec;
  const fs::path real = fs::weakly_canonical(fs::path(path), ec);  // symlinks resolved; nothing is opened
  if (ec) return std::string(what) + " " + shown + ": " + ec.message();
  for (const auto& root : roots) {
    auto [r, p] = std::mismatch(root.begin(), root.end(), real.begin(), real.end());
    if (r == root.end() || (std::next(r) == root.end() && r->empty())) {
      if (resolved) *resolved = real;
      return std::nullopt;
    }
  }
  std::string list;
  for (const auto& root : roots) list += (list.empty() ? "" : ", ") + to_valid_utf8(root.string());
  return std::string(what) + " " + shown + " refused: " +
         (real.string() == path ? std::string("it is") : "its real path " + to_valid_utf8(real.string()) + " is") +
         " not under " + option + " (" + list + ")";
}

Refusal AccessPolicy::check_reload_path(const std::string& path, std::string& resolved) const {
  std::error_code ec;
  const fs::path real = fs::weakly_canonical(fs::path(path), ec);
  if (!ec && !config_file_.empty() && real == config_file_) {
    resolved = real.string();
    return std::nullopt;
  }
  if (config_roots_.empty())
    return "reload " + to_valid_utf8(path) + " refused: only sluiced's configured file (" +
           to_valid_utf8(config_file_.string()) +
           ") may be reloaded; --config-root DIR (or config_roots:) allows files under DIR";
  fs::path out;
  if (auto why = check_under(config_roots_, path, "reload", "--config-root", &out)) return why;
  resolved = out.string();
  return std::nullopt;
}

Refusal AccessPolicy::check_source_uri(const std::string& uri) const {
  const SourceKind& kind = source_kind_of(uri);
  if (kind.reach == SourceReach::anywhere) return std::nullopt;
  if (kind.reach == SourceReach::network) {
    const std::string shown = shown_uri(uri);  // logged: no credentials
    if (host_rules_.empty())
      return "source-add " + shown +
             " refused: network sources from control need --allow-source-host HOST[:PORT] (or allow_source_hosts:)";
    const auto sep = uri.find("://");
    const std::string scheme = lower(uri.substr(0, sep));
    std::string authority = uri.substr(sep + 3);
    authority = authority.substr(0, authority.find_first_of("/?#"));
    if (const auto at = authority.rfind('@'); at != std::string::npos) authority = authority.substr(at + 1);
    std::string host;
    int port = -1;
    if (!split_host_port(authority, host, port))
      return "source-add " + shown + " refused: cannot read its host (HOST, HOST:PORT or [IPV6]:PORT)";
    if (port < 0) port = default_port(scheme);
    for (const auto& rule : host_rules_)
      if ((rule.scheme.empty() || rule.scheme == scheme) && rule.host == host && (rule.port < 0 || rule.port == port))
        return std::nullopt;
    return "source-add " + shown + " refused: " + scheme + "://" + host + (port < 0 ? "" : ":" + std::to_string(port)) +
           " is not allowed by --allow-source-host (" + join(settings_.allow_source_hosts) + ")";
  }
  return check_under(input_roots_, kind.local_path ? kind.local_path(uri) : uri, "source-add", "--input-root");
}

Refusal AccessPolicy::check_output_paths(const PipelineSpec& spec) const {
  if (output_roots_.empty()) return std::nullopt;
  for (const auto& stage : spec.stages) {
    const auto output = stage_output(stage.kind, stage.params);
    if (!output) continue;
    std::error_code ec;
    const std::string absolute = fs::absolute(output->path, ec).lexically_normal().string();
    if (auto why = check_under(output_roots_, absolute, ("stage '" + stage.name + "' path").c_str(), "--output-root"))
      return why;
  }
  return std::nullopt;
}

bool tokens_equal(const std::string& expected, const std::string& given) {
  // Every byte of `expected` is compared, whatever `given` is; the lengths are folded into the result.
  volatile unsigned char diff = expected.size() == given.size() ? 0 : 1;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff = static_cast<unsigned char>(diff | (static_cast<unsigned char>(expected[i]) ^ g));
  }
  return diff == 0;
}

std::string load_control_token(const std::string& path) {
  const std::string shown = to_valid_utf8(path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) throw std::invalid_argument("control token " + shown + ": " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw std::invalid_argument("control token " + shown + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw std::invalid_argument("control token " + shown + " is not a regular file");
  if (st.st_uid != ::geteuid())
    throw std::invalid_argument("control token " + shown + " is owned by uid " + std::to_string(st.st_uid) +
                                ", not by sluiced's user (uid " + std::to_string(::geteuid()) + ")");
  if ((st.st_mode & 077) != 0)
    throw std::invalid_argument("control token " + shown + " has mode " + octal_mode(st.st_mode) +
                                ": others may read it; it must be readable only by sluiced's user (chmod 600 " + shown + ")");
  constexpr std::size_t kMax = 4096;
  if (st.st_size > static_cast<off_t>(kMax))
    throw std::invalid_argument("control token " + shown + " is larger than " + std::to_string(kMax) + " bytes");
  std::string token(kMax + 1, '\0');
  std::size_t got = 0;
  while (got < token.size()) {
    const ssize_t n = ::read(fd, token.data() + got, token.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::invalid_argument("control token " + shown + ": " + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got > kMax) throw std::invalid_argument("control token " + shown + " is larger than " + std::to_string(kMax) + " bytes");
  token.resize(got);
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.size() < 16)
    throw std::invalid_argument("control token " + shown + " holds fewer than 16 characters");
  for (unsigned char c : token)
    if (c < 0x21 || c > 0x7e)
      throw std::invalid_argument("control token " + shown + ": one line of printable characters without spaces expected");
  return token;
}

bool listen_is_loopback(const std::string& listen) {
  const ListenSpec spec = parse_listen(listen, "control");
  if (spec.host.empty()) return false;  // every interface
  if (lower(spec.host) == "localhost") return true;
  boost::system::error_code ec;
  const auto address = boost::asio::ip::make_address(spec.host, ec);
  return !ec && address.is_loopback();
}

}  // namespace sluice
