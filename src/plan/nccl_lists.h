// NCCL's grammar for the variables that restrict a collective's choices
// per function, NCCL_ALGO and NCCL_PROTO (2.24+, docs/userguide env.rst;
// NCCL's parseList in src/graph/tuning.cc): entries separated by ';', each
// "[function:]list"; the list is comma-separated names (any case, spaces
// ignored), all excluded where it starts with '^' ("^" alone excludes
// nothing).  An entry without a function applies to every function no
// later entry names; only an entry at the very start of the value may lack
// one (NCCL refuses ";ring" too).  As NCCL's strtok reads an entry, empty
// pieces between ':' are skipped and the list ends at the next ':'
// ("allreduce:ring:tree" is "allreduce:ring", the rest ignored, as NCCL
// ignores it).  Empty entries and names are skipped too.  The functions are
// NCCL's: broadcast, reduce, allgather, reducescatter, allreduce.  A name
// outside `names` (in any entry), a function outside those, or a later
// entry without one fails as NCCL's parser fails, with ncclInvalidUsage
// naming the variable; so does a list of nothing, which NCCL fails later.
#pragma once

#include <string>
#include <vector>

#include "braid/schedule.h"
#include "src/base/status.h"

namespace braid {

// One function's list, its names lower-case.
struct NcclList {
  bool set = false;      // an entry covers the function
  bool exclude = false;  // "^a,b": every name but these
  std::vector<std::string> names;
  // Whether the list admits `name` (one of the variable's names).
  bool admits(const std::string& name) const;
  std::string text() const;  // "^tree,nvls", as given but lower-case
};

struct NcclFunctionLists {
  NcclList of[int(Collective::Custom)];  // by Collective; only NCCL's five functions are ever set
};

// `variable` names the variable, and `noun` what its lists name
// ("algorithm"), in errors; `names` are the names its lists may hold
// (lower-case).
Status parse_nccl_function_lists(const char* variable, const char* noun, const std::string& value,
                                 const std::vector<std::string>& names, NcclFunctionLists* out);

// NCCL's functions in NCCL's order, and each one's name ("allreduce"; null
// for a collective that is none of them).
constexpr Collective kNcclFunctions[] = {Collective::Broadcast, Collective::Reduce, Collective::AllGather,
                                         Collective::ReduceScatter, Collective::AllReduce};
const char* nccl_function_name(Collective c);

}  // namespace braid
