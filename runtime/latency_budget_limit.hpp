#pragma once
// The largest latency budget a pipeline or a source may ask for, in milliseconds (an hour): checked by the
// pipeline file's key, the control protocol, the source set and sluicectl alike. Header-only: sluicectl links
// none of the runtime.
namespace sluice {
inline constexpr double kMaxLatencyBudgetMs = 3'600'000;
}  // namespace sluice
