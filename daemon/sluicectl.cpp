// sluicectl: the operator's client for sluiced's control socket (docs/protocol.md).
//
// One request per invocation (watch: one per refresh): connect to the UNIX socket, write one JSON line,
// read one JSON line back before a deadline, print it for a human (or raw with status --json; trace writes
// the reply's trace to a file). Plain POSIX sockets and poll(); every step of the exchange shares one
// deadline (for trace: the recording time plus --timeout, since the daemon answers only after recording).
#include <fcntl.h>
#include <grp.h>
#include <netdb.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "daemon/jobs_command.hpp"
#include "runtime/latency_budget_limit.hpp"

#if __has_include("version.hpp")
#include "version.hpp"
#endif
#ifndef SLUICE_VERSION
#define SLUICE_VERSION "unknown"
#endif

namespace {

using json = nlohmann::ordered_json;  // keeps the daemon's key order in status --json
using Clock = std::chrono::steady_clock;

constexpr int kExitOk = 0;
constexpr int kExitRefused = 1;  // the daemon replied ok:false
constexpr int kExitUsage = 2;
constexpr int kExitConnect = 3;
constexpr int kExitTimeout = 4;  // no reply in time, or a reply that is not a protocol reply
constexpr int kExitOutput = 5;   // trace: the output file cannot be written

constexpr const char* kDefaultSocket = "/run/sluice/control.sock";
constexpr double kDefaultTimeout = 5.0;
constexpr std::size_t kMaxReply = 16u << 20;
constexpr std::size_t kMaxTraceReply = std::size_t{1} << 30;  // a trace reply carries every event recorded
constexpr double kMaxTraceSeconds = 60.0;

constexpr const char* kUsage = R"(usage: sluicectl [--socket PATH | --tcp HOST:PORT [--token-file FILE]] [--timeout SECONDS] COMMAND [ARGS]

Talks to a running sluiced over its control socket (or its TCP listener).

commands:
  status [--json]       state, uptime, config, per-stage frames/fps/GPU time/queues, the frame
                        ledger and latency percentiles; --json: the daemon's raw reply, indented
  watch [--interval S]  status, refreshed every S seconds (default 1) until Ctrl-C
  sources [--json]      the run-time sources (state, frames, fps, drops, errors, reconnects, why one
                        is stalled or failed, a job's inputs) and the inputs being decoded (progress,
                        ETA); --json: the daemon's raw reply, indented
  add-source URI [--name NAME] [--leaky|--no-leaky] [--rate-limit FPS] [--loop]
                        start a source in the running pipeline: a file, directory or glob (a job),
                        image, image sequence, camera, stream URL or testsrc:PATTERN
  remove-source ID|NAME stop a source; frames it already decoded still reach the sink
  pause                 sources stop producing; frames in flight still reach the sink
  resume                sources produce again
  reload [FILE]         validate and switch to FILE (default: the daemon's current config file);
                        on error the running pipeline stays and the error is printed
  stop                  the daemon drains frames in flight and exits
  trace SECONDS -o FILE record a Chrome/Perfetto trace for SECONDS (at most 60) and write it to FILE
                        ('-': stdout); open it in ui.perfetto.dev
  version               this client's and the daemon's version
  jobs submit|status|requeue-dead redis://HOST:PORT/STREAM ...
                        a job shared by many sluiced through a Redis stream: add inputs, see the
                        consumer group's progress (pending, done, dead-lettered, per consumer), put dead
                        letters back; talks to Redis directly, not to a daemon (sluicectl jobs --help)
  help [COMMAND]        this help, or one command's (also: sluicectl COMMAND --help)

options:
  --socket PATH         control socket (default: $SLUICE_SOCKET if set, else /run/sluice/control.sock)
  --tcp HOST:PORT       talk to sluiced's --control-tcp listener instead (default: $SLUICE_CONTROL_TCP);
                        without a token only status, sources, version and trace are served there
  --token-file FILE     send the shared secret in FILE (sluiced's --control-token; mode 0600) with
                        each request, so TCP requests may change things (default: $SLUICE_TOKEN_FILE)
  --timeout SECONDS     deadline for connecting, sending and the reply (default 5; trace waits
                        its SECONDS on top)
  --version             print this client's version (without asking the daemon)
  -h, --help            print this help

exit status:
  0  success
  1  the daemon refused the request (ok:false); its error is printed on stderr
  2  usage error
  3  cannot connect to the socket (not there, permission denied, nothing listening)
  4  no reply before the deadline, or a reply that is not valid protocol JSON
  5  trace: the output FILE cannot be written
)";

struct CommandHelp {
  const char* name;
  const char* text;
};

constexpr CommandHelp kCommandHelp[] = {
    {"status", R"(usage: sluicectl status [--json]

Print the daemon's state, uptime, config file, pipeline and device, then one row per stage:
  frames          frames the stage has handled
  fps 1s/10s/60s  frames per second over the last 1, 10 and 60 seconds
  host ms/b       host time per batch
  gpu ms/b        GPU time per batch (GPU stages only)
  busy            fraction of time the stage's stream was busy (GPU stages only)
  queue           input queue depth / capacity
  drops, errors   frames the stage dropped or failed
followed by the frame ledger (produced = delivered + dropped + failed + in flight), drop reasons and
errors, and capture-to-sink latency percentiles. Between the stages and the ledger: one row per source
(as sluicectl sources shows them, without URIs and bad inputs) and, while there are inputs, their
progress (a job's inputs done/total, and frames done/total, fps and ETA of each input being decoded).
Fields the daemon did not send are shown as '-'.

  --json          print the daemon's reply as indented JSON instead
)"},
    {"watch", R"(usage: sluicectl watch [--interval SECONDS]

Clear the screen and print status every SECONDS (default 1, at least 0.1; -n S is short for
--interval S) until Ctrl-C (exit 0).
Connection errors are shown in place and retried, so a daemon restart can be watched through.
Each line is cut to the terminal's width with an ellipsis, so a long reason cannot wrap and break
the tables (not on a terminal: to $COLUMNS when set, else whole lines).
)"},
    {"sources", R"(usage: sluicectl sources [--json]

List the pipeline's run-time sources, one row per source:
  id, source      its id and name (either one names it for remove-source)
  kind            file, image, image-sequence, camera, stream or testsrc (a directory or glob: file)
  state           connecting, live, stalled, backoff, eos, failed or removed (paused while the daemon is)
  frames, fps     frames decoded and handed on, and decoded frames per second lately
  dropped         frames dropped before batching (a leaky source behind the pipeline, or --rate-limit)
  errors          open and read errors, bad files
  reconnects      times a camera or stream connected again
then why a source is stalled, backing off or failed (and when it tries again), and for a job (a directory
or glob) its inputs done/total and failed; below each row its URI and its bad inputs. Then one row per
input being decoded: frames done/total (done = delivered + dropped + failed), %, fps and ETA, followed by
the recently finished inputs with their error. Fields the daemon did not send are shown as '-'.
A pipeline whose decode stage renders its test pattern directly has no run-time sources.

  --json          print the daemon's reply as indented JSON instead
)"},
    {"add-source", R"(usage: sluicectl add-source URI [--name NAME] [--leaky|--no-leaky] [--rate-limit FPS] [--loop]
                            [--latency-budget-ms MS]

Ask the daemon to start a source in the running pipeline; the other sources keep running. URI is
  clip.mp4                 a video file
  clips/, 'clips/*.mp4'    a directory or glob (quote it): a job over the files it holds
  photo.jpg                an image
  frames/img_%04d.png      an image sequence
  /dev/video0, v4l2:0      a camera
  rtsp://HOST/PATH         a stream (also rtmp://, http(s)://, tcp://, udp://, srt://)
  testsrc:PATTERN          a test pattern (bars, shapes, gradient, checkerboard, noise)
A local path is made absolute (against this shell's working directory) before it is sent, and the
daemon must be able to read it at that path. Prints the new source's id and name. The daemon answers
before anything is opened: a file it cannot decode or a camera that does not answer shows up in
sluicectl sources (state, reason, errors). It refuses (exit 1, its reason on stderr) a file or image
that is missing or that it may not read, a --name in use, and any source when the pipeline's decode
stage has no run-time sources. May be restricted by sluiced's --allow-user /
--allow-group.

  --name NAME        the source's name (default: from URI, e.g. clip for clip.mp4, video0 for a camera)
  --leaky            when the pipeline is behind, drop the oldest frame (default for live sources)
  --no-leaky         when the pipeline is behind, wait for it (default for files)
  --rate-limit FPS   at most FPS frames per second (0: unlimited, the default); live sources drop the rest
  --loop             files: start again at the end
  --latency-budget-ms MS  this source's capture-to-sink budget (0: none), instead of the pipeline's
                     latency_budget_ms: batches leave early enough for it; frames past it are counted late
Use -- before a URI that starts with '-'.
The daemon accepts local paths only under its --input-root directories and network URIs only to its
--allow-source-host hosts (testsrc: always); anything else is refused with the option to set.
)"},
    {"remove-source", R"(usage: sluicectl remove-source ID|NAME

Ask the daemon to stop a source, named by its id or its name (sluicectl sources lists both). Frames it
already decoded still reach the sink. Prints "removed source ID|NAME" as given. May be restricted by
sluiced's --allow-user / --allow-group.
)"},
    {"pause", R"(usage: sluicectl pause

Ask the daemon to pause: sources stop producing; frames already in flight still reach the sink.
Replies once the sources have handed on the batch they were making. Prints the new state. May be restricted by sluiced's --allow-user / --allow-group.
)"},
    {"resume", R"(usage: sluicectl resume

Ask a paused daemon to produce again. Prints the new state.
)"},
    {"reload", R"(usage: sluicectl reload [FILE]

Ask the daemon to validate FILE and switch to it; without FILE, the daemon re-reads its current config
file. FILE is made absolute (against this shell's working directory) before it is sent, and the daemon
must be able to read it at that path. The daemon loads only the file it was started with or files under
its --config-root directories. If validation fails the old pipeline keeps running and the daemon's error
is printed (exit 1): the place (path:line:col) and the problem, with words quoted from the file left out
(they are in the daemon's log).
)"},
    {"stop", R"(usage: sluicectl stop

Ask the daemon to stop: sources stop, frames in flight drain to the sink, then it exits.
)"},
    {"trace", R"(usage: sluicectl trace SECONDS -o FILE

Ask the daemon to record a trace of the running pipeline for SECONDS (a number, more than 0 and at most
60), then write it to FILE as Chrome/Perfetto trace JSON ({"traceEvents": [...], ...}); open it in
https://ui.perfetto.dev or chrome://tracing. The daemon answers only after recording, so the reply
deadline is SECONDS plus --timeout. FILE is replaced atomically (written to a temporary file in the same
directory, then renamed); an existing FILE is left alone if anything fails. A summary goes to stderr.

  -o, --output FILE   where to write the trace (required); '-' writes it to stdout
)"},
    {"version", R"(usage: sluicectl version

Print this client's version and the daemon's (and whether the daemon was built with CUDA).
)"},
    {"help", R"(usage: sluicectl help [COMMAND]
)"},
};

const char* command_help(const std::string& cmd) {
  if (cmd == "jobs") return sluice::kJobsHelp;
  for (const auto& h : kCommandHelp)
    if (cmd == h.name) return h.text;
  return nullptr;
}

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "sluicectl: %s\n(sluicectl --help for usage)\n", msg.c_str());
  return kExitUsage;
}

// ---------------------------------------------------------------------------------------------------------
// Signals (watch and trace only): SIGINT/SIGTERM set a flag and interrupt poll(); no SA_RESTART on purpose.

volatile std::sig_atomic_t g_interrupted = 0;
volatile std::sig_atomic_t g_signal = 0;  // the signal that set g_interrupted

void on_signal(int sig) {
  g_signal = sig;
  g_interrupted = 1;
}

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// ---------------------------------------------------------------------------------------------------------
// One request/reply exchange.

struct Options {
  std::string socket;
  std::string tcp;    // HOST:PORT: talk to --control-tcp instead of the UNIX socket
  std::string token;  // sent as "token" with every request (the daemon's --control-token)
  double timeout_s = kDefaultTimeout;
};

struct Outcome {
  int code = kExitOk;  // kExitOk, kExitRefused, kExitConnect, kExitTimeout, kExitUsage
  bool interrupted = false;
  std::string error;  // for code != 0: the message (without the "sluicectl: " prefix)
  json reply;         // for kExitOk / kExitRefused
};

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(left);
}

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

std::string connect_hint(int err, const std::string& path) {
  if (err == ECONNREFUSED || err == ENOTSOCK) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode))
      return std::string("not a socket (") +
             (S_ISDIR(st.st_mode)   ? "a directory"
              : S_ISREG(st.st_mode) ? "a regular file"
                                    : "another kind of file") +
             ") — is this the control socket?";
  }
  switch (err) {
    case ENOENT:
      return "no such file — is sluiced running? (--socket PATH or $SLUICE_SOCKET to choose another socket)";
    case EACCES:
    case EPERM: {
      std::string hint = "permission denied — are you in the socket's group";
      struct stat st {};
      if (::stat(path.c_str(), &st) == 0) {
        if (const struct group* gr = ::getgrgid(st.st_gid)) hint += std::string(" ('") + gr->gr_name + "')";
      }
      return hint + "?";
    }
    case ECONNREFUSED:
      return "connection refused — nothing is listening (stale socket file? is sluiced running?)";
    case ENOTSOCK:
      return "not a socket — is this the control socket?";
    case ENOTDIR:
      return "a component of the path is not a directory";
    case ELOOP:
      return "too many symbolic links";
    default:
      return std::strerror(err);
  }
}

