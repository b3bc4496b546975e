// libFuzzer target: braid's JSON schedule loader and what consumes its output.
//
// Schedules come from files (BRAID_SCHEDULES, `braid verify file.json`), so
// the loader must reject any bytes cleanly: never crash, throw, hang or read
// out of bounds.  Whatever it accepts must survive the round trip (to JSON
// and back, same text) and the verifier (bounded in size so a run stays fast).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "braid/schedule_json.h"
#include "braid/verify.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  braid::Schedule schedule;
  std::string error;
  if (!braid::schedule_from_json(text, &schedule, &error)) {
    if (error.empty()) std::abort();  // a refusal must say why
    return 0;
  }
  std::string again = braid::schedule_to_json(schedule);
  braid::Schedule reparsed;
  if (!braid::schedule_from_json(again, &reparsed, &error)) std::abort();
  if (braid::schedule_to_json(reparsed) != again) std::abort();
  size_t ops = 0;
  for (const auto& rank : schedule.ranks)
    for (const auto& lane : rank.lanes) ops += lane.ops.size();
  if (schedule.nranks <= 16 && ops <= 512) {
    braid::VerifyResult result = braid::verify(schedule);
    if (!result.ok && result.errors.empty()) std::abort();
  }
  return 0;
}
