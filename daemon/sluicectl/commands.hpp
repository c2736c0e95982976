#pragma once
// sluicectl's commands: each one reads its words, builds its request from the protocol's table
// (daemon/protocol.hpp), sends it through the transport and prints the reply's rendering. Usage errors are
// found before anything is sent.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/sluicectl/transport.hpp"

namespace sluice::ctl {

// The words after a command's name.
struct CommandArgs {
  std::vector<std::string> words;
  std::size_t literal_from = SIZE_MAX;  // words from this index came after "--": never options
  bool literal(std::size_t i) const { return i >= literal_from; }
};

struct Command {
  std::string_view name;
  std::string_view synopsis;  // in --help's command list, e.g. "reload [FILE]"
  std::string_view summary;   // beside it; each '\n' continues on the next line
  const char* help;           // sluicectl help NAME, sluicectl NAME --help
  int (*run)(const Connection& connection, const CommandArgs& args);
};

// The command called `name`, or nullptr.
const Command* find_command(std::string_view name);

// sluicectl --help: the usage, every command with its summary, the options and the exit codes.
std::string usage();
// "status, watch, ...": the commands' names, for a short hint.
std::string command_names();

}  // namespace sluice::ctl