// "HOST:PORT" or "[V6]:PORT" -> a connected-or-connecting non-blocking TCP socket; -1 with `error` set.
int tcp_socket(const std::string& address, sockaddr_storage& addr, socklen_t& len, std::string& error) {
  std::string host, port;
  if (!address.empty() && address[0] == '[') {
    const auto close = address.find("]:");
    if (close == std::string::npos) return error = "--tcp: expected [IPV6]:PORT, got '" + address + "'", -1;
    host = address.substr(1, close - 1);
    port = address.substr(close + 2);
  } else {
    const auto colon = address.rfind(':');
    if (colon == std::string::npos || colon == 0) return error = "--tcp: expected HOST:PORT, got '" + address + "'", -1;
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0 || !found)
    return error = "--tcp " + address + ": " + (rc != 0 ? gai_strerror(rc) : "no address"), -1;
  std::memcpy(&addr, found->ai_addr, found->ai_addrlen);
  len = found->ai_addrlen;
  const int family = found->ai_family;
  ::freeaddrinfo(found);
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) error = std::string("cannot create a socket: ") + std::strerror(errno);
  return fd;
}

Outcome exchange(const Options& o, const json& request_in, double timeout_s,
                 std::size_t max_reply = kMaxReply) {
  const std::string& path = o.tcp.empty() ? o.socket : o.tcp;
  json request = request_in;
  if (!o.token.empty()) request["token"] = o.token;
  Outcome out;
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  auto fail = [&](int code, std::string msg) {
    out.code = code;
    out.error = std::move(msg);
    return out;
  };
  auto interrupted = [&]() {
    out.interrupted = true;
    out.code = kExitOk;
    return out;
  };

  std::string line;
  try {
    line = request.dump() + "\n";
  } catch (const json::exception& e) {
    return fail(kExitUsage, std::string("cannot encode the request: ") + e.what());
  }

  sockaddr_storage storage{};
  socklen_t addr_len = 0;
  int raw_fd = -1;
  if (!o.tcp.empty()) {
    std::string error;
    raw_fd = tcp_socket(o.tcp, storage, addr_len, error);
    if (raw_fd < 0) return fail(kExitConnect, error);
  } else {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.empty()) return fail(kExitUsage, "empty socket path");
    if (path.size() >= sizeof addr.sun_path)
      return fail(kExitUsage, "socket path too long (" + std::to_string(path.size()) + " bytes, at most " +
                                  std::to_string(sizeof addr.sun_path - 1) + "): " + path);
    std::memcpy(addr.sun_path, path.data(), path.size());
    std::memcpy(&storage, &addr, sizeof addr);
    addr_len = sizeof addr;
    raw_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  }
  Fd fd(raw_fd);
  if (fd.get() < 0) return fail(kExitConnect, std::string("cannot create a socket: ") + std::strerror(errno));

  // Connect. A UNIX socket connects at once or fails; EAGAIN means the listener's backlog is full,
  // so retry until the deadline.
  for (;;) {
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&storage), addr_len) == 0) break;
    const int err = errno;
    if (err == EINTR) {
      if (g_interrupted) return interrupted();
      continue;
    }
    if (err == EINPROGRESS) {  // not expected for AF_UNIX, but handle it like TCP
      pollfd p{fd.get(), POLLOUT, 0};
      int r = ::poll(&p, 1, ms_left(deadline));
      if (r < 0 && errno == EINTR) {
        if (g_interrupted) return interrupted();
        continue;
      }
      if (r == 0)
        return fail(kExitTimeout, "cannot connect to " + path + ": no answer within " + format_seconds(timeout_s));
      int so = 0;
      socklen_t len = sizeof so;
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so, &len);
      if (so == 0) break;
      return fail(kExitConnect, "cannot connect to " + path + ": " + connect_hint(so, path));
    }
    if (err == EAGAIN) {
      if (ms_left(deadline) == 0)
        return fail(kExitTimeout, "cannot connect to " + path +
                                      ": the daemon is not accepting connections (backlog full for " +
                                      format_seconds(timeout_s) + ")");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (g_interrupted) return interrupted();
      continue;
    }
    return fail(kExitConnect, "cannot connect to " + path + ": " + connect_hint(err, path));
  }

  // Send the request line.
  std::size_t sent = 0;
  while (sent < line.size()) {
    ssize_t n = ::send(fd.get(), line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) {
      if (g_interrupted) return interrupted();
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd.get(), POLLOUT, 0};
      int r = ::poll(&p, 1, ms_left(deadline));
      if (r < 0 && errno == EINTR) {
        if (g_interrupted) return interrupted();
        continue;
      }
      if (r == 0) return fail(kExitTimeout, "timed out sending the request to " + path);
      continue;
    }
    return fail(kExitTimeout, "the daemon closed the connection while the request was sent (" +
                                  std::string(std::strerror(errno)) + ")");
  }

  // Read one reply line.
  std::string buf;
  std::size_t nl = std::string::npos;
  bool eof = false;
  while (nl == std::string::npos && !eof) {
    pollfd p{fd.get(), POLLIN, 0};
    int r = ::poll(&p, 1, ms_left(deadline));
    if (r < 0) {
      if (errno == EINTR) {
        if (g_interrupted) return interrupted();
        continue;
      }
      return fail(kExitTimeout, std::string("poll: ") + std::strerror(errno));
    }
    if (r == 0)
      return fail(kExitTimeout, "no reply from " + path + " within " + format_seconds(timeout_s) +
                                    " (is the daemon stuck? --timeout to wait longer)");
    char chunk[65536];
    ssize_t n = ::recv(fd.get(), chunk, sizeof chunk, 0);
    if (n < 0) {
      if (errno == EINTR) {
        if (g_interrupted) return interrupted();
        continue;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) continue;
      if (errno == ECONNRESET) {
        eof = true;
        break;
      }
      return fail(kExitTimeout, std::string("reading the reply: ") + std::strerror(errno));
    }
    if (n == 0) {
      eof = true;
      break;
    }
    const std::size_t old = buf.size();
    buf.append(chunk, static_cast<std::size_t>(n));
    nl = buf.find('\n', old);
    if (nl == std::string::npos && buf.size() > max_reply)
      return fail(kExitTimeout, "broken reply from " + path + ": more than " + std::to_string(max_reply >> 20) +
                                    " MiB without a newline");
  }
  if (nl != std::string::npos) buf.resize(nl);
  if (buf.find_first_not_of(" \t\r") == std::string::npos)
    return fail(kExitTimeout, "the daemon closed the connection without replying");

  json reply = json::parse(buf, nullptr, /*allow_exceptions=*/false);
  auto excerpt = [&]() {
    std::string s = buf.size() > 200 ? buf.substr(0, 200) + "..." : buf;
    return s;
  };
  if (reply.is_discarded()) return fail(kExitTimeout, "broken reply from " + path + " (not JSON): " + excerpt());
  if (!reply.is_object()) return fail(kExitTimeout, "broken reply from " + path + " (not an object): " + excerpt());
  auto ok = reply.find("ok");
  if (ok == reply.end() || !ok->is_boolean())
    return fail(kExitTimeout, "broken reply from " + path + " (no boolean 'ok'): " + excerpt());
  const bool accepted = ok->get<bool>();
  out.reply = std::move(reply);
  if (!accepted) {
    out.code = kExitRefused;
    auto e = out.reply.find("error");
    if (e != out.reply.end() && e->is_string())
      out.error = e->get<std::string>();
    else if (e != out.reply.end())
      out.error = e->dump();
    else
      out.error = "request refused (the daemon gave no reason)";
  }
  return out;
}

