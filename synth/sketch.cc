// TACCL sketch JSON reader (fields documented in include/braid/sketch.h).
#include "braid/sketch.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "src/base/text_file.h"

namespace braid {
namespace {

using nlohmann::json;

bool id_map(const json& j, const char* what, int gpus, std::map<int, std::vector<int>>* out, std::string* error) {
  if (!j.is_object()) return *error = fmt::format("{} must be an object", what), false;
  for (auto& [key, value] : j.items()) {
    int sender = -1;
    try {
      size_t used = 0;
      sender = std::stoi(key, &used);
      if (used != key.size()) sender = -1;
    } catch (const std::exception&) {
    }
    if (sender < 0 || (gpus > 0 && sender >= gpus))
      return *error = fmt::format("{}: key '{}' is not a local GPU id", what, key), false;
    if (!value.is_array()) return *error = fmt::format("{}[{}] must be a list", what, key), false;
    for (const json& v : value) {
      if (!v.is_number_integer() || v.get<int>() < 0 || (gpus > 0 && v.get<int>() >= gpus))
        return *error = fmt::format("{}[{}] holds something that is not a local GPU id", what, key), false;
      (*out)[sender].push_back(v.get<int>());
    }
  }
  return true;
}

}  // namespace

bool sketch_from_json(const std::string& text, int gpus, Sketch* out, std::string* error) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return *error = "sketch: not a JSON object", false;
  Sketch s;
  try {
    if (j.contains("nnodes")) s.nnodes = j.at("nnodes").get<int>();
    if (s.nnodes < 1 || s.nnodes > 1024) return *error = "sketch: nnodes out of range", false;
    if (j.contains("intranode_sketch")) {
      const json& in = j.at("intranode_sketch");
      std::string strategy = in.value("strategy", "none");
      if (strategy == "switch") s.intra_switch = true;
      else if (strategy != "none" && strategy != "maxmin" && strategy != "minmax")
        return *error = fmt::format("sketch: unknown intranode strategy '{}'", strategy), false;
      if (s.intra_switch) {
        s.switches = in.at("switches").get<std::vector<std::vector<int>>>();
        for (auto& sw : s.switches)
          for (int g : sw)
            if (g < 0 || (gpus > 0 && g >= gpus)) return *error = fmt::format("sketch: switch lists GPU {}", g), false;
        if (in.contains("switch_hyperedge_strategy"))
          s.switch_strategy = in.at("switch_hyperedge_strategy").get<std::vector<std::string>>();
        for (auto& st : s.switch_strategy)
          if (st != "uc-max" && st != "uc-min" && !st.empty())
            return *error = fmt::format("sketch: unknown switch_hyperedge_strategy '{}'", st), false;
        s.switch_strategy.resize(s.switches.size());
      }
    }
    if (j.contains("internode_sketch")) {
      const json& inter = j.at("internode_sketch");
      std::string strategy = inter.value("strategy", "relay");
      if (strategy != "relay") return *error = fmt::format("sketch: unknown internode strategy '{}'", strategy), false;
      const json& conn = inter.contains("internode_conn") ? inter.at("internode_conn") : json("fully-connected");
      if (conn.is_string()) {
        if (conn == "fully-connected") s.inter = Sketch::InterConn::FullyConnected;
        else if (conn == "direct-map") s.inter = Sketch::InterConn::DirectMap;
        else return *error = fmt::format("sketch: unknown internode_conn '{}'", conn.get<std::string>()), false;
      } else {
        s.inter = Sketch::InterConn::Custom;
        if (!id_map(conn, "internode_conn", gpus, &s.internode_conn, error)) return *error = "sketch: " + *error, false;
      }
      if (inter.contains("gpus_to_sender_rev_map") &&
          !id_map(inter.at("gpus_to_sender_rev_map"), "gpus_to_sender_rev_map", gpus, &s.gpus_to_sender_rev_map, error))
        return *error = "sketch: " + *error, false;
      s.enforce_ordering = inter.value("enforce_ordering", false);
    }
    if (j.contains("symmetry_offsets"))
      for (const json& o : j.at("symmetry_offsets")) {
        auto pair = o.get<std::vector<int>>();
        if (pair.size() != 2 || pair[1] < 1 || pair[0] < 0 || pair[0] >= pair[1] + 1)
          return *error = "sketch: symmetry_offsets entries are [offset, group size]", false;
        s.symmetry_offsets.push_back({pair[0], pair[1]});
      }
    if (j.contains("hyperparameters")) s.input_chunkup = j.at("hyperparameters").value("input_chunkup", 1);
    if (s.input_chunkup < 1 || s.input_chunkup > 64) return *error = "sketch: input_chunkup must be 1..64", false;
  } catch (const std::exception& e) {
    return *error = fmt::format("sketch: a field has the wrong type ({})", e.what()), false;
  }
  *out = std::move(s);
  return true;
}

bool load_sketch(const std::string& path, int gpus, Sketch* out, std::string* error) {
  std::string text;
  if (!read_text_file(path, &text, error)) return false;
  if (!sketch_from_json(text, gpus, out, error)) return *error = path + ": " + *error, false;
  return true;
}

}  // namespace braid
