// nccl-tests' command-line flags (same letters, long names and defaults).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nccl.h"
#include "perf/harness.h"

namespace perf {

// "64M" -> 67108864: K, M, G are powers of 1024, as in nccl-tests (which reads
// a number and one unit letter, and ignores what follows it: "64KB", "1Gib").
// False for negative, infinite, NaN or too large values and unknown units.
bool parse_size(const char* text, size_t* out);

struct Options {
  int threads = 1;  // -t
  int gpus = 1;     // -g (host buffers: one rank per thread)
  size_t min_bytes = 32 * 1024 * 1024, max_bytes = 32 * 1024 * 1024;  // -b, -e
  size_t step_bytes = 1024 * 1024;  // -i
  size_t step_factor = 1;           // -f (when > 1 it wins over -i)
  int iters = 20;                   // -n
  // --small_iters N, --small_bytes B: rows of at most B bytes run N
  // iterations instead of -n (0: -n for every row).  A row's time is an
  // average over its calls, and the first and last calls of a loop carry the
  // harness's own barrier and reduction with them; on an oversubscribed host
  // these edges cost tens of microseconds, enough to swamp ten calls of a few
  // microseconds.  OSU's micro-benchmarks run small messages longer for the
  // same reason.
  int small_iters = 0;
  size_t small_max_bytes = 1024 * 1024;
  int warmup = 1;                   // -w
  int agg = 1;                      // -m
  int cycles = 1;                   // -N (0: forever)
  int check = 1;                    // -c (check iterations)
  int average = 1;                  // -a (0 rank 0, 1 avg, 2 min, 3 max)
  int blocking = 0;                 // -z (1 wait + barrier per call, 2 wait per call, 3 wait + barrier per -n iter)
  int unalign = 0;                  // -u (buffers start this many elements past their alignment)
  int per_iter = 0;                 // -I (per-iteration times: i_min i_max i_p99 i_cv% columns)
  int per_iter_skip = 0;            // -K (leading iterations left out of the -I summary)
  int parallel_init = 0;            // -p
  int stream_null = 0;              // -y (device buffers: the calls on the legacy default stream)
  int graph = 0;                    // -G (graph launches; device buffers only, else plain launches)
  int cputime = 0;                  // -C
  int timestamps = 0;               // -S
  int local_register = 0;           // -R (1 ncclCommRegister, 2 symmetric window)
  int timeout_s = 0;                // -T
  std::string json_file;            // -J
  std::string op_arg = "sum", type_arg = "float";
  int root_arg = 0;                 // -r (-1: every rank in turn)
  std::vector<ncclDataType_t> types;
  std::vector<ncclRedOp_t> ops;
  std::vector<int> roots;
  std::vector<std::string> notes;   // "# ..." lines for flags accepted but without effect
  std::vector<std::string> warnings;  // stderr lines: values read or changed as nccl-tests does
  // --straggler RANK:DELAY_US: that rank sleeps before every call, and the
  // time reported runs from its arrival to the last rank's completion.
  int straggler_rank = -1;
  int64_t straggler_delay_us = 0;

  // Timed iterations of a row of `row_bytes`.
  int iters_for(size_t row_bytes) const {
    return small_iters > 0 && row_bytes <= small_max_bytes ? small_iters : iters;
  }

  // The next size of the sweep; > max_bytes when done.
  size_t next(size_t bytes) const {
    size_t n = step_factor > 1 ? (bytes ? bytes * step_factor : 1) : bytes + step_bytes;
    return n > bytes ? n : max_bytes + 1;
  }
};

// The flags the interleaved A/B tools (gin_perf, gin_get_perf) share: a
// size sweep, and rounds of timed iterations per size.
struct Sweep {
  size_t min_bytes = 8, max_bytes = 1 << 20, factor = 4;  // -b, -e, -f
  int iters = 20, warmup = 3, rounds = 5;                 // -n, -w, -r
  bool valid() const {
    return min_bytes >= 1 && min_bytes <= max_bytes && factor >= 2 && iters >= 1 && warmup >= 0 && rounds >= 1;
  }
};
// Sets one of those flags from getopt's `c` and `arg`; false when `c` is
// none of them or its value does not parse.
bool sweep_flag(int c, const char* arg, Sweep* s);

// False with `error` set on bad flags; `help` set for -h.
bool parse_options(int argc, char** argv, const Benchmark& b, bool mpi_peer, Options* out, std::string* error,
                   bool* help);
const char* usage();
// Once the rank count is known: roots to run (-r -1: all of them).
void expand_roots(Options* o, const Benchmark& b, int nranks);

}  // namespace perf