// Prints the outcome's error, if any, and returns its exit code.
int report_failure(const Outcome& o) {
  if (o.code == kExitRefused)
    std::fprintf(stderr, "sluicectl: daemon: %s\n", o.error.c_str());
  else if (o.code != kExitOk)
    std::fprintf(stderr, "sluicectl: %s\n", o.error.c_str());
  return o.code;
}

// ---------------------------------------------------------------------------------------------------------
// Formatting a status reply. Every field may be missing or of the wrong type: print '-'.

const json* field(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string text(const json& j, const char* key) {
  const json* v = field(j, key);
  if (!v) return "-";
  if (v->is_string()) return v->get<std::string>();
  if (v->is_boolean()) return v->get<bool>() ? "yes" : "no";
  if (v->is_number()) return v->dump();
  return "-";
}

std::optional<double> number(const json& j, const char* key) {
  const json* v = field(j, key);
  if (!v || !v->is_number()) return std::nullopt;
  double d = v->get<double>();
  if (!std::isfinite(d)) return std::nullopt;
  return d;
}

std::string fmt(const json& j, const char* key, const char* format, double scale = 1.0) {
  auto d = number(j, key);
  if (!d) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, *d * scale);
  return buf;
}

std::string count(const json& j, const char* key) {
  const json* v = field(j, key);
  if (!v) return "-";
  if (v->is_number_unsigned()) return std::to_string(v->get<std::uint64_t>());
  if (v->is_number_integer()) return std::to_string(v->get<std::int64_t>());
  if (v->is_number_float()) return fmt(j, key, "%.0f");
  return "-";
}

std::string format_uptime(const json& j) {
  auto s = number(j, "uptime_s");
  if (!s || *s < 0) return "-";
  char buf[64];
  if (*s < 60) {
    std::snprintf(buf, sizeof buf, "%.1fs", *s);
    return buf;
  }
  auto total = static_cast<unsigned long long>(*s);
  unsigned long long d = total / 86400, h = total / 3600 % 24, m = total / 60 % 60, sec = total % 60;
  if (d)
    std::snprintf(buf, sizeof buf, "%llud %02lluh %02llum %02llus", d, h, m, sec);
  else if (h)
    std::snprintf(buf, sizeof buf, "%lluh %02llum %02llus", h, m, sec);
  else
    std::snprintf(buf, sizeof buf, "%llum %02llus", m, sec);
  return buf;
}

std::string ledger_line(const json& f) {
  std::string in_flight = count(f, "in_flight");
  if (in_flight == "-") {  // derive it when the daemon left it out
    auto p = number(f, "produced"), d = number(f, "delivered"), x = number(f, "dropped"), e = number(f, "failed");
    if (p && d && x && e && *p >= *d + *x + *e) in_flight = std::to_string(static_cast<long long>(*p - *d - *x - *e));
  }
  return "produced " + count(f, "produced") + " = delivered " + count(f, "delivered") + " + dropped " +
         count(f, "dropped") + " + failed " + count(f, "failed") + " + in flight " + in_flight;
}

