// Writes the msccl-tools-style test files (msccl_style.h) into a directory,
// for braid_msccl_files to run: every collective MSCCL files exist for, 2 to
// 16 ranks, one placement each, nop steps, multi-chunk steps, size ranges
// that hand a rank count's calls from one file to the next, and one file in
// the older dialect.
// Usage: braid_msccl_gen OUTDIR
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "msccl_style.h"

int main(int argc, char** argv) {
  if (argc != 2) return std::fprintf(stderr, "usage: %s OUTDIR\n", argv[0]), 2;
  namespace fs = std::filesystem;
  using namespace msccl_style;
  const fs::path dir = argv[1];
  fs::remove_all(dir);
  fs::create_directories(dir / "by_ranks");  // a subdirectory: the search is recursive
  auto write = [&](const fs::path& name, Algo a) {
    std::ofstream(dir / name) << a.xml();
  };
  auto ranged = [](Algo a, long long lo, long long hi) {
    a.min_bytes = lo;
    a.max_bytes = hi;
    return a;
  };
  auto legacy = [](Algo a) {
    a.legacy = true;
    a.coll = a.coll == "reducescatter" ? "reduce_scatter" : a.coll;
    return a;
  };
  // Small messages go to allpairs, larger ones to the ring (path order decides ties).
  write("ar_allpairs_2.xml", allpairs(2, true));
  write("ar_allpairs_3.xml", ranged(allpairs(3, true), 0, 4096));
  write("ar_ring_3_2ch.xml", ranged(ring_allreduce(3, 2), 4097, 0));
  write("ar_allpairs_4.xml", ranged(allpairs(4, true), 0, 65536));
  write("ar_ring_4.xml", ranged(ring_allreduce(4), 65537, 0));
  write("ar_allpairs_8.xml", allpairs(8, true, "LL128"));
  write("ag_ring_2.xml", ring_allgather(2));
  write("by_ranks/ag_ring_8.xml", ring_allgather(8));
  write("by_ranks/ag_ring_16.xml", ring_allgather(16));
  write("a2a_allpairs_3.xml", allpairs_alltoall(3, 2));
  write("a2a_allpairs_8.xml", allpairs_alltoall(8, 2));
  write("by_ranks/a2a_allpairs_16.xml", allpairs_alltoall(16, 1));
  write("rs_allpairs_4_legacy.xml", legacy(allpairs(4, false)));
  write("by_ranks/rs_allpairs_16.xml", allpairs(16, false));
  return 0;
}
