#include "runtime/sink_records.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>

#include <optional>

#include "kernels/half.hpp"
#include "runtime/json_text.hpp"
#include "runtime/source_control.hpp"
#include "runtime/stats.hpp"
#include "runtime/utf8.hpp"

namespace sluice::sinks {

std::string Origins::source_name(std::uint32_t source_id) const {
  std::string name = shared_ ? shared_->inputs.source_name(source_id) : std::string();
  return name.empty() ? unnamed_source(source_id) : name;
}

const Origin& Origins::of(const FrameMeta& f) {
  if (f.input == 0) {
    auto it = sources_.find(f.source_id);
    if (it == sources_.end()) it = sources_.emplace(f.source_id, Origin{source_name(f.source_id), {}}).first;
    return it->second;
  }
  auto it = inputs_.find(f.input);
  if (it == inputs_.end()) {
    Origin o;
    if (shared_)
      if (auto p = shared_->inputs.get(f.input)) {
        o.uri = p->uri;
        o.options = p->options;
        o.source = p->source;
        o.live = is_live(p->kind);
        o.tracked = true;
      }
    if (o.source.empty()) o.source = source_name(f.source_id);
    if (o.uri.empty()) o.uri = "input" + std::to_string(f.input);  // not known to the tracker: still distinct
    it = inputs_.emplace(f.input, std::move(o)).first;
  }
  return it->second;
}

PayloadSummary summarise(const PayloadDesc& d, const std::byte* item) {
  const std::size_t n = d.kind == PayloadKind::frames ? d.item_bytes() : d.item_bytes() / dtype_bytes(d.dtype);
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
    for (std::size_t i = 0; i < n; ++i)
      add(bf16 ? kernels::bf16_bits_to_float(bits[i]) : kernels::half_bits_to_float(bits[i]));
  }
  if (n) s.mean /= static_cast<double>(n);
  return s;
}

std::span<const kernels::ClassScore> class_scores(const PayloadDesc& d, const std::byte* item) {
  return {reinterpret_cast<const kernels::ClassScore*>(item), static_cast<std::size_t>(d.channels)};
}

std::span<const kernels::Detection> detections(const PayloadDesc& d, const std::byte* item) {
  kernels::DetectionsHeader h;
  std::memcpy(&h, item, sizeof h);
  const std::size_t n = static_cast<std::size_t>(std::clamp(h.count, 0, std::max(d.channels, 0)));
  return {reinterpret_cast<const kernels::Detection*>(item + sizeof h), n};
}

std::span<const kernels::Detection> track_events(const PayloadDesc& d, const std::byte* item) {
  kernels::DetectionsHeader h;
  std::memcpy(&h, item, sizeof h);
  const int capacity = std::max(d.channels, 0);
  const int boxes = std::clamp(h.count, 0, capacity);
  const std::size_t n = static_cast<std::size_t>(std::clamp(h.events, 0, capacity - boxes));
  return {reinterpret_cast<const kernels::Detection*>(item + sizeof h) + boxes, n};
}

std::string track_event_name(std::int32_t event) {
  switch (static_cast<kernels::TrackEvent>(event)) {
    case kernels::TrackEvent::track_new: return "new";
    case kernels::TrackEvent::track_lost: return "lost";
  }
  return "event " + std::to_string(event);
}

std::span<const kernels::ClassScore> attribute_scores(const PayloadDesc& d, const std::byte* item, std::size_t a,
                                                      std::size_t slot) {
  const auto k = static_cast<std::size_t>(d.attributes[a].k);
  return {reinterpret_cast<const kernels::ClassScore*>(item + d.attribute_offset(a)) + slot * k, k};
}

namespace {
// A class's label when `labels` names it, else "class N": detector classes and attributes alike.
std::string label_of(const std::shared_ptr<const std::vector<std::string>>& labels, std::int32_t index) {
  if (labels && index >= 0 && static_cast<std::size_t>(index) < labels->size())
    return (*labels)[static_cast<std::size_t>(index)];
  return "class " + std::to_string(index);
}
}  // namespace

