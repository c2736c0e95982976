// The sink's JSON records, written directly (runtime/json_text.hpp), are the same bytes the json tree of
// tests/record_reference.hpp printed: on random batches of detections (with track ids, events and attributes),
// classes and tensors, with hostile values (NaN, infinities, -0, huge and tiny floats, negative ids, counts
// beyond the payload) and hostile names (quotes, control bytes, UTF-8, bytes that are not UTF-8, names given
// twice).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/detect.hpp"
#include "kernels/topk.hpp"
#include "record_reference.hpp"
#include "runtime/json_text.hpp"
#include "runtime/sink_records.hpp"

using namespace sluice;
using sluice::sinks::Origin;
using sluice::sinks::RecordFormatter;

namespace {

class Random {
 public:
  explicit Random(std::uint32_t seed) : rng_(seed) {}
  int below(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  bool one_in(int n) { return below(n) == 0; }
  float coordinate() {
    switch (below(12)) {
      case 0: return std::numeric_limits<float>::quiet_NaN();
      case 1: return below(2) ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
      case 2: return -0.0f;
      case 3: return std::ldexp(static_cast<float>(below(1000) + 1), below(120) - 60);  // huge and tiny
      case 4: return static_cast<float>(below(2000));                                   // whole pixels
      default: return std::uniform_real_distribution<float>(-10.f, 2000.f)(rng_);
    }
  }
  float score() { return one_in(20) ? coordinate() : std::uniform_real_distribution<float>(0.f, 1.f)(rng_); }
  std::int32_t id() { return one_in(10) ? static_cast<std::int32_t>(rng_()) : below(90) - 2; }
  std::string name() {
    static const char* const kNames[] = {"person", "car", "a\"b\\c", "tab\there", "nl\n", "\x01\x1f", "caf\xc3\xa9",
                                         "\xff\xfe bad", "trunc\xe2\x82", "", "del\x7f", "/path/x.mp4", "\xf0\x9f\x98\x80"};
    return kNames[below(static_cast<int>(std::size(kNames)))];
  }
  std::shared_ptr<const std::vector<std::string>> labels() {
    if (one_in(4)) return nullptr;
    std::vector<std::string> v;
    for (int i = 0, n = below(12); i < n; ++i) v.push_back(one_in(3) ? name() : "class" + std::to_string(i));
    return std::make_shared<const std::vector<std::string>>(std::move(v));
  }

 private:
  std::mt19937 rng_;
};

PayloadDesc detections_desc(Random& r) {
  PayloadDesc d;
  d.kind = PayloadKind::detections;
  d.batch = 3;
  d.channels = 1 + r.below(120);
  d.classes = 80;
  d.labels = r.labels();
  for (int a = 0, n = r.below(4); a < n; ++a) {
    BoxAttribute attribute;
    attribute.name = r.one_in(2) ? "colour" : r.name();  // "colour" twice at times: the later one wins
    attribute.k = 1 + r.below(3);
    attribute.classes = 10;
    attribute.labels = r.labels();
    d.attributes.push_back(attribute);
  }
  return d;
}

void fill_detections(Random& r, Batch& b, int i) {
  const PayloadDesc& d = b.desc;
  kernels::DetectionsHeader h{};
  h.count = r.one_in(15) ? d.channels + r.below(5) - 2 : r.below(d.channels + 1);  // at times beyond the payload
  h.events = r.one_in(15) ? r.below(8) - 2 : r.below(4);
  std::memcpy(b.item(i), &h, sizeof h);
  auto* boxes = reinterpret_cast<kernels::Detection*>(b.item(i) + sizeof h);
  for (int k = 0; k < d.channels; ++k)
    boxes[k] = {r.coordinate(), r.coordinate(), r.coordinate(), r.coordinate(), r.score(), r.id(),
                r.one_in(3) ? -1 : r.id(), r.below(4)};
  for (std::size_t a = 0; a < d.attributes.size(); ++a) {
    auto* scores = reinterpret_cast<kernels::ClassScore*>(b.item(i) + d.attribute_offset(a));
    for (int k = 0; k < d.channels * d.attributes[a].k; ++k)
      scores[k] = {r.score(), r.one_in(3) ? -1 : r.id()};
  }
}

FrameMeta frame(Random& r, int i) {
  FrameMeta f;
  f.source_id = static_cast<std::uint32_t>(r.below(5));
  f.sequence = static_cast<std::uint64_t>(r.below(100000)) + (r.one_in(5) ? (std::uint64_t{1} << 63) : 0);
  f.pts_ns = r.one_in(5) ? -r.below(1000) : static_cast<std::int64_t>(r.below(1 << 30)) * 1000;
  f.capture_ns = 1'000'000'000LL + r.below(1000000) + i;
  f.wall_ns = r.one_in(3) ? 0 : 1'764'637'384'123'456'789LL + r.below(1 << 30);
  f.input = r.one_in(3) ? 0 : static_cast<std::uint32_t>(1 + r.below(4));
  f.input_frame = static_cast<std::uint64_t>(r.below(5000));
  return f;
}

Origin origin(Random& r) {
  Origin o;
  o.source = r.name();
  o.uri = r.one_in(2) ? "/videos/" + r.name() + ".mp4" : r.name();
  o.options = r.one_in(2) ? "" : r.name();
  return o;
}

std::vector<std::string> stage_names(Random& r) {
  std::vector<std::string> names = {"decode", "upload", "preprocess", "infer", "download", "track"};
  if (r.one_in(3)) names[static_cast<std::size_t>(r.below(6))] = r.name();
  if (r.one_in(4)) names[2] = names[4];  // a name given twice: the later stage's time is kept
  names.push_back("sink");
  return names;
}

// Every record of `b` made both ways, the same bytes.
void check_batch(Random& r, Batch& b) {
  const std::vector<std::string> names = stage_names(r);
  const int index = r.one_in(6) ? r.below(12) - 2 : static_cast<int>(names.size()) - 1;
  const RecordFormatter formatter(names, index);
  std::int64_t t = 1'000'000'000LL;
  for (auto& done : b.stage_done_ns) done = t += r.below(5'000'000);
  std::string reused = "left from before";
  for (int i = 0; i < b.count; ++i) {
    const Origin o = origin(r);
    const std::int64_t now = t + r.below(1'000'000'000);
    const std::string want = test::reference_record(names, index, b, i, o, now);
    INFO(want);
    CHECK(formatter.json(b, i, o, now) == want);
    reused.clear();
    formatter.append_json(b, i, o, now, reused);
    CHECK(reused == want);
  }
}

}  // namespace

TEST_CASE("detection records are the bytes the json tree printed, hostile values included", "[sink_records]") {
  Random r(29);
  for (int round = 0; round < 400; ++round) {
    Batch b;
    b.desc = detections_desc(r);
    b.memory = Memory(MemoryKind::host, b.desc.batch_bytes());
    b.count = 1 + r.below(b.desc.batch);
    for (int i = 0; i < b.count; ++i) {
      b.frames.push_back(frame(r, i));
      fill_detections(r, b, i);
    }
    check_batch(r, b);
  }
}

TEST_CASE("class and tensor records are the bytes the json tree printed", "[sink_records]") {
  Random r(7);
  for (int round = 0; round < 200; ++round) {
    Batch b;
    b.desc.batch = 2;
    if (r.one_in(2)) {
      b.desc.kind = PayloadKind::classes;
      b.desc.channels = 1 + r.below(5);
      b.desc.classes = 10;
      b.desc.labels = r.labels();
    } else {
      b.desc.kind = PayloadKind::tensor;
      b.desc.dtype = r.one_in(2) ? DType::f32 : DType::u8;
      b.desc.channels = 1 + r.below(3);
      b.desc.width = 1 + r.below(8);
      b.desc.height = 1 + r.below(8);
    }
    b.memory = Memory(MemoryKind::host, b.desc.batch_bytes());
    b.count = 2;
    for (int i = 0; i < b.count; ++i) {
      b.frames.push_back(frame(r, i));
      if (b.desc.kind == PayloadKind::classes) {
        auto* scores = reinterpret_cast<kernels::ClassScore*>(b.item(i));
        for (int k = 0; k < b.desc.channels; ++k) scores[k] = {r.score(), r.id()};
      } else if (b.desc.dtype == DType::f32) {
        auto* v = reinterpret_cast<float*>(b.item(i));
        for (std::size_t k = 0; k < b.desc.item_bytes() / sizeof(float); ++k) v[k] = r.coordinate();
      } else {
        for (std::size_t k = 0; k < b.desc.item_bytes(); ++k) b.item(i)[k] = static_cast<std::byte>(r.below(256));
      }
    }
    check_batch(r, b);
  }
}

TEST_CASE("JSON text: strings and numbers as nlohmann's dump writes them", "[sink_records]") {
  const auto text = [](auto append, auto value) {
    std::string out;
    append(out, value);
    return out;
  };
  const auto string = [](std::string& out, std::string_view s) { json_text::append_string(out, s); };
  const auto number = [](std::string& out, double v) { json_text::append_number(out, v); };
  CHECK(text(string, "plain") == "\"plain\"");
  CHECK(text(string, "q\"b\\c\n\x01") == "\"q\\\"b\\\\c\\n\\u0001\"");
  CHECK(text(string, "\xff") == "\"\xef\xbf\xbd\"");  // not UTF-8: U+FFFD
  CHECK(text(number, 1.0) == "1.0");
  CHECK(text(number, -0.0) == "-0.0");
  CHECK(text(number, 0.1f) == "0.10000000149011612");
  CHECK(text(number, 1e16) == "1e+16");
  CHECK(text(number, 1.5e-5) == "1.5e-05");
  CHECK(text(number, std::nan("")) == "null");
  CHECK(text(number, -std::numeric_limits<double>::infinity()) == "null");
  // Where Grisu2 and the shortest round trip part (std::to_chars would end in ...562).
  CHECK(text(number, static_cast<double>(930.960998535156250f)) == "930.9609985351563");
}
