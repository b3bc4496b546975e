#include "src/plan/slot_stores.h"

#include "src/base/env.h"

namespace braid {

Status slot_stores_mode_from_env(SlotStoresMode* out) {
  int i = 0;
  BRAID_TRY(env_choice("BRAID_SLOT_STORES", {"auto", "cached", "streamed"}, &i));  // SlotStoresMode's order
  *out = SlotStoresMode(i);
  return Status::ok();
}

}  // namespace braid
