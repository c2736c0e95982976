// The shipped model in the shipped default pipeline, on the CPU: it must recognise fresh testsrc frames.
#include <catch2/catch.hpp>

#include <cstdio>

#include "pipeline_helpers.hpp"

using namespace sluice;
using namespace sluice::test;

TEST_CASE("default pipeline classifies fresh testsrc frames on the CPU", "[infer][default]") {
  const std::string path = "default_model_cpu.jsonl";
  const Accuracy acc = default_model_accuracy(DeviceChoice::cpu, path);
  std::remove(path.c_str());
  INFO(acc.misses);
  REQUIRE(acc.total == 5 * 4 * 12);
  REQUIRE(acc.correct >= 0.95 * acc.total);
}
