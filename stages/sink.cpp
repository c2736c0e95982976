// sink: the pipeline's end. Splits batches into frames again and writes one record per frame (a payload summary,
// or the top-k classes), or (npy) each batch's payload as a NumPy file with an index of its frames.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <span>

#include "kernels/half.hpp"
#include "kernels/topk.hpp"
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

// Classes items: the top-k entries, best first, and a class's name (its label, or "class N" without labels).
std::span<const kernels::ClassScore> class_scores(const PayloadDesc& d, const std::byte* item) {
  return {reinterpret_cast<const kernels::ClassScore*>(item), static_cast<std::size_t>(d.channels)};
}
std::string class_name(const PayloadDesc& d, std::int32_t index) {
  if (d.labels && index >= 0 && static_cast<std::size_t>(index) < d.labels->size())
    return (*d.labels)[static_cast<std::size_t>(index)];
  return "class " + std::to_string(index);
}

// NumPy .npy (format 1.0) of one batch: [count, ...] in the payload's own layout and element type.
// Frames: packed RGB/BGR as [count, H, W, 3], gray as [count, H, W, 1], NV12/I420 as their planes stacked,
// [count, H*3/2, W]. Tensors: [count, C, H, W] (nchw) or [count, H, W, C] (nhwc); bf16 is stored as f32,
// since NumPy has no bf16. Classes: [count, k] records of (score f32, index i32), best first.
class NpyBatchWriter {
 public:
  explicit NpyBatchWriter(const PayloadDesc& d) : desc_(d) {
    switch (d.kind) {
      case PayloadKind::frames:
        descr_ = "'|u1'";
        if (d.pixel == PixelFormat::nv12 || d.pixel == PixelFormat::i420)
          item_shape_ = {d.height * 3 / 2, d.width};
        else
          item_shape_ = {d.height, d.width, d.pixel == PixelFormat::gray8 ? 1 : 3};
        break;
      case PayloadKind::tensor:
        descr_ = d.dtype == DType::u8 ? "'|u1'" : d.dtype == DType::f16 ? "'<f2'" : "'<f4'";
        item_shape_ = d.layout == Layout::nchw ? std::vector<int>{d.channels, d.height, d.width}
                                               : std::vector<int>{d.height, d.width, d.channels};
        break;
      case PayloadKind::classes:
        static_assert(sizeof(kernels::ClassScore) == 8 && offsetof(kernels::ClassScore, index) == 4);
        descr_ = "[('score', '<f4'), ('index', '<i4')]";
        item_shape_ = {d.channels};
        break;
    }
  }

  // Writes the batch's items to `temp`, then renames it to `path`: a reader never sees half a file.
  void write(const Batch& b, const std::filesystem::path& path, const std::filesystem::path& temp) {
    std::FILE* f = std::fopen(temp.c_str(), "wb");
    if (!f) throw StageError("cannot create '" + temp.string() + "': " + std::strerror(errno));
    const std::string head = header(b.count);
    bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size();
    if (desc_.kind == PayloadKind::tensor && desc_.dtype == DType::bf16) {
      const std::size_t n = desc_.item_bytes() / 2 * static_cast<std::size_t>(b.count);
      widened_.resize(n);
      const auto* bits = reinterpret_cast<const std::uint16_t*>(b.item(0));
      for (std::size_t i = 0; i < n; ++i) widened_[i] = kernels::bf16_bits_to_float(bits[i]);
      ok = ok && std::fwrite(widened_.data(), sizeof(float), n, f) == n;
    } else {
      const std::size_t bytes = desc_.item_bytes() * static_cast<std::size_t>(b.count);
      ok = ok && std::fwrite(b.item(0), 1, bytes, f) == bytes;
    }
    const int write_errno = errno;
    if (std::fclose(f) != 0 || !ok) {
      const int err = ok ? errno : write_errno;
      std::remove(temp.c_str());
      throw StageError("writing '" + temp.string() + "' failed: " + std::strerror(err));
    }
    if (std::rename(temp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      std::remove(temp.c_str());
      throw StageError("cannot rename '" + temp.string() + "' to '" + path.string() + "': " + std::strerror(err));
    }
  }

 private:
  std::string header(int count) const {
    std::string shape = "(" + std::to_string(count);
    for (int dim : item_shape_) shape += ", " + std::to_string(dim);
    shape += ")";
    std::string dict = "{'descr': " + descr_ + ", 'fortran_order': False, 'shape': " + shape + ", }";
    // Magic (6) + version (2) + length (2) + dict + '\n', padded with spaces to a multiple of 64 bytes.
    const std::size_t total = (10 + dict.size() + 1 + 63) / 64 * 64;
    dict.append(total - 10 - dict.size() - 1, ' ');
    dict += '\n';
    std::string out = "\x93NUMPY";
    out += '\x01';
    out += '\x00';
    out += static_cast<char>(dict.size() & 0xff);
    out += static_cast<char>(dict.size() >> 8);
    return out + dict;
  }

  PayloadDesc desc_;
  std::string descr_;  // NumPy's type description, as a Python literal
  std::vector<int> item_shape_;
  std::vector<float> widened_;
};

class SinkStage final : public Stage {
 public:
  explicit SinkStage(const StageInit& init)
      : type_(init.params.string("type")), path_(init.params.string("path")), names_(init.stage_names),
        index_(init.index) {
    if (init.input->memory == MemoryKind::device)
      throw ConfigError("reads host memory; put a download stage before it (input is " + init.input->describe() + ")");
    if (type_ == "jsonl" && path_.empty()) throw ConfigError("type jsonl needs a 'path' (use - for stdout)");
    if (type_ == "npy") {
      if (path_.empty() || path_ == "-") throw ConfigError("type npy needs a 'path': the directory to write into");
      npy_.emplace(*init.input);
    }
  }