void append_ledger_details(std::string& out, const json& f) {
  if (auto late = number(f, "late"); late && *late > 0) {
    out += "  late " + count(f, "late") + " (delivered past their latency budget)";
    if (const json* by = field(f, "late_by_source"); by && by->is_object() && !by->empty()) {
      std::string sources;
      for (const auto& [name, n] : by->items())
        sources += (sources.empty() ? "" : ", ") + name + " " + (n.is_number() ? n.dump() : std::string("-"));
      out += ": " + sources;
    }
    out += "\n";
  }
  if (const json* reasons = field(f, "drop_reasons"); reasons && reasons->is_object()) {
    for (const auto& [reason, n] : reasons->items())
      out += "  dropped " + (n.is_number() ? n.dump() : std::string("-")) + ": " + reason + "\n";
  }
  if (const json* errors = field(f, "errors"); errors && errors->is_array()) {
    std::size_t shown = 0;
    for (const auto& e : *errors) {
      if (shown == 8) {
        out += "  ... " + std::to_string(errors->size() - shown) + " more errors (status --json for all)\n";
        break;
      }
      out += "  error: " + (e.is_string() ? e.get<std::string>() : e.dump()) + "\n";
      ++shown;
    }
  }
}

// The earlier generations' ledger: docs/protocol.md puts their `totals` under `frames_before_reload`; accept it
// at the top level or inside `frames`, with or without the `totals` wrapper.
const json* earlier_ledger(const json& r) {
  const json* before = field(r, "frames_before_reload");
  if (!before) {
    if (const json* f = field(r, "frames")) before = field(*f, "frames_before_reload");
  }
  if (!before || !before->is_object()) return nullptr;
  if (const json* t = field(*before, "totals"); t && t->is_object()) return t;
  return before;
}

// ---------------------------------------------------------------------------------------------------------
// Formatting sources and inputs: the `sources` reply, and the same two arrays in a `status` reply.

// 1.8 s, 42 s, 3m 07s, 2h 05m, 1d 03h; '-' for a missing or negative value (-1: not known).
std::string format_duration(std::optional<double> s) {
  if (!s || *s < 0) return "-";
  char buf[64];
  if (*s < 9.95) {
    std::snprintf(buf, sizeof buf, "%.1f s", *s);
    return buf;
  }
  if (*s < 59.5) {
    std::snprintf(buf, sizeof buf, "%.0f s", *s);
    return buf;
  }
  const auto t = static_cast<unsigned long long>(*s + 0.5);
  if (t < 3600)
    std::snprintf(buf, sizeof buf, "%llum %02llus", t / 60, t % 60);
  else if (t < 86400)
    std::snprintf(buf, sizeof buf, "%lluh %02llum", t / 3600, t / 60 % 60);
  else
    std::snprintf(buf, sizeof buf, "%llud %02lluh", t / 86400, t / 3600 % 24);
  return buf;
}

std::string shorten(std::string s, std::size_t max) {
  if (s.size() > max) s = s.substr(0, max - 3) + "...";
  return s;
}

// The array under `key`, or nullptr when the reply has none (an older daemon).
const json* array_field(const json& j, const char* key) {
  const json* v = field(j, key);
  return v && v->is_array() ? v : nullptr;
}

std::string source_label(const json& s) {
  std::string name = text(s, "name");
  if (name == "-") name = text(s, "stage");  // daemons before run-time sources named the decode stage
  return shorten(name, 32);
}

// Live sources connect and reconnect; their `inputs` count connections, not the files of a job.
bool is_live_kind(const std::string& kind) { return kind == "camera" || kind == "stream" || kind == "testsrc"; }

// What follows a source's columns: why it is stalled, backing off or failed; a job's input counts.
std::string source_notes(const json& s) {
  std::vector<std::string> notes;
  const std::string state = text(s, "state");
  if (state == "stalled" || state == "backoff" || state == "failed") {
    std::string note;
    if (const json* reason = field(s, "reason"); reason && reason->is_string()) note = reason->get<std::string>();
    std::string when;
    if (state == "stalled" && number(s, "since_last_frame_s").value_or(-1) >= 0)
      when = "last frame " + format_duration(number(s, "since_last_frame_s")) + " ago";
    if (state == "backoff" && number(s, "next_attempt_in_s").value_or(-1) >= 0)
      when = "next attempt in " + format_duration(number(s, "next_attempt_in_s"));
    if (note.empty())
      note = when;
    else if (!when.empty())
      note += " (" + when + ")";
    if (!note.empty()) notes.push_back(state + ": " + note);  // the state column says it already otherwise
  }
  if (const json* in = field(s, "inputs"); in && in->is_object() && !is_live_kind(text(s, "kind"))) {
    const auto total = number(*in, "total"), failed = number(*in, "failed"), skipped = number(*in, "skipped");
    if (total.value_or(0) > 1 || failed.value_or(0) > 0 || skipped.value_or(0) > 0) {
      std::string note = "inputs " + count(*in, "done") + "/" + count(*in, "total") + " done, " +
                         count(*in, "failed") + " failed";
      if (skipped.value_or(0) > 0) note += ", " + count(*in, "skipped") + " skipped";
      notes.push_back(note);
    }
  }
  std::string out;
  for (const auto& n : notes) out += (out.empty() ? "" : "; ") + n;
  return out;
}

// One row per source; with `detailed` (the sources command) each row is followed by the source's URI and
// its bad inputs.
void append_sources_table(std::string& out, const json& sources, bool detailed) {
  int name_w = 6, kind_w = 4;
  for (const auto& s : sources) {
    name_w = std::max(name_w, static_cast<int>(source_label(s).size()));
    kind_w = std::max(kind_w, static_cast<int>(shorten(text(s, "kind"), 16).size()));
  }
  char line[512];
  std::snprintf(line, sizeof line, "%4s  %-*s %-*s %-10s %10s %7s %8s %7s %10s\n", "id", name_w, "source", kind_w,
                "kind", "state", "frames", "fps", "dropped", "errors", "reconnects");
  out += line;
  for (const auto& s : sources) {
    std::snprintf(line, sizeof line, "%4s  %-*s %-*s %-10s %10s %7s %8s %7s %10s", count(s, "id").c_str(), name_w,
                  source_label(s).c_str(), kind_w, shorten(text(s, "kind"), 16).c_str(),
                  shorten(text(s, "state"), 10).c_str(), count(s, "frames").c_str(), fmt(s, "fps", "%.1f").c_str(),
                  count(s, "dropped").c_str(), count(s, "errors").c_str(), count(s, "reconnects").c_str());
    out += line;
    if (std::string notes = source_notes(s); !notes.empty()) out += "  " + notes;
    out += "\n";
    if (!detailed) continue;
    if (const json* uri = field(s, "uri"); uri && uri->is_string()) out += "        uri " + uri->get<std::string>() + "\n";
    if (const std::string decoder = text(s, "decoder"); decoder != "-" && !decoder.empty()) out += "        decoder " + decoder + "\n";
    if (const json* bad = array_field(s, "bad_inputs")) {
      std::size_t shown = 0;
      for (const auto& b : *bad) {
        if (shown == 8) {
          out += "        ... " + std::to_string(bad->size() - shown) + " more bad inputs (sources --json for all)\n";
          break;
        }
        out += "        bad input: " + (b.is_string() ? b.get<std::string>() : b.dump()) + "\n";
        ++shown;
      }
    }
  }
}

bool input_in_progress(const json& in) {
  const std::string state = text(in, "state");
  return state == "decoding" || state == "finishing";
}

// frames done/total: "37/120", "37/-" while the total is not known.
std::string input_frames(const json& in) {
  std::string done = count(in, "frames_done");
  if (done == "-") {  // derive it when the daemon left it out
    auto d = number(in, "delivered"), x = number(in, "dropped"), f = number(in, "failed");
    if (d && x && f) done = std::to_string(static_cast<long long>(*d + *x + *f));
  }
  return done + "/" + count(in, "frames_total");
}

std::string input_percent(const json& in) {
  auto total = number(in, "frames_total");
  auto done = number(in, "frames_done");
  if (!done) {
    auto d = number(in, "delivered"), x = number(in, "dropped"), f = number(in, "failed");
    if (d && x && f) done = *d + *x + *f;
  }
  if (!total || *total <= 0 || !done) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", std::floor(std::clamp(*done / *total, 0.0, 1.0) * 100.0));
  return buf;
}

