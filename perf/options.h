// nccl-tests' command-line flags.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "nccl.h"
#include "perf/harness.h"

namespace perf {

struct Options {
  int threads = 1;           // -t
  int gpus = 1;              // -g (host backend: 1)
  size_t min_bytes = 32 * 1024 * 1024, max_bytes = 32 * 1024 * 1024;  // -b, -e
  size_t step_bytes = 1024 * 1024;  // -i
  double step_factor = 1;    // -f (when > 1 it wins over -i)
  int iters = 20;            // -n
  int warmup = 1;            // -w
  int agg = 1;               // -m
  int check = 1;             // -c
  int average = 1;           // -a
  int blocking = 1;          // -z
  int graph = 0;             // -G
  std::string op_arg = "sum", type_arg = "float";
  std::vector<ncclDataType_t> types;
  std::vector<ncclRedOp_t> ops;
  std::vector<int> roots;    // -r (all: every rank)
  int root_arg = 0;
  bool all_roots = false;

  // The next size in the sweep; returns a value > max_bytes when done.
  size_t next(size_t bytes) const {
    size_t n = step_factor > 1 ? size_t(double(bytes) * step_factor) : bytes + step_bytes;
    return n > bytes ? n : max_bytes + 1;
  }
};

void print_header(const Options& o, const Benchmark& b, const class World& w);
bool parse_options(int argc, char** argv, const Benchmark& b, bool mpi_peer, Options* out, std::string* error);
// After the world is known: expands -r all.
void expand_roots(Options* o, int nranks);

}  // namespace perf
