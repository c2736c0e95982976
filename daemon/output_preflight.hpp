#pragma once
// Before a pipeline replaces one that works (reload) or starts as the service: its outputs are checked as
// `sluiced check` checks them (daemon/output_check.hpp), then made ready and locked for it: a directory output
// is created, a file output opened to append, and each output's lock taken (runtime/output_lock.hpp) and held
// until the new pipeline's sink takes it over. An output that cannot be written, or that another sluiced holds,
// refuses the change at once with the reason, instead of the new pipeline failing every frame at its sink.
#include <string>
#include <vector>

#include "config/pipeline_spec.hpp"
#include "runtime/output_lock.hpp"

namespace sluice {

// The locks of a pipeline's outputs, held for it until its sinks open (or until this is destroyed).
struct ReadyOutputs {
  std::vector<OutputLockReservation> locks;
};

// Throws ConfigError with one line per output that cannot be written (what `check` says, or an open that
// fails), or OutputInUse naming the output and the pid that holds it. Outputs the running generation of this
// process holds are only checked: the new generation's sink waits for the old one to let go of them.
ReadyOutputs prepare_outputs(const PipelineSpec& spec);

// The locks alone (`sluiced run`): an output another sluiced holds throws OutputInUse naming its pid, so the run
// stops before anything is built. An output whose lock cannot be taken yet (its directory missing) is left to its
// sink, which reports it as the run goes, as it always did; nothing but lock files is created here.
ReadyOutputs lock_outputs(const PipelineSpec& spec);

}  // namespace sluice
