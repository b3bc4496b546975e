// Schedule files and the schedule search path (see schedule_library.h).
#include "braid/schedule_library.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "braid/msccl_xml.h"
#include "braid/schedule_json.h"
#include "braid/verify.h"
#include "src/base/text_file.h"

namespace braid {
namespace {

namespace fs = std::filesystem;

bool has_extension(const std::string& path, const char* ext) { return fs::path(path).extension() == ext; }

// An MSCCL file as braid runs it: with the slots it needs, and both
// placements where the one it declares is not all it is correct for
// (in-place files are often right out of place too).  Returns its
// verification.
VerifyResult fit_msccl_schedule(Schedule* s) {
  VerifyResult v = verify_fitting_slots(s);
  if (!v.ok || (s->in_place && s->out_of_place)) return v;
  const bool in_place = s->in_place;
  s->in_place = s->out_of_place = true;
  if (!verify(*s).ok) s->in_place = in_place, s->out_of_place = !in_place;
  return v;
}

// XML or JSON by the first character, whatever the file is called (the
// older MSCCL runtime's registration files have no extension).
bool is_xml(const std::string& text) {
  size_t first = text.find_first_not_of(" \t\r\n");
  return first != std::string::npos && text[first] == '<';
}

// Parses a schedule file's text; MSCCL XML is also fitted, *verified
// the outcome (JSON: not verified here, *verified untouched).
bool parse_schedule(const std::string& text, Schedule* out, VerifyResult* verified, std::string* error) {
  if (!is_xml(text)) return schedule_from_json(text, out, error);
  if (!schedule_from_msccl_xml(text, out, error)) return false;
  *verified = fit_msccl_schedule(out);
  return true;
}

}  // namespace

bool load_schedule_file(const std::string& path, Schedule* out, std::string* error) {
  std::string text;
  VerifyResult ignored;
  if (!read_text_file(path, &text, error)) return false;
  if (is_msccl_registration(text))
    return *error = fmt::format("{}: an MSCCL registration file (<msccl_algos>), not a schedule", path), false;
  bool ok = parse_schedule(text, out, &ignored, error);
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

void ScheduleLibrary::add_file(const std::string& path, const std::string& shown, bool registered) {
  std::string text, error;
  if (!read_text_file(path, &text, &error)) {
    rejected.push_back(error);
    return;
  }
  if (is_msccl_registration(text)) {
    if (registered)
      return rejected.push_back(fmt::format("{}: a registration file (<msccl_algos>) loads schedules, not other "
                                            "registration files", shown));
    add_registrations(path, text);
    return;
  }
  Schedule s;
  VerifyResult v;
  if (!parse_schedule(text, &s, &v, &error)) {
    rejected.push_back(fmt::format("{}: {}", shown, error));
    return;
  }
  if (!is_xml(text)) v = verify(s);
  if (!v.ok) {
    std::string why = v.errors.empty() ? "" : v.errors[0];
    if (v.deadlock) why += fmt::format(" (even with {} slots per connection)", s.slots);
    rejected.push_back(fmt::format("{}: does not verify: {}", shown, why));
    return;
  }
  schedules.push_back(std::make_shared<const Schedule>(std::move(s)));
  files.push_back(shown);
}

void ScheduleLibrary::add_registrations(const std::string& path, const std::string& text) {
  std::vector<MscclRegistration> loads;
  std::string error;
  if (!msccl_registrations_from_xml(text, &loads, &error)) {
    rejected.push_back(fmt::format("{}: {}", path, error));
    return;
  }
  for (const MscclRegistration& r : loads) {
    fs::path file = r.path;
    if (file.is_relative()) file = fs::path(path).parent_path() / file;
    const size_t before = schedules.size();
    add_file(file.string(), fmt::format("{} (registered in {})", file.string(), path), true);
    if (schedules.size() == before) continue;
    // The registration's range and protocol replace the file's.
    auto s = std::make_shared<Schedule>(*schedules.back());
    s->min_bytes = r.min_bytes;
    s->max_bytes = r.max_bytes;
    if (!r.protocol.empty()) s->protocol = r.protocol;
    schedules.back() = std::move(s);
  }
}

void ScheduleLibrary::add(const std::string& path, bool recursive) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    if (!fs::exists(path, ec)) {
      rejected.push_back(fmt::format("{}: no such file or directory", path));
      return;
    }
    add_file(path, path);
    return;
  }
  std::vector<std::string> paths;
  auto take = [&](const fs::directory_entry& entry) {
    std::string p = entry.path().string();
    if (entry.is_regular_file(ec) && (has_extension(p, ".json") || has_extension(p, ".xml"))) paths.push_back(p);
  };
  try {  // iteration itself can throw
    if (recursive)
      for (const auto& entry : fs::recursive_directory_iterator(path, fs::directory_options::skip_permission_denied, ec))
        take(entry);
    else
      for (const auto& entry : fs::directory_iterator(path, ec)) take(entry);
  } catch (const std::exception& e) {
    rejected.push_back(fmt::format("{}: {}", path, e.what()));
    return;
  }
  if (ec) {
    rejected.push_back(fmt::format("{}: {}", path, ec.message()));
    return;
  }
  std::sort(paths.begin(), paths.end());
  for (const std::string& p : paths) add_file(p, p);
}

void ScheduleLibrary::add_list(const std::string& list, bool recursive) {
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t end = std::min(list.find(':', pos), list.size());
    if (end > pos) add(list.substr(pos, end - pos), recursive);
    pos = end + 1;
  }
}

std::shared_ptr<const Schedule> ScheduleLibrary::find(Collective c, int nranks, Placement placement,
                                                      uint64_t message_bytes, std::string* file) const {
  for (size_t i = 0; i < schedules.size(); ++i) {
    const Schedule& s = *schedules[i];
    if (s.collective != c || s.nranks != nranks) continue;
    bool placed = placement == Placement::InPlace    ? s.in_place
                  : placement == Placement::OutOfPlace ? s.out_of_place
                                                       : s.in_place && s.out_of_place;
    if (!placed || message_bytes < s.min_bytes || message_bytes > s.max_bytes) continue;
    if (file) *file = files[i];
    return schedules[i];
  }
  return nullptr;
}

ScheduleLibrary load_schedule_sources(const ScheduleSources& sources) {
  ScheduleLibrary lib;
  lib.add_list(sources.braid_schedules);
  lib.add_list(sources.msccl_xml_files);
  if (!sources.msccl_config.empty()) lib.add(sources.msccl_config);
  if (!sources.msccl_algo_dir.empty()) lib.add(sources.msccl_algo_dir, false);
  return lib;
}

}  // namespace braid