std::string attributes_text(const PayloadDesc& d, const std::byte* item, std::size_t slot) {
  std::string out;
  for (std::size_t a = 0; a < d.attributes.size(); ++a) {
    const kernels::ClassScore best = attribute_scores(d, item, a, slot).front();
    if (best.index < 0) continue;
    char score[32];
    std::snprintf(score, sizeof score, " %.2f", static_cast<double>(best.score));
    out += (out.empty() ? "" : ", ") + d.attributes[a].name + " " + label_of(d.attributes[a].labels, best.index) + score;
  }
  return out;
}

std::string class_name(const PayloadDesc& d, std::int32_t index) { return label_of(d.labels, index); }

std::string item_shape(const PayloadDesc& d) {
  const std::string s = d.describe();
  return s.substr(0, s.find(" x"));  // drop the batch and memory suffix
}

RecordFormatter::RecordFormatter(std::vector<std::string> stage_names, int index)
    : names_(std::move(stage_names)), index_(index) {
  // stage_ms: the stages before the sink, keys sorted; a name given twice keeps the later stage's time.
  const std::size_t before = std::min(names_.size(), static_cast<std::size_t>(std::max(index_, 0)));
  for (std::size_t st = 0; st < before; ++st) stage_keys_.push_back({{}, st});
  std::stable_sort(stage_keys_.begin(), stage_keys_.end(),
                   [&](const StageKey& a, const StageKey& b) { return names_[a.stage] < names_[b.stage]; });
  std::vector<StageKey> kept;
  for (std::size_t k = 0; k < stage_keys_.size(); ++k)
    if (k + 1 == stage_keys_.size() || names_[stage_keys_[k + 1].stage] != names_[stage_keys_[k].stage])
      kept.push_back(stage_keys_[k]);
  stage_keys_ = std::move(kept);
  for (StageKey& key : stage_keys_) {
    json_text::append_string(key.text, names_[key.stage]);
    key.text += ':';
  }
}

namespace {
using json_text::append_integer;
using json_text::append_number;
using json_text::append_string;

// A class's label when `labels` names it, else "class N", as a JSON string.
void append_label(std::string& out, const std::shared_ptr<const std::vector<std::string>>& labels, std::int32_t index) {
  if (labels && index >= 0 && static_cast<std::size_t>(index) < labels->size()) {
    append_string(out, (*labels)[static_cast<std::size_t>(index)]);
    return;
  }
  out += "\"class ";
  append_integer(out, index);
  out += '"';
}

// {"index":..,"label":..,"score":..}
void append_class_score(std::string& out, const std::shared_ptr<const std::vector<std::string>>& labels,
                        const kernels::ClassScore& c) {
  out += "{\"index\":";
  append_integer(out, c.index);
  out += ",\"label\":";
  append_label(out, labels, c.index);
  out += ",\"score\":";
  append_number(out, c.score);
  out += '}';
}

// Attributes in key order: names sorted, each with its places in d.attributes, the last first (a name given twice:
// the later attribute that looked at the box wins, as assigning the key twice did).
struct AttributeKeys {
  std::vector<std::size_t> order;  // attribute indices, by name, then later first
  explicit AttributeKeys(const PayloadDesc& d) {
    for (std::size_t a = 0; a < d.attributes.size(); ++a) order.push_back(a);
    std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
      return d.attributes[x].name != d.attributes[y].name ? d.attributes[x].name < d.attributes[y].name : x > y;
    });
  }
};

