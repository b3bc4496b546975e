#include "src/plan/nccl_proto.h"

#include "src/plan/nccl_lists.h"

namespace braid {

Status parse_nccl_proto(const std::string& value, NcclProto* out) {
  *out = NcclProto{};
  NcclFunctionLists lists;
  BRAID_TRY(parse_nccl_function_lists("NCCL_PROTO", "protocol", value, {"ll", "ll128", "simple"}, &lists));
  for (const Collective c : kNcclFunctions) {
    const NcclList& list = lists.of[int(c)];
    if (!list.set) continue;
    const bool ll = list.admits("ll"), simple = list.admits("simple");
    if (!ll && !simple) {
      out->unserved += fmt::format("{}{} ({})", out->unserved.empty() ? "" : ", ", nccl_function_name(c), list.text());
      continue;
    }
    if (!ll) out->ll_excluded |= 1u << int(c);
  }
  return Status::ok();
}

}  // namespace braid
