// libFuzzer harness for the listen-address parser (--metrics / --control-tcp values, from the command line and
// from unit files): any bytes either parse into a host and port or throw std::runtime_error naming the address;
// nothing else may escape, and a parsed port is one the text spelled.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "daemon/listen_address.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const sluice::ListenSpec spec = sluice::parse_listen(text, "--control-tcp");
    // The port is the text after the last ':' (a bracketed host has no ':' after its ']' but that one).
    const std::string port = text.substr(text.rfind(':') + 1);
    if (std::to_string(spec.port) != std::to_string(std::stoul(port))) std::abort();
    if (spec.host.size() >= text.size()) std::abort();
  } catch (const std::runtime_error&) {
    // Refused with a message: the expected outcome for malformed text.
  }
  return 0;
}