// "attributes":{name:[...],...}, for the attributes that looked at box `slot`; nothing when none did.
void append_attributes(std::string& out, const PayloadDesc& d, const std::byte* item, std::size_t slot,
                       const AttributeKeys& keys) {
  bool any = false;
  for (std::size_t k = 0; k < keys.order.size();) {
    const std::string& name = d.attributes[keys.order[k]].name;
    std::size_t chosen = keys.order.size();
    for (; k < keys.order.size() && d.attributes[keys.order[k]].name == name; ++k)
      if (chosen == keys.order.size() && attribute_scores(d, item, keys.order[k], slot).front().index >= 0)
        chosen = k;
    if (chosen == keys.order.size()) continue;  // no model with this name looked at the box
    const std::size_t a = keys.order[chosen];
    out += any ? "," : "\"attributes\":{";
    any = true;
    append_string(out, name);
    out += ":[";
    const char* separator = "";
    for (const kernels::ClassScore& c : attribute_scores(d, item, a, slot)) {
      out += separator;
      append_class_score(out, d.attributes[a].labels, c);
      separator = ",";
    }
    out += ']';
  }
  if (any) out += "},";
}

// A box's fields after its attributes: "box":[x1,y1,x2,y2],"class":..,["event":..,]"label":..,"score":..[,"track":..]
void append_box(std::string& out, const PayloadDesc& desc, const kernels::Detection& d, const char* event) {
  out += "\"box\":[";
  append_number(out, d.x1);
  out += ',';
  append_number(out, d.y1);
  out += ',';
  append_number(out, d.x2);
  out += ',';
  append_number(out, d.y2);
  out += "],\"class\":";
  append_integer(out, d.class_id);
  if (event) {
    out += ",\"event\":";
    append_string(out, event);
  }
  out += ",\"label\":";
  append_label(out, desc.labels, d.class_id);
  out += ",\"score\":";
  append_number(out, d.score);
  if (d.track_id >= 0) {
    out += ",\"track\":";
    append_integer(out, d.track_id);
  }
}
}  // namespace

void RecordFormatter::append_json(const Batch& b, int i, const Origin& origin, std::int64_t now,
                                  std::string& out) const {
  // Keys in nlohmann's order (sorted), so that records read as they did when a json tree printed them.
  const FrameMeta& f = b.frames[static_cast<std::size_t>(i)];
  const std::byte* item = b.item(i);
  out += '{';
  if (b.desc.kind == PayloadKind::classes) {
    out += "\"classes\":[";
    const char* separator = "";
    for (const kernels::ClassScore& c : class_scores(b.desc, item)) {
      out += separator;
      append_class_score(out, b.desc.labels, c);
      separator = ",";
    }
    out += "],";
  } else if (b.desc.kind == PayloadKind::detections) {
    out += "\"detections\":[";
    const auto found = detections(b.desc, item);
    const std::optional<AttributeKeys> keys =
        b.desc.attributes.empty() ? std::nullopt : std::optional<AttributeKeys>(std::in_place, b.desc);
    for (std::size_t slot = 0; slot < found.size(); ++slot) {
      out += slot ? ",{" : "{";
      if (keys) append_attributes(out, b.desc, item, slot, *keys);
      append_box(out, b.desc, found[slot], nullptr);
      out += '}';
    }
    out += "],";
  }
  if (f.input != 0) {
    out += "\"input\":";
    append_string(out, origin.uri);
    out += ",\"input_frame\":";
    append_integer(out, f.input_frame);
    if (!valid_utf8(origin.uri)) {  // "input" shows U+FFFD for such bytes
      out += ",\"input_hex\":";
      append_string(out, to_hex(origin.uri));
    }
    if (!origin.options.empty()) {
      out += ",\"input_options\":";
      append_string(out, origin.options);
    }
    out += ',';
  }
  out += "\"latency_ms\":";
  append_number(out, static_cast<double>(now - f.capture_ns) / 1e6);
  if (b.desc.kind != PayloadKind::classes && b.desc.kind != PayloadKind::detections) {
    const PayloadSummary s = summarise(b.desc, item);
    out += ",\"payload\":{\"max\":";
    append_number(out, s.max);
    out += ",\"mean\":";
    append_number(out, s.mean);
    out += ",\"min\":";
    append_number(out, s.min);
    out += ",\"shape\":";
    append_string(out, item_shape(b.desc));
    out += '}';
  }
  out += ",\"pts_ns\":";
  append_integer(out, f.pts_ns);
  out += ",\"sequence\":";
  append_integer(out, f.sequence);
  out += ",\"source\":";
  append_integer(out, f.source_id);
  out += ",\"source_name\":";
  append_string(out, origin.source);
  // Per-stage time: from capture (or the previous stage's finish) to this stage's finish, in ms.
  out += ",\"stage_ms\":{";
  const char* separator = "";
  for (const StageKey& key : stage_keys_) {
    const std::int64_t from = key.stage == 0 ? f.capture_ns : b.stage_done_ns[key.stage - 1];
    out += separator;
    out += key.text;
    append_number(out, static_cast<double>(b.stage_done_ns[key.stage] - from) / 1e6);
    separator = ",";
  }
  out += '}';
  if (f.wall_ns) {  // when it was decoded (captured), UTC
    out += ",\"time\":";
    append_string(out, format_utc_ms(f.wall_ns));
  }
  if (b.desc.kind == PayloadKind::detections) {
    const auto events = track_events(b.desc, item);
    if (!events.empty()) {
      out += ",\"track_events\":[";
      for (std::size_t e = 0; e < events.size(); ++e) {
        out += e ? ",{" : "{";
        append_box(out, b.desc, events[e], track_event_name(events[e].reserved).c_str());
        out += '}';
      }
      out += ']';
    }
  }
  out += '}';
}

