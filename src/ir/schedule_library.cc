// Schedule files and the BRAID_SCHEDULES directory (see schedule_library.h).
#include "braid/schedule_library.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "braid/msccl_xml.h"
#include "braid/schedule_json.h"
#include "braid/verify.h"

namespace braid {
namespace {

bool has_extension(const std::string& path, const char* ext) {
  return std::filesystem::path(path).extension() == ext;
}

}  // namespace

bool load_schedule_file(const std::string& path, Schedule* out, std::string* error) {
  std::ifstream in(path);
  if (!in) return *error = fmt::format("cannot open {}", path), false;
  std::stringstream text;
  text << in.rdbuf();
  bool ok = has_extension(path, ".xml") ? schedule_from_msccl_xml(text.str(), out, error)
                                        : schedule_from_json(text.str(), out, error);
  if (!ok) *error = fmt::format("{}: {}", path, *error);
  return ok;
}

bool save_schedule_file(const std::string& path, const Schedule& schedule, std::string* error) {
  std::string text;
  if (has_extension(path, ".xml")) {
    if (!schedule_to_msccl_xml(schedule, &text, error)) return false;
  } else {
    text = schedule_to_json(schedule) + "\n";
  }
  std::ofstream out(path);
  if (!out || !(out << text)) return *error = fmt::format("cannot write {}", path), false;
  return true;
}

ScheduleLibrary ScheduleLibrary::load_directory(const std::string& dir) {
  ScheduleLibrary lib;
  std::error_code ec;
  std::vector<std::string> paths;
  try {
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      std::string p = entry.path().string();
      if (entry.is_regular_file(ec) && (has_extension(p, ".json") || has_extension(p, ".xml"))) paths.push_back(p);
    }
  } catch (const std::exception& e) {  // iteration itself can throw
    lib.rejected.push_back(fmt::format("{}: {}", dir, e.what()));
    return lib;
  }
  if (ec) {
    lib.rejected.push_back(fmt::format("{}: {}", dir, ec.message()));
    return lib;
  }
  std::sort(paths.begin(), paths.end());
  for (const std::string& p : paths) {
    Schedule s;
    std::string error;
    if (!load_schedule_file(p, &s, &error)) {
      lib.rejected.push_back(error);
      continue;
    }
    VerifyResult v = verify(s);
    if (!v.ok) {
      lib.rejected.push_back(fmt::format("{}: does not verify: {}", p, v.errors.empty() ? "" : v.errors[0]));
      continue;
    }
    lib.schedules.push_back(std::make_shared<const Schedule>(std::move(s)));
    lib.files.push_back(p);
  }
  return lib;
}

std::shared_ptr<const Schedule> ScheduleLibrary::find(Collective c, int nranks, Placement placement,
                                                      uint64_t bytes) const {
  for (const auto& s : schedules) {
    if (s->collective != c || s->nranks != nranks) continue;
    bool placed = placement == Placement::InPlace    ? s->in_place
                  : placement == Placement::OutOfPlace ? s->out_of_place
                                                     : s->in_place && s->out_of_place;
    if (placed && bytes >= s->min_bytes && bytes <= s->max_bytes) return s;
  }
  return nullptr;
}

}  // namespace braid
