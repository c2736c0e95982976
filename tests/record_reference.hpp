#pragma once
// The sink's JSON record made the plain way, as RecordFormatter::json made it up to issue 29: a nlohmann::json
// tree, dumped compact. The bytes the sink's records are held to (tests/test_sink_records.cpp), and what
// bench/detect_records_bench.cpp times the sink's formatter against.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/batch.hpp"
#include "runtime/sink_records.hpp"

namespace sluice::test {

std::string reference_record(const std::vector<std::string>& stage_names, int index, const Batch& b, int i,
                             const sinks::Origin& origin, std::int64_t now);

}  // namespace sluice::test