std::string RecordFormatter::json(const Batch& b, int i, const Origin& origin, std::int64_t now) const {
  std::string out;
  append_json(b, i, origin, now, out);
  return out;
}

std::string RecordFormatter::text(const Batch& b, int i, const Origin& origin, std::int64_t now) const {
  const FrameMeta& f = b.frames[static_cast<std::size_t>(i)];
  char buf[256];
  std::snprintf(buf, sizeof buf, " seq %llu pts %.3fs latency %.2fms ",
                static_cast<unsigned long long>(f.sequence), static_cast<double>(f.pts_ns) / 1e9,
                static_cast<double>(now - f.capture_ns) / 1e6);
  std::string out = "source " + to_valid_utf8(origin.source) + buf;
  if (b.desc.kind == PayloadKind::classes) {
    const char* separator = "";
    for (const kernels::ClassScore& c : class_scores(b.desc, b.item(i))) {
      std::snprintf(buf, sizeof buf, " %.4f", static_cast<double>(c.score));
      out += separator + class_name(b.desc, c.index) + buf;
      separator = ", ";
    }
    out += '\n';
  } else if (b.desc.kind == PayloadKind::detections) {
    const auto boxes = detections(b.desc, b.item(i));
    out += std::to_string(boxes.size()) + (boxes.size() == 1 ? " detection" : " detections");
    const char* separator = ": ";
    for (std::size_t slot = 0; slot < boxes.size(); ++slot) {
      const kernels::Detection& d = boxes[slot];
      std::snprintf(buf, sizeof buf, " %.3f [%.1f %.1f %.1f %.1f]", static_cast<double>(d.score),
                    static_cast<double>(d.x1), static_cast<double>(d.y1), static_cast<double>(d.x2),
                    static_cast<double>(d.y2));
      const std::string attributes = attributes_text(b.desc, b.item(i), slot);
      out += separator + class_name(b.desc, d.class_id) + (d.track_id >= 0 ? " #" + std::to_string(d.track_id) : "") + buf +
             (attributes.empty() ? "" : " (" + attributes + ")");
      separator = ", ";
    }
    for (const kernels::Detection& e : track_events(b.desc, b.item(i)))
      out += "; " + track_event_name(e.reserved) + " #" + std::to_string(e.track_id);
    out += '\n';
  } else {
    const PayloadSummary s = summarise(b.desc, b.item(i));
    std::snprintf(buf, sizeof buf, "%s mean %.4f min %.4f max %.4f\n", item_shape(b.desc).c_str(), s.mean, s.min,
                  s.max);
    out += buf;
  }
  return out;
}

}  // namespace sluice::sinks
