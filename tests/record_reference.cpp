#include "tests/record_reference.hpp"

#include <nlohmann/json.hpp>

#include "runtime/stats.hpp"
#include "runtime/utf8.hpp"

namespace sluice::test {
namespace {
std::string label_of(const std::shared_ptr<const std::vector<std::string>>& labels, std::int32_t index) {
  if (labels && index >= 0 && static_cast<std::size_t>(index) < labels->size())
    return (*labels)[static_cast<std::size_t>(index)];
  return "class " + std::to_string(index);
}
}  // namespace

std::string reference_record(const std::vector<std::string>& stage_names, int index, const Batch& b, int i,
                             const sinks::Origin& origin, std::int64_t now) {
  using namespace sinks;
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
  for (int st = 0; st < index && static_cast<std::size_t>(st) < stage_names.size(); ++st) {
    const std::int64_t done = b.stage_done_ns[static_cast<std::size_t>(st)];
    stages[stage_names[static_cast<std::size_t>(st)]] = static_cast<double>(done - prev) / 1e6;
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

}  // namespace sluice::test
