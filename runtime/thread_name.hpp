#pragma once
// Names of sluice's own threads (the kernel's `comm`, at most 15 bytes), so that per-thread CPU time read
// from /proc/self/task can be grouped by role. A thread a library starts (libavcodec's decoder threads,
// OpenBLAS) inherits the name of the thread that started it, so a source's decoder threads count as
// the source's.
#include <string_view>

namespace sluice {

inline constexpr std::string_view kStageThreadName = "sluice-stage";    // pipeline stage threads
inline constexpr std::string_view kSourceThreadName = "sluice-source";  // source decode, copy and monitor threads

// Names the calling thread (best effort: a failure leaves the inherited name).
void name_this_thread(std::string_view name) noexcept;

}  // namespace sluice
