#pragma once
// A stage made slow on purpose, for the tests of budgets and CPU accounting: forwards its input after sleeping
// `ms` per batch.
#include <chrono>
#include <thread>

#include "runtime/stage.hpp"

namespace sluice::test {

class Sleeper final : public Stage {
 public:
  Sleeper(PayloadDesc d, int ms) : desc_(d), ms_(ms) {}
  PayloadDesc output() const override { return desc_; }
  bool forwards_input() const override { return true; }
  BatchLease process(Batch*, StageContext&) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
    return {};
  }

 private:
  PayloadDesc desc_;
  int ms_;
};

}  // namespace sluice::test
