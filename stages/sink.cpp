// sink: the pipeline's end. Splits batches into frames again and writes one record per frame.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>

#include "kernels/half.hpp"
#include "runtime/errors.hpp"
#include "runtime/stats.hpp"
#include "stages/builtin.hpp"

namespace sluice {
namespace {

struct PayloadSummary {
  double mean = 0, min = 0, max = 0;
};

// Mean/min/max of one item: a cheap fingerprint of what the chain produced, for people and tests.
PayloadSummary summarise(const PayloadDesc& d, const std::byte* item) {
  const std::size_t n = d.kind == PayloadKind::frames ? d.item_bytes()
                                                      : d.item_bytes() / dtype_bytes(d.dtype);
  PayloadSummary s{0, std::numeric_limits<double>::max(), std::numeric_limits<double>::lowest()};
  auto add = [&](double v) {
    s.mean += v;
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
  };
  if (d.kind == PayloadKind::frames || d.dtype == DType::u8) {
    for (std::size_t i = 0; i < n; ++i) add(static_cast<double>(reinterpret_cast<const std::uint8_t*>(item)[i]));
  } else if (d.dtype == DType::f32) {
    for (std::size_t i = 0; i < n; ++i) add(reinterpret_cast<const float*>(item)[i]);
  } else {
    const auto* bits = reinterpret_cast<const std::uint16_t*>(item);
    const bool bf16 = d.dtype == DType::bf16;
    for (std::size_t i = 0; i < n; ++i) add(bf16 ? kernels::bf16_bits_to_float(bits[i]) : kernels::half_bits_to_float(bits[i]));
  }
  if (n) s.mean /= static_cast<double>(n);
  return s;
}

class SinkStage final : public Stage {
 public:
  explicit SinkStage(const StageInit& init)
      : type_(init.params.string("type")), path_(init.params.string("path")), names_(init.stage_names),
        index_(init.index) {
    if (init.input->memory == MemoryKind::device)
      throw ConfigError("reads host memory; put a download stage before it (input is " + init.input->describe() + ")");
    if (type_ == "jsonl" && path_.empty()) throw ConfigError("type jsonl needs a 'path' (use - for stdout)");
  }

  void open(StageContext&) override {
    if ((type_ == "jsonl" && path_ != "-")) {
      file_.open(path_, std::ios::out | std::ios::trunc);
      if (!file_) throw StageError("cannot open '" + path_ + "' for writing: " + std::strerror(errno));
    }
  }

  BatchLease process(Batch* in, StageContext&) override {
    if (type_ == "null") return {};
    std::ostream& out = file_.is_open() ? static_cast<std::ostream&>(file_) : std::cout;
    const std::int64_t now = now_ns();
    for (int i = 0; i < in->count; ++i) {
      const FrameMeta& f = in->frames[static_cast<std::size_t>(i)];
      const PayloadSummary s = summarise(in->desc, in->item(i));
      if (type_ == "stdout") {
        char line[256];
        std::snprintf(line, sizeof line, "source %u seq %llu pts %.3fs latency %.2fms %s mean %.4f min %.4f max %.4f\n",
                      f.source_id, static_cast<unsigned long long>(f.sequence), static_cast<double>(f.pts_ns) / 1e9,
                      static_cast<double>(now - f.capture_ns) / 1e6, item_shape(in->desc).c_str(), s.mean, s.min, s.max);
        out << line;
        continue;
      }
      nlohmann::json j;
      j["source"] = f.source_id;
      j["sequence"] = f.sequence;
      j["pts_ns"] = f.pts_ns;
      // Per-stage time: from capture (or the previous stage's finish) to this stage's finish, in ms.
      nlohmann::json stages = nlohmann::json::object();
      std::int64_t prev = f.capture_ns;
      for (int st = 0; st < index_; ++st) {
        const std::int64_t done = in->stage_done_ns[static_cast<std::size_t>(st)];
        stages[names_[static_cast<std::size_t>(st)]] = static_cast<double>(done - prev) / 1e6;
        prev = done;
      }
      j["stage_ms"] = stages;
      j["latency_ms"] = static_cast<double>(now - f.capture_ns) / 1e6;
      j["payload"] = {{"shape", item_shape(in->desc)}, {"mean", s.mean}, {"min", s.min}, {"max", s.max}};
      out << j.dump() << '\n';
    }
    if (!out) throw StageError("writing to '" + (file_.is_open() ? path_ : std::string("stdout")) + "' failed");
    return {};
  }

  void close(StageContext&) override {
    if (file_.is_open()) {
      file_.flush();
      if (!file_) throw StageError("flushing '" + path_ + "' failed");
      file_.close();
    } else if (type_ != "null") {
      std::cout.flush();
    }
  }

 private:
  static std::string item_shape(const PayloadDesc& d) {
    PayloadDesc one = d;
    std::string s = one.describe();
    return s.substr(0, s.find(" x"));  // drop the batch and memory suffix
  }

  std::string type_, path_;
  std::vector<std::string> names_;
  int index_;
  std::ofstream file_;
};

}  // namespace

StageInfo sink_stage() {
  return {"sink",
          StageRole::sink,
          "writes one record per frame: null (count only), stdout (a line each) or jsonl (one JSON object each)",
          {
              {"type", ParamType::choice, "null", "where records go", {}, {}, {"null", "stdout", "jsonl"}},
              {"path", ParamType::string, "", "jsonl: output file (- for stdout)"},
          },
          [](const StageInit& init) -> std::unique_ptr<Stage> { return std::make_unique<SinkStage>(init); }};
}

}  // namespace sluice
