#include "stages/sink_npy.hpp"

#include <cstddef>
#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "kernels/detect.hpp"
#include "kernels/half.hpp"
#include "kernels/topk.hpp"
#include "runtime/errors.hpp"
#include "runtime/utf8.hpp"

namespace sluice::sinks {
namespace fs = std::filesystem;

NpyWriter::NpyWriter(const PayloadDesc& d, fs::path dir, WriteRetry& retry, std::string stage)
    : desc_(d), dir_(std::move(dir)), retry_(retry), stage_(std::move(stage)) {
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
    case PayloadKind::detections:
      // One record per frame: the header's counts and every box slot (the first `count` filled, the rest zero).
      static_assert(sizeof(kernels::DetectionsHeader) == 16 && sizeof(kernels::Detection) == 32);
      descr_ = "[('count', '<i4'), ('candidates', '<i4'), ('cut', '<i4'), ('events', '<i4'), ('boxes', "
               "[('x1', '<f4'), ('y1', '<f4'), ('x2', '<f4'), ('y2', '<f4'), ('score', '<f4'), ('class', '<i4'), "
               "('track', '<i4'), ('attribute', '<i4')], (" + std::to_string(d.channels) + ",))";
      // Each secondary model's top-k per box slot (classify_boxes; names are [A-Za-z0-9_-], checked there).
      for (const BoxAttribute& a : d.attributes)
        descr_ += ", ('" + a.name + "', [('score', '<f4'), ('index', '<i4')], (" + std::to_string(d.channels) + ", " +
                  std::to_string(a.k) + "))";
      descr_ += "]";
      item_shape_ = {};
      break;
  }
}

void NpyWriter::open(const std::set<std::string>& interrupted) {
  create_directory_or_throw(dir_);
  lock_ = lock_output(OutputLock::for_directory(dir_), "output directory '" + dir_.string() + "'", retry_);
  remove_stale_temps(dir_, stage_);
  // Numbers go on after the highest batch file there: earlier runs' files hold delivered frames.
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    unsigned long long n = 0;
    char tail = 0;
    if (name.size() == 18 && std::sscanf(name.c_str(), "batch-%8llu.np%c", &n, &tail) == 2 && tail == 'y')
      batches_ = std::max<std::uint64_t>(batches_, n + 1);
  }
  const std::string index = (dir_ / "index.jsonl").string();
  drop_records_of(index, interrupted, retry_, stage_);
  if (const int err = index_.try_open(index, OutputFile::Mode::append))
    throw StageError("cannot open '" + index + "' for writing: " + errno_text(err));
  index_.cut_torn_line(retry_);
}

void NpyWriter::write(const Batch& b, Origins& origins) {
  char name[32];
  std::snprintf(name, sizeof name, "batch-%08llu.npy", static_cast<unsigned long long>(batches_));
  const fs::path path = dir_ / name, temp = temp_path(dir_, name);
  OutputFile f;
  try {
    f.open(temp.string(), OutputFile::Mode::truncate, retry_);
    f.append(header(b.count), retry_);
    if (desc_.kind == PayloadKind::tensor && desc_.dtype == DType::bf16) {
      const std::size_t n = desc_.item_bytes() / 2 * static_cast<std::size_t>(b.count);
      widened_.resize(n);
      const auto* bits = reinterpret_cast<const std::uint16_t*>(b.item(0));
      for (std::size_t i = 0; i < n; ++i) widened_[i] = kernels::bf16_bits_to_float(bits[i]);
      f.append({reinterpret_cast<const char*>(widened_.data()), n * sizeof(float)}, retry_);
    } else {
      const std::size_t bytes = desc_.item_bytes() * static_cast<std::size_t>(b.count);
      f.append({reinterpret_cast<const char*>(b.item(0)), bytes}, retry_);
    }
    f.sync(retry_);
    f.close();
    commit_rename(temp, path, retry_);
  } catch (...) {
    f.close_quietly();
    std::remove(temp.c_str());
    throw;
  }
  ++batches_;
  lines_.clear();
  for (int row = 0; row < b.count; ++row) {
    const FrameMeta& m = b.frames[static_cast<std::size_t>(row)];
    nlohmann::ordered_json line{{"file", name}, {"row", row}, {"source_id", m.source_id}, {"sequence", m.sequence},
                                {"pts_ns", m.pts_ns}};
    if (m.input != 0) {  // lets a reader match frames to inputs
      const std::string& uri = origins.of(m).uri;
      line["input"] = uri;
      if (!valid_utf8(uri)) line["input_hex"] = to_hex(uri);
      line["input_frame"] = m.input_frame;
    }
    lines_ += line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    lines_ += '\n';
  }
  const std::uint64_t before = index_.size();
  try {
    index_.require_linked();
    index_.append(lines_, retry_);
    index_.sync(retry_);
    index_.require_linked();
  } catch (...) {
    index_.truncate_to(before);
    std::remove(path.c_str());  // its frames fail: no file without index lines
    throw;
  }
}

void NpyWriter::close() {
  if (index_.is_open()) {
    index_.sync(retry_);
    index_.close();
  }
  lock_.release();
}

std::string NpyWriter::header(int count) const {
  std::string shape = "(" + std::to_string(count);
  for (int dim : item_shape_) shape += ", " + std::to_string(dim);
  shape += item_shape_.empty() ? ",)" : ")";  // (5,) is a tuple, (5) is not
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

}  // namespace sluice::sinks
