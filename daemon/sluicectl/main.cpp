// sluicectl: the operator's client for sluiced's control socket (docs/protocol.md).
//
// One request per invocation (watch: one per refresh). The parts: cli (exit codes, usage errors), transport
// (the socket exchange), render (replies for people), commands (words -> requests, one table), help_text,
// output (trace's file). Here: the global options, then the command.
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "daemon/sluicectl/cli.hpp"
#include "daemon/sluicectl/commands.hpp"
#include "daemon/sluicectl/transport.hpp"

namespace sluice::ctl {
namespace {

constexpr double kMinTimeout = 0.001;

bool is_help(const std::string& a) { return a == "-h" || a == "--help"; }

int run(int argc, char** argv) {
  Connection connection;
  const char* socket_env = std::getenv("SLUICE_SOCKET");
  connection.socket = socket_env && *socket_env ? socket_env : kDefaultSocket;
  std::string token_file;
  if (const char* env = std::getenv("SLUICE_CONTROL_TCP"); env && *env) connection.tcp = env;
  if (const char* env = std::getenv("SLUICE_TOKEN_FILE"); env && *env) token_file = env;

  // Global options may come before or after the command; the rest are the command's words.
  std::vector<std::string> words;
  std::size_t literal_from = SIZE_MAX;  // words from this index came after "--": never options
  bool help = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    // 1 if `a` is option `name` (`v` filled), 0 if not, -1 when its value is missing
    auto value = [&](const std::string& name, std::string& v) -> int {
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
    if (const int t = value("--tcp", v); t != 0) {
      if (t < 0 || v.empty()) return usage_error("--tcp needs HOST:PORT");
      connection.tcp = v;
    } else if (const int f = value("--token-file", v); f != 0) {
      if (f < 0 || v.empty()) return usage_error("--token-file needs a FILE");
      token_file = v;
    } else if (const int s = value("--socket", v); s != 0) {
      if (s < 0) return usage_error("--socket needs a PATH");
      if (v.empty()) return usage_error("--socket: empty path");
      connection.socket = v;
    } else if (const int d = value("--timeout", v); d != 0) {
      if (d < 0) return usage_error("--timeout needs SECONDS");
      const auto seconds = parse_number(v);
      if (!seconds || *seconds < kMinTimeout)
        return usage_error("--timeout: not a positive number of seconds: '" + v + "'");
      connection.timeout_s = *seconds;
    } else if (is_help(a)) {
      help = true;
    } else if (a == "--version" && words.empty()) {
      std::printf("sluicectl %s\n", version());
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
    if (!read_token_file(token_file, connection.token, error)) {
      std::fprintf(stderr, "sluicectl: %s\n", error.c_str());
      return kExitUsage;
    }
  }

  if (words.empty()) {
    if (help) {
      std::fputs(usage().c_str(), stdout);
      return kExitOk;
    }
    return usage_error("no command given (one of " + command_names() + ")");  // a hint, not all of --help
  }
  const Command* command = find_command(words[0]);
  if (!command) return usage_error("unknown command '" + words[0] + "'");
  if (help) {
    std::fputs(command->help, stdout);
    return kExitOk;
  }
  CommandArgs args;
  args.words.assign(words.begin() + 1, words.end());
  if (literal_from != SIZE_MAX) args.literal_from = literal_from == 0 ? 0 : literal_from - 1;
  return command->run(connection, args);
}

}  // namespace
}  // namespace sluice::ctl

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  try {
    return sluice::ctl::run(argc, argv);
  } catch (const std::exception& e) {  // a reply shape the formatting did not expect, out of memory, ...
    std::fprintf(stderr, "sluicectl: %s\n", e.what());
    return sluice::ctl::kExitTimeout;
  }
}
