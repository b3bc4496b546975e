// Which of braid's algorithms a per-collective selection admits
// (ncclCollConfig_t::algSelection, NCCL 2.31).
//
// NCCL's grammar: selection := term (',' term)*, term := factor ('+'
// factor)*, factor := ['^'] name.  ',' is union, '+' intersection, '^' the
// complement (among every selectable name); whitespace is ignored, case too,
// and a name matches every selectable name it is a prefix of ("ring"
// matches RING_LL, RING_LL128 and RING_SIMPLE).
//
// The selectable names are braid's algorithm names (algorithm_registry:
// ring, rd, stragglar, direct, binomial, pairwise) and NCCL's.  NCCL's
// RING_* select braid's ring where braid has one for the collective; its
// other names (TREE_*, NVLS*, COLLNET*, PAT_SIMPLE, SYMK_*) are known and
// select nothing braid runs, so a selection of them alone cannot be
// honoured.  A name that is neither braid's nor NCCL's is an error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "braid/schedule.h"
#include "src/base/status.h"

namespace braid {

// braid's fast paths (the host backend's boards and single-copy paths, the
// CUDA backend's LL path) are none of the selectable names: they replace a
// schedule for calls they serve, whatever its algorithm.  So a selection
// that names what may run ("ring", "rd,direct") keeps a call off them, and
// one that only says what may not ("^ring", "^tree") keeps them, as NCCL's
// "^RING" keeps its other kernels.  Their bit in a call's algorithms, above
// every registry index (tests check the registry stays below it).
constexpr uint32_t kFastPathsBit = 1u << 31;
// Whether a call's algorithms (0: automatic) let a fast path serve it.
inline bool admits_fast_paths(uint32_t algorithms) { return algorithms == 0 || (algorithms & kFastPathsBit); }

// *admitted gets a bit per algorithm_registry() index of a `c` algorithm the
// selection admits (0: none of braid's), and kFastPathsBit where the
// selection admits the fast paths.  A malformed selection or an unknown name
// is ncclInvalidArgument.
Status parse_alg_selection(const std::string& selection, Collective c, uint32_t* admitted);

// `text` cut at every `sep` (empty parts kept): the grammars' lists.
std::vector<std::string> split(const std::string& text, char sep);

// The names of the algorithms in `admitted` ("ring, stragglar", and "fast
// paths" for kFastPathsBit), for messages.
std::string admitted_names(uint32_t admitted);

}  // namespace braid
