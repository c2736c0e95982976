#pragma once
// Typed spec -> runnable plan: picks the device, builds each stage (which checks that it can take what its
// upstream emits) and sizes queues and pools. Stage errors gain the stage's file:line:col here.
#include <string>

#include "config/pipeline_spec.hpp"
#include "runtime/pipeline.hpp"

namespace sluice {

PipelinePlan plan_pipeline(const PipelineSpec& spec);
// What `sluiced check` prints: stages, their streams, queues, pools and the memory the pools take.
std::string describe_plan(const PipelinePlan& plan);
// Its line on batching: batch size, timeout and the latency budget.
std::string describe_batching(const PipelinePlan& plan);

}  // namespace sluice
