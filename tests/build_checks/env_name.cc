// Compiled by ctest (tests/CMakeLists.txt, env_name_*): with ENV_NAME a
// registered variable this builds; with a mistyped one it must not.
#include "src/base/env.h"

int64_t read_it() { return braid::env_int(ENV_NAME); }
