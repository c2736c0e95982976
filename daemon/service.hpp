#pragma once
// Service mode (`sluiced --config FILE`): the pipeline under systemd, with the control socket, signals,
// reload, sd_notify readiness/status/watchdog and optional Prometheus metrics.
#include <chrono>
#include <string>
#include <vector>

namespace sluice {

struct ServiceOptions {
  // Empty strings and lists: take the pipeline file's control_socket/control_tcp/metrics/control_allow_*.
  std::string config;
  std::string socket;               // default /run/sluice/control.sock
  std::string control_tcp;          // ADDR:PORT, empty = off
  std::string metrics;              // ADDR:PORT for Prometheus, empty = off
  std::string console;              // ADDR:PORT for the browser console (docs/console.md), empty = off
  double drain_timeout_s = 30;      // SIGTERM/stop: frames in flight get this long to reach the sink
  double watchdog_stall_s = 0;      // frames in flight without progress this long = wedged (0: WatchdogSec/2)
  double client_timeout_s = 30;     // a control connection's life, from its connect (ControlLimits)
  std::vector<std::string> allow_users, allow_groups;  // may send mutating requests (empty: anyone who can connect)
  // Access control (daemon/access_policy.hpp, docs/THREAT_MODEL.md); empty: the pipeline file's keys.
  std::string control_token;        // file holding the TCP shared secret (without it TCP is read-only)
  std::vector<std::string> config_roots;        // reload may load files under these (besides `config`)
  std::vector<std::string> input_roots;         // source-add may read local paths under these
  std::vector<std::string> output_roots;        // a reloaded pipeline's sinks must write under these
  std::vector<std::string> allow_source_hosts;  // source-add may connect to these (HOST or HOST:PORT)
  std::string state_dir;            // resumable jobs' ledgers (empty: $STATE_DIRECTORY)
};

// Runs until stopped; returns the process exit status.
int run_service(const ServiceOptions& options);

}  // namespace sluice
