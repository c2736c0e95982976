#include "daemon/sluicectl/commands.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "daemon/jobs_command.hpp"
#include "daemon/protocol.hpp"
#include "daemon/sluicectl/cli.hpp"
#include "daemon/sluicectl/help_text.hpp"
#include "daemon/sluicectl/interrupt.hpp"
#include "daemon/sluicectl/output.hpp"
#include "daemon/sluicectl/render.hpp"

namespace sluice::ctl {
namespace {

void print(const std::string& text) { std::fputs(text.c_str(), stdout); }

// Sends `request`; on success prints `render(reply)`, else the failure. Returns the exit code.
template <typename Render>
int ask(const Connection& c, const RequestBuilder& request, Render render) {
  const Outcome r = exchange(c, request.body(), c.timeout_s);
  if (r.code != kExitOk) return report_failure(r);
  print(render(r.reply));
  return kExitOk;
}

// `--flag VALUE` or `--flag=VALUE` at words[i]: 1 with `value` filled (i moved past VALUE), 0 when words[i]
// is not `flag`, -1 when VALUE is missing.
int option_value(const CommandArgs& a, std::size_t& i, const std::string& flag, std::optional<std::string>& value) {
  const std::string& w = a.words[i];
  if (w == flag) {
    if (i + 1 >= a.words.size()) return -1;
    value = a.words[++i];
    return 1;
  }
  if (w.rfind(flag + "=", 0) == 0) {
    value = w.substr(flag.size() + 1);
    return 1;
  }
  return 0;
}

// No words at all: pause, resume, stop, version.
int refuse_words(std::string_view command, const CommandArgs& a) {
  return usage_error(std::string(command) + ": unexpected argument '" + a.words[0] + "'");
}

// [--json] and nothing else: status, sources.
bool json_flag(std::string_view command, const CommandArgs& a, int& error) {
  bool as_json = false;
  for (const auto& w : a.words) {
    if (w != "--json") {
      error = usage_error(std::string(command) + ": unexpected argument '" + w + "'");
      return false;
    }
    as_json = true;
  }
  return as_json;
}

// A path the daemon is to read, made absolute against this shell's working directory.
std::optional<std::string> absolute_path(const std::string& path, std::string& error) {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::absolute(path, ec);
  if (ec) {
    error = "cannot make '" + path + "' absolute: " + ec.message();
    return std::nullopt;
  }
  return p.lexically_normal().string();
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

// --- the commands ------------------------------------------------------------------------------------------

int run_status(const Connection& c, const CommandArgs& a) {
  int error = kExitOk;
  const bool as_json = json_flag("status", a, error);
  if (error != kExitOk) return error;
  return ask(c, RequestBuilder(RequestKind::status),
             [&](const json& reply) { return as_json ? format_json(reply) + "\n" : format_status(reply); });
}

int run_sources(const Connection& c, const CommandArgs& a) {
  int error = kExitOk;
  const bool as_json = json_flag("sources", a, error);
  if (error != kExitOk) return error;
  return ask(c, RequestBuilder(RequestKind::sources),
             [&](const json& reply) { return as_json ? format_json(reply) + "\n" : format_sources(reply); });
}

constexpr double kMinWatchInterval = 0.1;

int run_watch(const Connection& c, const CommandArgs& a) {
  double interval_s = 1.0;
  for (std::size_t i = 0; i < a.words.size(); ++i) {
    std::optional<std::string> v;
    if (a.words[i] == "-n") {
      if (i + 1 >= a.words.size()) return usage_error("watch: --interval needs SECONDS");
      v = a.words[++i];
    } else if (const int found = option_value(a, i, "--interval", v); found < 0) {
      return usage_error("watch: --interval needs SECONDS");
    } else if (found == 0) {
      return usage_error("watch: unexpected argument '" + a.words[i] + "'");
    }
    const auto seconds = parse_number(*v);
    if (!seconds || *seconds < kMinWatchInterval)
      return usage_error("watch: --interval: need at least 0.1 seconds, got '" + *v + "'");
    interval_s = *seconds;
  }

  install_interrupt_handlers();
  const bool tty = ::isatty(STDOUT_FILENO) != 0;
  const RequestBuilder status(RequestKind::status);
  for (bool first = true; !g_interrupted; first = false) {
    const auto next =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval_s));
    const Outcome r = exchange(c, status.body(), c.timeout_s);
    if (r.interrupted || g_interrupted) break;
    write_fully(STDOUT_FILENO, watch_screen(c.address(), interval_s, r, tty, first));
    // Sleep until the next refresh; poll() with no descriptors returns early (EINTR) on Ctrl-C.
    while (!g_interrupted) {
      const int left = ms_left(next);
      if (left == 0) break;
      ::poll(nullptr, 0, left);
    }
  }
  if (tty) write_fully(STDOUT_FILENO, "\n");
  return kExitOk;
}

int run_add_source(const Connection& c, const CommandArgs& a) {
  RequestBuilder request(RequestKind::source_add);
  std::optional<std::string> uri, name;
  std::optional<bool> leaky;
  std::optional<double> rate_limit, latency_budget_ms;
  bool loop = false;
  for (std::size_t i = 0; i < a.words.size(); ++i) {
    const std::string& w = a.words[i];
    std::optional<std::string> name_v, rate_v, budget_v;
    if (!a.literal(i)) {
      if (option_value(a, i, "--name", name_v) < 0) return usage_error("add-source: --name needs a NAME");
      if (!name_v && option_value(a, i, "--rate-limit", rate_v) < 0)
        return usage_error("add-source: --rate-limit needs FPS");
      if (!name_v && !rate_v && option_value(a, i, "--latency-budget-ms", budget_v) < 0)
        return usage_error("add-source: --latency-budget-ms needs MS");
    }
    if (name_v) {
      if (name) return usage_error("add-source: --name given more than once");
      if (name_v->empty()) return usage_error("add-source: empty --name");
      name = std::move(name_v);
    } else if (rate_v) {
      if (rate_limit) return usage_error("add-source: --rate-limit given more than once");
      rate_limit = parse_number(*rate_v);
      if (!rate_limit || !within_bounds(arg::rate_limit, *rate_limit))
        return usage_error("add-source: --rate-limit: need " + describe(arg::rate_limit) + ", got '" + *rate_v + "'");
    } else if (budget_v) {
      if (latency_budget_ms) return usage_error("add-source: --latency-budget-ms given more than once");
      latency_budget_ms = parse_number(*budget_v);
      if (!latency_budget_ms || !within_bounds(arg::latency_budget_ms, *latency_budget_ms))
        return usage_error("add-source: --latency-budget-ms: need " + describe(arg::latency_budget_ms) + ", got '" +
                           *budget_v + "'");
    } else if (!a.literal(i) && (w == "--leaky" || w == "--no-leaky")) {
      const bool want = w == "--leaky";
      if (leaky && *leaky != want) return usage_error("add-source: --leaky and --no-leaky together");
      leaky = want;
    } else if (!a.literal(i) && w == "--loop") {
      loop = true;
    } else if (!a.literal(i) && w.size() > 1 && w[0] == '-') {
      return usage_error("add-source: unknown option '" + w + "' (use -- before a URI starting with '-')");
    } else if (uri) {
      return usage_error("add-source: unexpected argument '" + w + "' (one URI per source)");
    } else {
      if (w.empty()) return usage_error("add-source: empty URI");
      uri = w;
    }
  }
  if (!uri) return usage_error("add-source: URI missing (sluicectl add-source URI [--name NAME] ...)");
  if (is_local_path(*uri)) {  // the daemon resolves nothing against its own working directory
    std::string error;
    uri = absolute_path(*uri, error);
    if (!uri) return usage_error("add-source: " + error);
  }
  request.set(arg::uri, *uri);
  if (name) request.set(arg::name, *name);
  if (leaky) request.set(arg::leaky, *leaky);
  if (rate_limit) request.set(arg::rate_limit, *rate_limit);
  if (loop) request.set(arg::loop, true);
  if (latency_budget_ms) request.set(arg::latency_budget_ms, *latency_budget_ms);
  return ask(c, request, format_source_added);
}

int run_remove_source(const Connection& c, const CommandArgs& a) {
  if (a.words.empty()) return usage_error("remove-source: ID or NAME missing (sluicectl sources lists them)");
  if (a.words.size() > 1)
    return usage_error("remove-source: unexpected argument '" + a.words[1] + "' (one source at a time)");
  const std::string& which = a.words[0];
  if (which.empty()) return usage_error("remove-source: empty ID or NAME");
  if (!a.literal(0) && which.size() > 1 && which[0] == '-')
    return usage_error("remove-source: unknown option '" + which + "' (use -- before a NAME starting with '-')");
  return ask(c, RequestBuilder(RequestKind::source_remove).set(arg::source, which),
             [&](const json&) { return format_source_removed(which); });
}

// pause, resume, stop: no arguments; the reply's state.
template <RequestKind kKind>
int run_state_change(const Connection& c, const CommandArgs& a) {
  constexpr std::string_view name = request_name(kKind);
  if (!a.words.empty()) return refuse_words(name, a);
  return ask(c, RequestBuilder(kKind), [&](const json& reply) { return format_state(name, reply); });
}

int run_reload(const Connection& c, const CommandArgs& a) {
  if (a.words.size() > 1) return usage_error("reload: at most one FILE");
  RequestBuilder request(RequestKind::reload);
  if (!a.words.empty()) {
    const std::string& file = a.words[0];
    if (!a.literal(0) && file.rfind("-", 0) == 0)
      return usage_error("reload: unknown option '" + file + "' (use -- before a FILE starting with '-')");
    if (file.empty()) return usage_error("reload: empty FILE");
    std::string error;
    const auto path = absolute_path(file, error);
    if (!path) return usage_error(error);
    request.set(arg::path, *path);
  }
  return ask(c, request, format_reload);
}

int run_version(const Connection& c, const CommandArgs& a) {
  if (!a.words.empty()) return refuse_words("version", a);
  std::printf("sluicectl %s\n", version());
  std::fflush(stdout);
  return ask(c, RequestBuilder(RequestKind::version), format_version);
}

// Ctrl-C while recording: the temporary file goes, then sluicectl dies of the signal.
int die_of_signal(TraceOutput& out) {
  out.discard();
  const int sig = g_signal ? static_cast<int>(g_signal) : SIGINT;
  std::signal(sig, SIG_DFL);
  std::raise(sig);
  return 128 + sig;
}

int run_trace(const Connection& c, const CommandArgs& a) {
  std::optional<std::string> seconds_word, file;
  for (std::size_t i = 0; i < a.words.size(); ++i) {
    const std::string& w = a.words[i];
    const bool literal = a.literal(i);
    std::optional<std::string> value;
    if (!literal && (w == "-o" || w == "--output")) {
      if (i + 1 >= a.words.size()) return usage_error("trace: " + w + " needs a FILE ('-' for stdout)");
      value = a.words[++i];
    } else if (!literal && w.rfind("--output=", 0) == 0) {
      value = w.substr(9);
    } else if (!literal && w.rfind("-o", 0) == 0 && w.size() > 2) {
      value = w.substr(2);
    } else if (!literal && w.size() > 1 && w[0] == '-' && !std::isdigit(static_cast<unsigned char>(w[1])) &&
               w[1] != '.') {
      return usage_error("trace: unknown option '" + w + "'");
    } else if (seconds_word) {
      return usage_error("trace: unexpected argument '" + w + "'");
    } else {
      seconds_word = w;
    }
    if (value) {
      if (file) return usage_error("trace: -o given more than once");
      if (value->empty()) return usage_error("trace: empty FILE");
      file = std::move(value);
    }
  }
  if (!seconds_word) return usage_error("trace: SECONDS missing (sluicectl trace SECONDS -o FILE)");
  const auto seconds_read = parse_number(*seconds_word);
  if (!seconds_read || !within_bounds(arg::seconds, *seconds_read))
    return usage_error("trace: SECONDS must be " + describe(arg::seconds) + ", got '" + *seconds_word + "'");
  const double seconds = *seconds_read;
  if (!file) return usage_error("trace: -o FILE is required ('-' for stdout)");

  install_interrupt_handlers();
  TraceOutput out;  // opened first: an unwritable FILE fails now, not after SECONDS
  if (std::string err = out.open(*file); !err.empty()) {
    std::fprintf(stderr, "sluicectl: trace: %s\n", err.c_str());
    return kExitOutput;
  }
  // The daemon answers only after recording: the deadline is SECONDS on top of --timeout.
  const Outcome r = exchange(c, RequestBuilder(RequestKind::trace).set(arg::seconds, seconds).body(),
                             seconds + c.timeout_s, kMaxTraceReply);
  if (r.interrupted || g_interrupted) return die_of_signal(out);
  if (r.code != kExitOk) {
    out.discard();
    return report_failure(r);
  }
  const TraceText trace = trace_text(r.reply);
  if (!trace.problem.empty()) {
    out.discard();
    std::fprintf(stderr, "sluicectl: broken reply from %s: %s\n", c.address().c_str(), trace.problem.c_str());
    return kExitTimeout;
  }
  if (std::string err = out.commit(trace.content); !err.empty()) {
    out.discard();
    std::fprintf(stderr, "sluicectl: trace: %s\n", err.c_str());
    return kExitOutput;
  }
  std::fputs(format_trace_summary(trace.events, seconds, *file).c_str(), stderr);
  return kExitOk;
}

int run_jobs(const Connection&, const CommandArgs& a) { return jobs_command(a.words); }  // Redis, not the daemon

int run_help(const Connection&, const CommandArgs& a);

const Command kCommands[] = {
    {"status", "status [--json]",
     "state, uptime, config, per-stage frames/fps/GPU time/queues, the frame\n"
     "ledger and latency percentiles; --json: the daemon's raw reply, indented",
     kStatusHelp, run_status},
    {"watch", "watch [--interval S]", "status, refreshed every S seconds (default 1) until Ctrl-C", kWatchHelp,
     run_watch},
    {"sources", "sources [--json]",
     "the run-time sources (state, frames, fps, drops, errors, reconnects, why one\n"
     "is stalled or failed, a job's inputs) and the inputs being decoded (progress,\n"
     "ETA); --json: the daemon's raw reply, indented",
     kSourcesHelp, run_sources},
    {"add-source",
     "add-source URI [--name NAME] [--leaky|--no-leaky] [--rate-limit FPS] [--loop] [--latency-budget-ms MS]",
     "start a source in the running pipeline: a file, directory or glob (a job),\n"
     "image, image sequence, camera, stream URL or testsrc:PATTERN",
     kAddSourceHelp, run_add_source},
    {"remove-source", "remove-source ID|NAME", request_spec(RequestKind::source_remove).help, kRemoveSourceHelp,
     run_remove_source},
    {"pause", "pause", request_spec(RequestKind::pause).help, kPauseHelp, run_state_change<RequestKind::pause>},
    {"resume", "resume", request_spec(RequestKind::resume).help, kResumeHelp, run_state_change<RequestKind::resume>},
    {"reload", "reload [FILE]",
     "validate and switch to FILE (default: the daemon's current config file);\n"
     "on error the running pipeline stays and the error is printed",
     kReloadHelp, run_reload},
    {"stop", "stop", request_spec(RequestKind::stop).help, kStopHelp, run_state_change<RequestKind::stop>},
    {"trace", "trace SECONDS -o FILE",
     "record a Chrome/Perfetto trace for SECONDS (at most 60) and write it to FILE\n"
     "('-': stdout); open it in ui.perfetto.dev",
     kTraceHelp, run_trace},
    {"version", "version", "this client's and the daemon's version", kVersionHelp, run_version},
    {"jobs", "jobs submit|status|requeue-dead redis://HOST:PORT/STREAM ...",
     "a job shared by many sluiced through a Redis stream: add inputs, see the\n"
     "consumer group's progress (pending, done, dead-lettered, per consumer), put dead\n"
     "letters back; talks to Redis directly, not to a daemon (sluicectl jobs --help)",
     kJobsHelp, run_jobs},
    {"help", "help [COMMAND]", "this help, or one command's (also: sluicectl COMMAND --help)", kHelpHelp, run_help},
};

int run_help(const Connection&, const CommandArgs& a) {
  if (a.words.empty()) {
    print(usage());
    return kExitOk;
  }
  const Command* command = find_command(a.words[0]);
  if (!command) return usage_error("unknown command '" + a.words[0] + "'");
  print(command->help);
  return kExitOk;
}

}  // namespace

const Command* find_command(std::string_view name) {
  for (const auto& command : kCommands)
    if (command.name == name) return &command;
  return nullptr;
}

std::string command_names() {
  std::string out;
  for (const auto& command : kCommands) out += (out.empty() ? "" : ", ") + std::string(command.name);
  return out;
}

std::string usage() {
  constexpr std::size_t kSynopsisWidth = 22;  // the summaries' column, after two spaces
  const std::string indent(2 + kSynopsisWidth, ' ');
  std::string out = kUsageHead;
  for (const auto& command : kCommands) {
    std::string line = "  " + std::string(command.synopsis);
    if (command.synopsis.size() < kSynopsisWidth)
      line.resize(2 + kSynopsisWidth, ' ');
    else
      line += "\n" + indent;
    std::string_view summary = command.summary;
    for (std::size_t nl; (nl = summary.find('\n')) != std::string_view::npos; summary.remove_prefix(nl + 1))
      line += std::string(summary.substr(0, nl)) + "\n" + indent;
    out += line + std::string(summary) + "\n";
  }
  return out + "\n" + usage_tail();
}

}  // namespace sluice::ctl