// The inputs table of the sources command: the inputs in progress first, then the recently finished ones.
void append_inputs_table(std::string& out, const json& inputs) {
  std::vector<const json*> rows;
  for (const auto& in : inputs) rows.push_back(&in);
  std::stable_partition(rows.begin(), rows.end(), [](const json* in) { return input_in_progress(*in); });
  int source_w = 6;
  for (const json* in : rows) source_w = std::max(source_w, static_cast<int>(shorten(text(*in, "source"), 32).size()));
  char line[512];
  std::snprintf(line, sizeof line, "%5s  %-*s %-10s %15s %5s %7s %8s  %s\n", "input", source_w, "source", "state",
                "frames", "%", "fps", "ETA", "uri");
  out += line;
  for (const json* in : rows) {
    std::snprintf(line, sizeof line, "%5s  %-*s %-10s %15s %5s %7s %8s  ", count(*in, "id").c_str(), source_w,
                  shorten(text(*in, "source"), 32).c_str(), shorten(text(*in, "state"), 10).c_str(),
                  input_frames(*in).c_str(), input_percent(*in).c_str(), fmt(*in, "fps", "%.1f").c_str(),
                  input_in_progress(*in) ? format_duration(number(*in, "eta_s")).c_str() : "-");
    out += line + text(*in, "uri");
    if (const json* e = field(*in, "error"); e && e->is_string() && !e->get<std::string>().empty())
      out += " (" + e->get<std::string>() + ")";
    out += "\n";
  }
}

// status: the inputs of the sources that read files summed up, and a line per input in progress (at most 4).
void append_progress(std::string& out, const json* sources, const json* inputs) {
  double total = 0, done = 0, failed = 0, skipped = 0;
  bool counted = false;
  if (sources)
    for (const auto& s : *sources) {
      const json* in = field(s, "inputs");
      if (!in || !in->is_object() || is_live_kind(text(s, "kind"))) continue;
      auto t = number(*in, "total"), d = number(*in, "done"), f = number(*in, "failed"), k = number(*in, "skipped");
      if (!t) continue;
      counted = true;
      total += *t;
      done += d.value_or(0);
      failed += f.value_or(0);
      skipped += k.value_or(0);
    }
  std::vector<const json*> running;  // a camera or stream connection has no end to be near: not listed
  if (inputs)
    for (const auto& in : *inputs)
      if (input_in_progress(in) && (!is_live_kind(text(in, "kind")) || number(in, "frames_total")))
        running.push_back(&in);
  if (!(counted && total > 0) && running.empty()) return;
  auto n = [](double v) { return std::to_string(static_cast<long long>(v)); };
  std::string line = "inputs: ";
  if (counted && total > 0) {
    line += n(done) + "/" + n(total) + " done, " + n(failed) + " failed";
    if (skipped > 0) line += ", " + n(skipped) + " skipped";
    line += ", ";
  }
  out += line + std::to_string(running.size()) + " in progress\n";
  std::size_t shown = 0;
  for (const json* in : running) {
    if (shown == 4) {
      out += "  ... " + std::to_string(running.size() - shown) + " more (sluicectl sources)\n";
      break;
    }
    std::string uri = text(*in, "uri");
    if (uri.size() > 60) uri = "..." + uri.substr(uri.size() - 57);
    const std::string pct = input_percent(*in);
    out += "  " + uri + "  " + input_frames(*in) + (pct == "-" ? "" : " (" + pct + ")") + "  " +
           fmt(*in, "fps", "%.1f") + " fps  ETA " + format_duration(number(*in, "eta_s")) + "\n";
    ++shown;
  }
}

// The sources command's output.
std::string format_sources(const json& r) {
  std::string out;
  const json* sources = array_field(r, "sources");
  if (!sources)
    out += "(no sources reported)\n";
  else if (sources->empty())
    out += "no sources\n";
  else
    append_sources_table(out, *sources, /*detailed=*/true);
  if (const json* inputs = array_field(r, "inputs"); inputs && !inputs->empty()) {
    out += "\n";
    append_inputs_table(out, *inputs);
  }
  return out;
}

std::string format_status(const json& r) {
  std::string out;
  char line[512];
  auto row = [&](std::string label, const std::string& value) {
    label.resize(12, ' ');
    out += label + value + "\n";
  };
  row("state", text(r, "state"));
  row("uptime", format_uptime(r));
  row("config", text(r, "config"));
  std::string pipeline = text(r, "pipeline");
  if (field(r, "generation")) pipeline += " (generation " + count(r, "generation") + ")";
  row("pipeline", pipeline);
  row("device", text(r, "device") + ", execution " + text(r, "execution"));
  out += "\n";

  const json* stages = field(r, "stages");
  const bool have_stages = stages && stages->is_array() && !stages->empty();
  auto stage_label = [](const json& st) {
    std::string name = text(st, "name");
    const std::string kind = text(st, "kind");
    if (kind != "-" && kind != name) name += " (" + kind + ")";
    if (name.size() > 60) name = name.substr(0, 57) + "...";
    return name;
  };
  int name_w = 14;
  if (have_stages)
    for (const auto& st : *stages) name_w = std::max(name_w, static_cast<int>(stage_label(st).size()));
  std::snprintf(line, sizeof line, "%-*s %10s %8s %8s %8s %9s %9s %5s %11s %8s %8s\n", name_w, "stage", "frames",
                "fps 1s", "fps 10s", "fps 60s", "host ms/b", "gpu ms/b", "busy", "queue", "drops", "errors");
  out += line;
  if (!have_stages) {
    out += "  (no stages reported)\n";
  } else {
    for (const auto& st : *stages) {
      const std::string name = stage_label(st);
      const json* on_gpu = field(st, "on_gpu");
      const bool gpu_stage = !(on_gpu && on_gpu->is_boolean() && !on_gpu->get<bool>());
      const std::string gpu = gpu_stage ? fmt(st, "gpu_ms_per_batch", "%.3f") : "-";
      const std::string busy = gpu_stage ? fmt(st, "busy", "%.0f%%", 100.0) : "-";
      std::string queue = "-";
      if (auto cap = number(st, "queue_capacity"); cap && *cap > 0)
        queue = count(st, "queue_depth") + "/" + count(st, "queue_capacity");
      std::snprintf(line, sizeof line, "%-*s %10s %8s %8s %8s %9s %9s %5s %11s %8s %8s\n", name_w, name.c_str(),
                    count(st, "frames").c_str(), fmt(st, "fps_1s", "%.1f").c_str(), fmt(st, "fps_10s", "%.1f").c_str(),
                    fmt(st, "fps_60s", "%.1f").c_str(), fmt(st, "host_ms_per_batch", "%.3f").c_str(), gpu.c_str(),
                    busy.c_str(), queue.c_str(), count(st, "dropped").c_str(), count(st, "errors").c_str());
      out += line;
    }
  }
  out += "\n";

  // Sources and inputs (daemons before run-time sources send neither, or a list without ids: '-').
  const json* sources = array_field(r, "sources");
  const json* inputs = array_field(r, "inputs");
  if (sources) {
    if (sources->empty())
      out += "sources: none\n";
    else
      append_sources_table(out, *sources, /*detailed=*/false);
  }
  const std::size_t before_progress = out.size();
  append_progress(out, sources, inputs);
  if (sources || out.size() != before_progress) out += "\n";

  static const json kEmpty = json::object();
  const json* frames = field(r, "frames");
  const json& f = frames && frames->is_object() ? *frames : kEmpty;
  out += "frames: " + ledger_line(f) + "\n";
  append_ledger_details(out, f);
  const json* before = earlier_ledger(r);
  const auto earlier_produced = before ? number(*before, "produced") : std::nullopt;
  const auto generation = number(r, "generation");
  if (before && ((earlier_produced && *earlier_produced > 0) || (generation && *generation > 1))) {
    out += "earlier generations: " + ledger_line(*before) + "\n";
    append_ledger_details(out, *before);
  }
  const json* lat = field(r, "latency_ms");
  const json& l = lat && lat->is_object() ? *lat : kEmpty;
  auto ms = [&](const char* key) {
    std::string v = fmt(l, key, "%.2f");
    return v == "-" ? v : v + " ms";
  };
  out += "latency (capture to sink): p50 " + ms("p50") + ", p90 " + ms("p90") + ", p99 " + ms("p99") + "\n";
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// Commands.

bool parse_seconds(const std::string& s, double min, double& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size() || !std::isfinite(v) || v < min) return false;
  out = v;
  return true;
}

