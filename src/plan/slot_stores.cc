#include "src/plan/slot_stores.h"

#include "src/core/env.h"

namespace braid {

Status slot_stores_mode_from_env(SlotStoresMode* out) {
  const std::string v = env_string("BRAID_SLOT_STORES");
  if (v == "auto") *out = SlotStoresMode::Auto;
  else if (v == "cached") *out = SlotStoresMode::Cached;
  else if (v == "streamed") *out = SlotStoresMode::Streamed;
  else return BRAID_ERROR(ncclInvalidArgument, "BRAID_SLOT_STORES={} (expected auto, cached or streamed)", v);
  return Status::ok();
}

}  // namespace braid
