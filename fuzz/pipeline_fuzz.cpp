// libFuzzer harness: what `sluiced check` does with a pipeline file — the YAML pipeline loader on arbitrary
// bytes, then the plan (each stage built and checked against its upstream, pools sized against this machine).
// The only outcome allowed besides a plan is ConfigError; anything else escaping (or a crash, hang, or huge
// allocation) is a finding. Relative paths resolve under a directory that does not exist; planning opens no
// output (sinks open their files in open(), which is not called here).
#include <cstddef>
#include <cstdint>
#include <string>

#include "config/pipeline_spec.hpp"
#include "config/plan.hpp"
#include "runtime/errors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const sluice::PipelineSpec spec =
        sluice::parse_pipeline(std::string(reinterpret_cast<const char*>(data), size), "/nonexistent-fuzz/p.yaml");
    const sluice::PipelinePlan plan = sluice::plan_pipeline(spec);
    (void)sluice::describe_plan(plan);
  } catch (const sluice::ConfigError&) {
  }
  return 0;
}
