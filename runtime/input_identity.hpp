#pragma once
// One name for "this input, asked this way" that fits in a Redis key: the hex SHA-256 of the input's path or URL
// and its options' text (InputOptions::text()). The redis sink marks an input's records under it, the Redis source
// records under it which inputs its group has done.
#include <string>

namespace sluice {

std::string input_identity(const std::string& input, const std::string& options);

}  // namespace sluice