  void open(StageContext&) override {
    if (type_ == "jsonl" && path_ != "-") {
      file_.open(path_, std::ios::out | std::ios::trunc);
      if (!file_) throw StageError("cannot open '" + path_ + "' for writing: " + std::strerror(errno));
    } else if (type_ == "npy") {
      std::error_code ec;
      std::filesystem::create_directories(path_, ec);
      if (ec) throw StageError("cannot create directory '" + path_ + "': " + ec.message());
      const std::string index = (std::filesystem::path(path_) / "index.jsonl").string();
      file_.open(index, std::ios::out | std::ios::trunc);
      if (!file_) throw StageError("cannot open '" + index + "' for writing: " + std::strerror(errno));
    }
  }

  BatchLease process(Batch* in, StageContext&) override {
    if (type_ == "null") return {};
    if (type_ == "npy") {
      write_npy_batch(*in);
      return {};
    }
    std::ostream& out = file_.is_open() ? static_cast<std::ostream&>(file_) : std::cout;
    const std::int64_t now = now_ns();
    const bool classes = in->desc.kind == PayloadKind::classes;
    for (int i = 0; i < in->count; ++i) {
      const FrameMeta& f = in->frames[static_cast<std::size_t>(i)];
      if (type_ == "stdout") {
        char line[256];
        std::snprintf(line, sizeof line, "source %u seq %llu pts %.3fs latency %.2fms ", f.source_id,
                      static_cast<unsigned long long>(f.sequence), static_cast<double>(f.pts_ns) / 1e9,
                      static_cast<double>(now - f.capture_ns) / 1e6);
        out << line;
        if (classes) {
          const char* separator = "";
          for (const kernels::ClassScore& c : class_scores(in->desc, in->item(i))) {
            std::snprintf(line, sizeof line, " %.4f", static_cast<double>(c.score));
            out << separator << class_name(in->desc, c.index) << line;
            separator = ", ";
          }
          out << '\n';
        } else {
          const PayloadSummary s = summarise(in->desc, in->item(i));
          std::snprintf(line, sizeof line, "%s mean %.4f min %.4f max %.4f\n", item_shape(in->desc).c_str(), s.mean,
                        s.min, s.max);
          out << line;
        }
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
      if (classes) {
        nlohmann::json best = nlohmann::json::array();
        for (const kernels::ClassScore& c : class_scores(in->desc, in->item(i)))
          best.push_back({{"index", c.index}, {"label", class_name(in->desc, c.index)}, {"score", c.score}});
        j["classes"] = best;
      } else {
        const PayloadSummary s = summarise(in->desc, in->item(i));
        j["payload"] = {{"shape", item_shape(in->desc)}, {"mean", s.mean}, {"min", s.min}, {"max", s.max}};
      }
      out << j.dump() << '\n';
    }
    if (!out) throw StageError("writing to '" + (file_.is_open() ? path_ : std::string("stdout")) + "' failed");
    return {};
  }

  void close(StageContext&) override {
    if (file_.is_open()) {
      file_.flush();
      if (!file_) throw StageError("flushing '" + output_name() + "' failed");
      file_.close();
    } else if (type_ != "null") {
      std::cout.flush();
    }
  }

 private:
  // One .npy per batch, then its frames' lines in index.jsonl: every line names a complete file.
  void write_npy_batch(const Batch& b) {
    char name[32];
    std::snprintf(name, sizeof name, "batch-%08llu.npy", static_cast<unsigned long long>(npy_batches_));
    const std::filesystem::path dir(path_);
    npy_->write(b, dir / name, dir / (std::string(".") + name + ".tmp"));
    ++npy_batches_;
    for (int row = 0; row < b.count; ++row) {
      const FrameMeta& f = b.frames[static_cast<std::size_t>(row)];
      const nlohmann::json j = {
          {"file", name}, {"row", row}, {"source_id", f.source_id}, {"sequence", f.sequence}, {"pts_ns", f.pts_ns}};
      file_ << j.dump() << '\n';
    }
    file_.flush();
    if (!file_) throw StageError("writing to '" + output_name() + "' failed: " + std::strerror(errno));
  }

  std::string output_name() const {
    return type_ == "npy" ? (std::filesystem::path(path_) / "index.jsonl").string() : path_;
  }

  static std::string item_shape(const PayloadDesc& d) {
    PayloadDesc one = d;
    std::string s = one.describe();
    return s.substr(0, s.find(" x"));  // drop the batch and memory suffix
  }

  std::string type_, path_;
  std::vector<std::string> names_;
  int index_;
  std::ofstream file_;  // jsonl: the records; npy: index.jsonl
  std::optional<NpyBatchWriter> npy_;
  std::uint64_t npy_batches_ = 0;
};

}  // namespace

StageInfo sink_stage() {
  return {"sink",
          StageRole::sink,
          "writes one record per frame (a payload summary, or the top-k classes by label): null (count only), stdout "
          "(a line each), jsonl (one JSON object each) or npy (each batch's payload as a NumPy file, plus index.jsonl: "
          "file, row, source_id, sequence, pts_ns per frame)",
          {
              {"type", ParamType::choice, "null", "where records go", {}, {}, {"null", "stdout", "jsonl", "npy"}},
              {"path", ParamType::string, "",
               "jsonl: output file (- for stdout); npy: directory (created if missing) for batch-NNNNNNNN.npy "
               "[count, ...] in the payload's layout and dtype (bf16 as f32; frames as u8 HxWxC, YUV as "
               "(H*3/2)xW; classes as k records of score f32, index i32) and index.jsonl"},
          },
          [](const StageInit& init) -> std::unique_ptr<Stage> { return std::make_unique<SinkStage>(init); }};
}

}  // namespace sluice