int cmd_simple(const Options& o, const std::string& request) {
  Outcome r = exchange(o, json{{"request", request}}, o.timeout_s);
  if (r.code != kExitOk) return report_failure(r);
  std::printf("%s: state %s\n", request.c_str(), text(r.reply, "state").c_str());
  return kExitOk;
}

int cmd_reload(const Options& o, const std::optional<std::string>& file) {
  json req{{"request", "reload"}};
  if (file) {
    std::error_code ec;
    std::filesystem::path p = std::filesystem::absolute(*file, ec);
    if (ec) return usage_error("cannot make '" + *file + "' absolute: " + ec.message());
    req["path"] = p.lexically_normal().string();
  }
  Outcome r = exchange(o, req, o.timeout_s);
  if (r.code != kExitOk) return report_failure(r);
  std::string msg = "reload: config " + text(r.reply, "config");
  if (field(r.reply, "generation")) msg += " (generation " + count(r.reply, "generation") + ")";
  if (field(r.reply, "state")) msg += ", state " + text(r.reply, "state");
  std::printf("%s\n", msg.c_str());
  return kExitOk;
}

int cmd_version(const Options& o) {
  std::printf("sluicectl %s\n", SLUICE_VERSION);
  std::fflush(stdout);
  Outcome r = exchange(o, json{{"request", "version"}}, o.timeout_s);
  if (r.code != kExitOk) return report_failure(r);
  std::string cuda = "-";
  if (const json* c = field(r.reply, "cuda"); c && c->is_boolean()) cuda = c->get<bool>() ? "yes" : "no";
  std::printf("sluiced %s (cuda: %s)\n", text(r.reply, "version").c_str(), cuda.c_str());
  return kExitOk;
}

int cmd_status(const Options& o, bool as_json) {
  Outcome r = exchange(o, json{{"request", "status"}}, o.timeout_s);
  if (r.code != kExitOk) return report_failure(r);
  if (as_json)
    std::printf("%s\n", r.reply.dump(2, ' ', false, json::error_handler_t::replace).c_str());
  else
    std::printf("%s", format_status(r.reply).c_str());
  return kExitOk;
}

int cmd_sources(const Options& o, bool as_json) {
  Outcome r = exchange(o, json{{"request", "sources"}}, o.timeout_s);
  if (r.code != kExitOk) return report_failure(r);
  if (as_json)
    std::printf("%s\n", r.reply.dump(2, ' ', false, json::error_handler_t::replace).c_str());
  else
    std::printf("%s", format_sources(r.reply).c_str());
  return kExitOk;
}

// A URI the daemon reads as a local path (a file, directory, glob or image sequence) rather than a URL
// (scheme://...), a camera (/dev/..., v4l2:N) or a test pattern (testsrc:PATTERN).
bool is_local_path(const std::string& uri) {
  auto starts_with_icase = [&](std::string_view prefix) {
    return uri.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), uri.begin(), [](char a, char b) {
             return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
           });
  };
  if (uri.rfind("/dev/", 0) == 0 || starts_with_icase("testsrc:") || starts_with_icase("v4l2:")) return false;
  const std::size_t sep = uri.find("://");
  if (sep != std::string::npos && sep > 0 && std::isalpha(static_cast<unsigned char>(uri[0])) &&
      std::all_of(uri.begin(), uri.begin() + static_cast<std::ptrdiff_t>(sep), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
      }))
    return false;
  return true;
}

struct SourceAddArgs {
  std::string uri;
  std::optional<std::string> name;
  std::optional<bool> leaky;
  std::optional<double> rate_limit;
  std::optional<double> latency_budget_ms;
  bool loop = false;
};

int cmd_add_source(const Options& o, const SourceAddArgs& a) {
  json req{{"request", "source-add"}};
  std::string uri = a.uri;
  if (is_local_path(uri)) {
    std::error_code ec;
    std::filesystem::path p = std::filesystem::absolute(uri, ec);
    if (ec) return usage_error("add-source: cannot make '" + uri + "' absolute: " + ec.message());
    uri = p.lexically_normal().string();
  }
  req["uri"] = uri;
  if (a.name) req["name"] = *a.name;
  if (a.leaky) req["leaky"] = *a.leaky;
  if (a.rate_limit) {
    if (*a.rate_limit == std::floor(*a.rate_limit) && *a.rate_limit < 1e15)
      req["rate_limit"] = static_cast<std::int64_t>(*a.rate_limit);  // 25, not 25.0
    else
      req["rate_limit"] = *a.rate_limit;
  }
  if (a.loop) req["loop"] = true;
  if (a.latency_budget_ms) req["latency_budget_ms"] = *a.latency_budget_ms;
  Outcome r = exchange(o, req, o.timeout_s);
  if (r.code != kExitOk) return report_failure(r);
  std::printf("added source %s '%s'\n", count(r.reply, "id").c_str(), text(r.reply, "name").c_str());
  return kExitOk;
}

int cmd_remove_source(const Options& o, const std::string& which) {
  Outcome r = exchange(o, json{{"request", "source-remove"}, {"source", which}}, o.timeout_s);
  if (r.code != kExitOk) return report_failure(r);
  std::printf("removed source %s\n", which.c_str());
  return kExitOk;
}

void write_all(int fd, const std::string& s) {
  std::size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<std::size_t>(n);
  }
}

// Display columns of UTF-8 text: one per code point (continuation bytes do not count).
std::size_t display_width(std::string_view s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// `line` in at most `width` columns: control characters become spaces (a reason may hold a tab or a CR), and a
// longer line is cut at a code point boundary and ends in an ellipsis.
std::string fit_width(std::string line, std::size_t width) {
  for (char& c : line)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  if (width == 0 || display_width(line) <= width) return line;
  std::size_t kept = 0, end = 0;
  while (end < line.size()) {
    std::size_t next = end + 1;
    while (next < line.size() && (static_cast<unsigned char>(line[next]) & 0xC0) == 0x80) ++next;
    if (kept + 1 > width - 1) break;
    ++kept;
    end = next;
  }
  return line.substr(0, end) + "\u2026";
}

// Every line of `text` fitted to `width` columns (0: no limit): a long reason cannot wrap and break the tables.
std::string fit_screen(const std::string& text, std::size_t width) {
  std::string out;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t nl = text.find('\n', at);
    const std::size_t end = nl == std::string::npos ? text.size() : nl;
    out += fit_width(text.substr(at, end - at), width);
    if (nl == std::string::npos) break;
    out += '\n';
    at = nl + 1;
  }
  return out;
}

// The width watch fits its lines to: the terminal's (TIOCGWINSZ), else $COLUMNS, else none (a pipe or file
// keeps whole lines).
std::size_t watch_columns(bool tty) {
  winsize ws{};
  if (tty && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const long n = std::strtol(c, &end, 10);
    if (end != c && *end == '\0' && n > 0 && n < 100000) return static_cast<std::size_t>(n);
  }
  return 0;
}

int cmd_watch(const Options& o, double interval_s) {
  install_interrupt_handlers();
  const bool tty = ::isatty(STDOUT_FILENO) != 0;
  bool first = true;
  while (!g_interrupted) {
    const auto next =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval_s));
    Outcome r = exchange(o, json{{"request", "status"}}, o.timeout_s);
    if (r.interrupted || g_interrupted) break;

    char stamp[64] = "";
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    if (::localtime_r(&now, &tm)) std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
    char head[256];
    std::snprintf(head, sizeof head, "every %gs: sluicectl status (%s)    %s\n\n", interval_s, o.socket.c_str(), stamp);

    std::string body = head;
    if (r.code == kExitOk)
      body += format_status(r.reply);
    else if (r.code == kExitRefused)
      body += "daemon: " + r.error + "\n";
    else
      body += r.error + "\n(retrying)\n";
    // The width is read at every refresh: a resized terminal gets lines that fit it.
    const std::string screen = (tty ? "\x1b[H\x1b[2J" : (first ? "" : "\n")) + fit_screen(body, watch_columns(tty));
    write_all(STDOUT_FILENO, screen);
    first = false;

    // Sleep until the next refresh; poll() with no descriptors returns early (EINTR) on Ctrl-C.
    while (!g_interrupted) {
      int left = ms_left(next);
      if (left == 0) break;
      ::poll(nullptr, 0, left);
    }
  }
  if (tty) write_all(STDOUT_FILENO, "\n");
  return kExitOk;
}

