#include "runtime/sink_records.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "kernels/half.hpp"
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

std::string RecordFormatter::json(const Batch& b, int i, const Origin& origin, std::int64_t now) const {
  const FrameMeta& f = b.frames[static_cast<std::size_t>(i)];
  nlohmann::json j;
  j["source"] = f.source_id;
  j["source_name"] = origin.source;
  if (f.input != 0) {
    j["input"] = origin.uri;
    if (!valid_utf8(origin.uri)) j["input_hex"] = to_hex(origin.uri);  // "input" shows U+FFFD for such bytes
    j["input_frame"] = f.input_frame;
    if (!origin.options.empty()) j["input_options"] = origin.options;
  }
  j["sequence"] = f.sequence;
  j["pts_ns"] = f.pts_ns;
  if (f.wall_ns) j["time"] = format_utc_ms(f.wall_ns);  // when it was decoded (captured), UTC
  // Per-stage time: from capture (or the previous stage's finish) to this stage's finish, in ms.
  nlohmann::json stages = nlohmann::json::object();
  std::int64_t prev = f.capture_ns;
  for (int st = 0; st < index_ && static_cast<std::size_t>(st) < names_.size(); ++st) {
    const std::int64_t done = b.stage_done_ns[static_cast<std::size_t>(st)];
    stages[names_[static_cast<std::size_t>(st)]] = static_cast<double>(done - prev) / 1e6;
    prev = done;
  }
  j["stage_ms"] = std::move(stages);
  j["latency_ms"] = static_cast<double>(now - f.capture_ns) / 1e6;
  if (b.desc.kind == PayloadKind::classes) {
    nlohmann::json best = nlohmann::json::array();
    for (const kernels::ClassScore& c : class_scores(b.desc, b.item(i)))
      best.push_back({{"index", c.index}, {"label", class_name(b.desc, c.index)}, {"score", c.score}});
    j["classes"] = std::move(best);
  } else if (b.desc.kind == PayloadKind::detections) {
    const auto box_json = [&](const kernels::Detection& d) {
      nlohmann::json box = {{"box", {d.x1, d.y1, d.x2, d.y2}}, {"class", d.class_id},
                            {"label", class_name(b.desc, d.class_id)}, {"score", d.score}};
      if (d.track_id >= 0) box["track"] = d.track_id;
      return box;
    };
    nlohmann::json boxes = nlohmann::json::array();
    const auto found = detections(b.desc, b.item(i));
    for (std::size_t slot = 0; slot < found.size(); ++slot) {
      nlohmann::json box = box_json(found[slot]);
      nlohmann::json attributes = nlohmann::json::object();
      for (std::size_t a = 0; a < b.desc.attributes.size(); ++a) {
        const auto scores = attribute_scores(b.desc, b.item(i), a, slot);
        if (scores.front().index < 0) continue;  // the model did not look at this box
        nlohmann::json best = nlohmann::json::array();
        for (const kernels::ClassScore& c : scores)
          best.push_back({{"index", c.index}, {"label", label_of(b.desc.attributes[a].labels, c.index)}, {"score", c.score}});
        attributes[b.desc.attributes[a].name] = std::move(best);
      }
      if (!attributes.empty()) box["attributes"] = std::move(attributes);
      boxes.push_back(std::move(box));
    }
    j["detections"] = std::move(boxes);
    const auto events = track_events(b.desc, b.item(i));
    if (!events.empty()) {
      nlohmann::json list = nlohmann::json::array();
      for (const kernels::Detection& e : events) {
        nlohmann::json event = box_json(e);
        event["event"] = track_event_name(e.reserved);
        list.push_back(std::move(event));
      }
      j["track_events"] = std::move(list);
    }
  } else {
    const PayloadSummary s = summarise(b.desc, b.item(i));
    j["payload"] = {{"shape", item_shape(b.desc)}, {"mean", s.mean}, {"min", s.min}, {"max", s.max}};
  }
  // Input paths are not always UTF-8: replace what is not instead of throwing.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
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
