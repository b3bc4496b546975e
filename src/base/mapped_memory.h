// Whether a byte range is mapped memory of this process: NCCL_CHECK_MODE's
// local pointer check for host buffers (a collective given a stray pointer
// then fails with a clear error instead of a fault in a worker thread).
#pragma once

#include <cstddef>

namespace braid {

// mincore(2) over the range's pages: false if any page is not mapped.  Says
// nothing of permissions (a read-only page passes).  An empty range is mapped.
bool range_is_mapped(const void* p, size_t bytes);

}  // namespace braid