// trace's output: FILE, replaced atomically by a temporary file in its directory that is renamed over it,
// or stdout for "-". The temporary file is created before the daemon is asked to record, so an unwritable
// FILE fails at once rather than after SECONDS; it is removed again on every failure.
class TraceOutput {
 public:
  TraceOutput() = default;
  TraceOutput(const TraceOutput&) = delete;
  TraceOutput& operator=(const TraceOutput&) = delete;
  ~TraceOutput() { discard(); }

  // Returns an error message, empty on success.
  std::string open(const std::string& file) {
    file_ = file;
    if (file == "-") return "";
    struct stat st {};
    if (::stat(file.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return file + " is a directory";
    const std::filesystem::path p(file);
    if (!p.has_filename()) return file + " is not a file name";
    std::string dir = p.parent_path().string();
    if (dir.empty()) dir = ".";
    std::string tmpl = (p.parent_path() / ("." + p.filename().string() + ".tmp-XXXXXX")).string();
    fd_ = ::mkostemp(tmpl.data(), O_CLOEXEC);
    if (fd_ < 0) return "cannot create a file in " + dir + ": " + std::strerror(errno);
    tmp_ = tmpl;
    const mode_t mask = ::umask(0);  // mkostemp makes 0600; give FILE the mode a plain create would
    ::umask(mask);
    ::fchmod(fd_, 0666 & ~mask);
    return "";
  }

  // Writes `data` and puts it in place. Returns an error message, empty on success.
  std::string commit(const std::string& data) {
    if (file_ == "-") {
      std::fflush(stdout);
      if (!write_fully(STDOUT_FILENO, data)) return std::string("cannot write to stdout: ") + std::strerror(errno);
      return "";
    }
    if (!write_fully(fd_, data)) return "cannot write " + tmp_ + ": " + std::strerror(errno);
    if (::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS)
      return "cannot write " + tmp_ + ": " + std::strerror(errno);
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return "cannot write " + tmp_ + ": " + std::strerror(errno);
    if (::rename(tmp_.c_str(), file_.c_str()) != 0)
      return "cannot rename " + tmp_ + " to " + file_ + ": " + std::strerror(errno);
    tmp_.clear();
    return "";
  }

  void discard() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
    tmp_.clear();
  }

 private:
  static bool write_fully(int fd, const std::string& s) {
    std::size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::write(fd, s.data() + off, s.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return false;
      if (n == 0) {
        errno = EIO;
        return false;
      }
      off += static_cast<std::size_t>(n);
    }
    return true;
  }

  std::string file_;
  std::string tmp_;
  int fd_ = -1;
};

int cmd_trace(const Options& o, double seconds, const std::string& file) {
  install_interrupt_handlers();  // Ctrl-C while recording: remove the temporary file, then die of the signal
  auto die_of_signal = [](TraceOutput& out) {
    out.discard();
    const int sig = g_signal ? static_cast<int>(g_signal) : SIGINT;
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return 128 + sig;
  };

  TraceOutput out;
  if (std::string err = out.open(file); !err.empty()) {
    std::fprintf(stderr, "sluicectl: trace: %s\n", err.c_str());
    return kExitOutput;
  }
  json req{{"request", "trace"}};
  if (seconds == std::floor(seconds))
    req["seconds"] = static_cast<std::int64_t>(seconds);  // 1, not 1.0
  else
    req["seconds"] = seconds;
  Outcome r = exchange(o, req, seconds + o.timeout_s, kMaxTraceReply);
  if (r.interrupted || g_interrupted) return die_of_signal(out);
  if (r.code != kExitOk) {
    out.discard();
    return report_failure(r);
  }
  const json* trace = field(r.reply, "trace");
  const json* events = trace && trace->is_object() ? field(*trace, "traceEvents") : nullptr;
  if (!events || !events->is_array()) {
    out.discard();
    std::fprintf(stderr, "sluicectl: broken reply from %s: %s\n", o.socket.c_str(),
                 !trace ? "no 'trace'"
                 : !trace->is_object() ? "'trace' is not an object"
                                       : "the trace has no 'traceEvents' array");
    return kExitTimeout;
  }
  if (std::string err = out.commit(trace->dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
      !err.empty()) {
    out.discard();
    std::fprintf(stderr, "sluicectl: trace: %s\n", err.c_str());
    return kExitOutput;
  }
  std::fprintf(stderr, "trace: %zu events over %g s -> %s (open in ui.perfetto.dev)\n", events->size(), seconds,
               file == "-" ? "stdout" : file.c_str());
  return kExitOk;
}

bool is_help(const std::string& a) { return a == "-h" || a == "--help"; }

}  // namespace

int run(int argc, char** argv);

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // a reply shape the formatting did not expect, out of memory, ...
    std::fprintf(stderr, "sluicectl: %s\n", e.what());
    return kExitTimeout;
  }
}

// The control token: the file's first line (a trailing newline dropped). Refuses a file others may read,
// as sluiced does, so a secret left readable is noticed on the client side too.
bool read_token_file(const std::string& path, std::string& token, std::string& error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return error = "--token-file " + path + ": " + std::strerror(errno), false;
  Fd guard(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return error = "--token-file " + path + ": not a regular file", false;
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return error = "--token-file " + path + " has mode " + mode + ": others may read it (chmod 600 " + path + ")", false;
  }
  char buf[4097];
  ssize_t n = ::read(fd, buf, sizeof buf);
  if (n < 0) return error = "--token-file " + path + ": " + std::strerror(errno), false;
  if (n > 4096) return error = "--token-file " + path + ": larger than 4096 bytes", false;
  token.assign(buf, static_cast<std::size_t>(n));
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.empty()) return error = "--token-file " + path + " is empty", false;
  return true;
}

