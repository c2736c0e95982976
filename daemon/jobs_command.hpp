#pragma once
// `sluicectl jobs`: a Redis-stream job (docs/scale-out.md) seen and fed from outside, talking to Redis directly
// (runtime/redis_client), not to a daemon:
//   jobs submit redis://HOST:PORT/STREAM INPUT...          one entry per input (directories and globs expanded)
//   jobs status redis://HOST:PORT/STREAM[?group=G] [--json] the groups' progress, per consumer
//   jobs requeue-dead redis://HOST:PORT/STREAM[?dead=D]     dead letters back into the stream
#include <string>
#include <vector>

namespace sluice {

extern const char* const kJobsHelp;

// `args`: the words after `jobs`. Returns the exit status (0 ok, 1 Redis refused or failed, 2 usage,
// 3 cannot connect); messages go to stdout and stderr.
int jobs_command(const std::vector<std::string>& args);

}  // namespace sluice
