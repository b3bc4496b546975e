// A fixture for the layer check's ctest (layers_check_rejects_a_wrong_way_include):
// the bottom layer including the runtime, which scripts/check-layers must refuse.
#pragma once

#include "src/runtime/comm.h"