int run(int argc, char** argv) {
  Options opt;
  if (const char* env = std::getenv("SLUICE_SOCKET"); env && *env)
    opt.socket = env;
  else
    opt.socket = kDefaultSocket;

  std::string token_file;
  if (const char* env = std::getenv("SLUICE_CONTROL_TCP"); env && *env) opt.tcp = env;
  if (const char* env = std::getenv("SLUICE_TOKEN_FILE"); env && *env) token_file = env;

  // Global options may come before or after the command; the rest are the command's words.
  std::vector<std::string> words;
  std::size_t literal_from = SIZE_MAX;  // words from this index came after "--": never options
  bool help = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const std::string& name, std::string& v) -> int {
      // returns 1 if `a` is option `name` (v filled), 0 if not, -1 on a missing value
      if (a == name) {
        if (i + 1 >= argc) return -1;
        v = argv[++i];
        return 1;
      }
      if (a.rfind(name + "=", 0) == 0) {
        v = a.substr(name.size() + 1);
        return 1;
      }
      return 0;
    };
    std::string v;
    if (int t = value("--tcp", v); t != 0) {
      if (t < 0 || v.empty()) return usage_error("--tcp needs HOST:PORT");
      opt.tcp = v;
    } else if (int f = value("--token-file", v); f != 0) {
      if (f < 0 || v.empty()) return usage_error("--token-file needs a FILE");
      token_file = v;
    } else if (int m = value("--socket", v); m != 0) {
      if (m < 0) return usage_error("--socket needs a PATH");
      if (v.empty()) return usage_error("--socket: empty path");
      opt.socket = v;
    } else if (int m2 = value("--timeout", v); m2 != 0) {
      if (m2 < 0) return usage_error("--timeout needs SECONDS");
      if (!parse_seconds(v, 0.001, opt.timeout_s))
        return usage_error("--timeout: not a positive number of seconds: '" + v + "'");
    } else if (is_help(a)) {
      help = true;
    } else if (a == "--version" && words.empty()) {
      std::printf("sluicectl %s\n", SLUICE_VERSION);
      return kExitOk;
    } else if (a == "--") {
      literal_from = words.size();
      for (++i; i < argc; ++i) words.emplace_back(argv[i]);
    } else {
      words.push_back(std::move(a));
    }
  }

  if (!token_file.empty()) {
    std::string error;
    if (!read_token_file(token_file, opt.token, error)) {
      std::fprintf(stderr, "sluicectl: %s\n", error.c_str());
      return kExitUsage;
    }
  }

  if (words.empty()) {
    if (help) {
      std::printf("%s", kUsage);
      return kExitOk;
    }
    std::fprintf(stderr, "sluicectl: no command given\n\n%s", kUsage);
    return kExitUsage;
  }

  const std::string cmd = words[0];
  std::vector<std::string> args(words.begin() + 1, words.end());

  if (cmd == "help") {
    if (args.empty()) {
      std::printf("%s", kUsage);
      return kExitOk;
    }
    if (const char* h = command_help(args[0])) {
      std::printf("%s", h);
      return kExitOk;
    }
    return usage_error("unknown command '" + args[0] + "'");
  }
  const char* h = command_help(cmd);
  if (!h) return usage_error("unknown command '" + cmd + "'");
  if (help) {
    std::printf("%s", h);
    return kExitOk;
  }
  if (cmd == "jobs") return sluice::jobs_command(args);  // Redis, not the daemon's socket

  if (cmd == "status") {
    bool as_json = false;
    for (const auto& a : args) {
      if (a == "--json")
        as_json = true;
      else
        return usage_error("status: unexpected argument '" + a + "'");
    }
    return cmd_status(opt, as_json);
  }
  if (cmd == "watch") {
    double interval = 1.0;
    for (std::size_t i = 0; i < args.size(); ++i) {
      std::string v;
      if (args[i] == "--interval" || args[i] == "-n") {
        if (i + 1 >= args.size()) return usage_error("watch: --interval needs SECONDS");
        v = args[++i];
      } else if (args[i].rfind("--interval=", 0) == 0) {
        v = args[i].substr(11);
      } else {
        return usage_error("watch: unexpected argument '" + args[i] + "'");
      }
      if (!parse_seconds(v, 0.1, interval))
        return usage_error("watch: --interval: need at least 0.1 seconds, got '" + v + "'");
    }
    return cmd_watch(opt, interval);
  }
  if (cmd == "reload") {
    if (args.size() > 1) return usage_error("reload: at most one FILE");
    if (!args.empty() && literal_from > 1 && args[0].rfind("-", 0) == 0)
      return usage_error("reload: unknown option '" + args[0] + "' (use -- before a FILE starting with '-')");
    std::optional<std::string> file;
    if (!args.empty()) {
      if (args[0].empty()) return usage_error("reload: empty FILE");
      file = args[0];
    }
    return cmd_reload(opt, file);
  }
  if (cmd == "trace") {
    std::optional<std::string> seconds_arg, output;
    for (std::size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      const bool literal = i + 1 >= literal_from;  // args[i] is words[i + 1]
      std::optional<std::string> value;
      if (!literal && (a == "-o" || a == "--output")) {
        if (i + 1 >= args.size()) return usage_error("trace: " + a + " needs a FILE ('-' for stdout)");
        value = args[++i];
      } else if (!literal && a.rfind("--output=", 0) == 0) {
        value = a.substr(9);
      } else if (!literal && a.rfind("-o", 0) == 0 && a.size() > 2) {
        value = a.substr(2);
      } else if (!literal && a.size() > 1 && a[0] == '-' && !std::isdigit(static_cast<unsigned char>(a[1])) &&
                 a[1] != '.') {
        return usage_error("trace: unknown option '" + a + "'");
      } else if (seconds_arg) {
        return usage_error("trace: unexpected argument '" + a + "'");
      } else {
        seconds_arg = a;
      }
      if (value) {
        if (output) return usage_error("trace: -o given more than once");
        if (value->empty()) return usage_error("trace: empty FILE");
        output = std::move(value);
      }
    }
    if (!seconds_arg) return usage_error("trace: SECONDS missing (sluicectl trace SECONDS -o FILE)");
    double seconds = 0;
    if (!parse_seconds(*seconds_arg, 0.0, seconds) || seconds <= 0.0 || seconds > kMaxTraceSeconds)
      return usage_error("trace: SECONDS must be a number more than 0 and at most 60, got '" + *seconds_arg + "'");
    if (!output) return usage_error("trace: -o FILE is required ('-' for stdout)");
    return cmd_trace(opt, seconds, *output);
  }
  if (cmd == "sources") {
    bool as_json = false;
    for (const auto& a : args) {
      if (a == "--json")
        as_json = true;
      else
        return usage_error("sources: unexpected argument '" + a + "'");
    }
    return cmd_sources(opt, as_json);
  }
  if (cmd == "add-source") {
    SourceAddArgs a;
    bool have_uri = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
      const std::string& w = args[i];
      const bool literal = i + 1 >= literal_from;  // args[i] is words[i + 1]
      // --flag VALUE or --flag=VALUE: 1 with `v` filled, 0 when `w` is not `flag`, -1 when VALUE is missing
      auto value = [&](const std::string& flag, std::optional<std::string>& v) {
        if (w == flag) {
          if (i + 1 >= args.size()) return -1;
          v = args[++i];
          return 1;
        }
        if (w.rfind(flag + "=", 0) == 0) {
          v = w.substr(flag.size() + 1);
          return 1;
        }
        return 0;
      };
      std::optional<std::string> name_v, rate_v, budget_v;
      if (!literal) {
        if (value("--name", name_v) < 0) return usage_error("add-source: --name needs a NAME");
        if (!name_v && value("--rate-limit", rate_v) < 0) return usage_error("add-source: --rate-limit needs FPS");
        if (!name_v && !rate_v && value("--latency-budget-ms", budget_v) < 0)
          return usage_error("add-source: --latency-budget-ms needs MS");
      }
      if (name_v) {
        if (a.name) return usage_error("add-source: --name given more than once");
        if (name_v->empty()) return usage_error("add-source: empty --name");
        a.name = std::move(name_v);
      } else if (rate_v) {
        if (a.rate_limit) return usage_error("add-source: --rate-limit given more than once");
        double fps = 0;
        if (!parse_seconds(*rate_v, 0.0, fps))
          return usage_error("add-source: --rate-limit: need frames per second, a number >= 0 (0: unlimited), got '" +
                             *rate_v + "'");
        a.rate_limit = fps;
      } else if (budget_v) {
        if (a.latency_budget_ms) return usage_error("add-source: --latency-budget-ms given more than once");
        double ms = 0;
        if (!parse_seconds(*budget_v, 0.0, ms) || ms > sluice::kMaxLatencyBudgetMs)
          return usage_error("add-source: --latency-budget-ms: need milliseconds, a number in 0..3600000 (0: none), "
                             "got '" + *budget_v + "'");
        a.latency_budget_ms = ms;
      } else if (!literal && (w == "--leaky" || w == "--no-leaky")) {
        const bool leaky = w == "--leaky";
        if (a.leaky && *a.leaky != leaky) return usage_error("add-source: --leaky and --no-leaky together");
        a.leaky = leaky;
      } else if (!literal && w == "--loop") {
        a.loop = true;
      } else if (!literal && w.size() > 1 && w[0] == '-') {
        return usage_error("add-source: unknown option '" + w + "' (use -- before a URI starting with '-')");
      } else if (have_uri) {
        return usage_error("add-source: unexpected argument '" + w + "' (one URI per source)");
      } else {
        if (w.empty()) return usage_error("add-source: empty URI");
        a.uri = w;
        have_uri = true;
      }
    }
    if (!have_uri) return usage_error("add-source: URI missing (sluicectl add-source URI [--name NAME] ...)");
    return cmd_add_source(opt, a);
  }
  if (cmd == "remove-source") {
    if (args.empty()) return usage_error("remove-source: ID or NAME missing (sluicectl sources lists them)");
    if (args.size() > 1) return usage_error("remove-source: unexpected argument '" + args[1] + "' (one source at a time)");
    if (args[0].empty()) return usage_error("remove-source: empty ID or NAME");
    if (literal_from > 1 && args[0].size() > 1 && args[0][0] == '-')
      return usage_error("remove-source: unknown option '" + args[0] + "' (use -- before a NAME starting with '-')");
    return cmd_remove_source(opt, args[0]);
  }
  if (!args.empty()) return usage_error(cmd + ": unexpected argument '" + args[0] + "'");
  if (cmd == "version") return cmd_version(opt);
  return cmd_simple(opt, cmd);  // pause, resume, stop
}
