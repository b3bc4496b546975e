#include "perf/options.h"

#include <fmt/format.h>
#include <getopt.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "perf/values.h"

namespace perf {

bool parse_size(const char* text, size_t* out) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  // strtod also reads "inf" and "nan", which have no size.
  if (end == text || !std::isfinite(v) || v < 0) return false;
  while (std::isspace(static_cast<unsigned char>(*end))) ++end;
  double unit = 1;
  switch (*end) {
    case 'K': case 'k': unit = 1024; break;
    case 'M': case 'm': unit = 1024.0 * 1024; break;
    case 'G': case 'g': unit = 1024.0 * 1024 * 1024; break;
    case 'B': case 'b': if (end[1] != '\0') return false; break;  // "8B" (nccl-tests refuses it; harmless)
    case '\0': break;
    default: return false;
  }
  if (v * unit >= 18446744073709551616.0) return false;  // 2^64: would not fit a size_t
  *out = size_t(v * unit);
  return true;
}

bool sweep_flag(int c, const char* arg, Sweep* s) {
  switch (c) {
    case 'b': return parse_size(arg, &s->min_bytes);
    case 'e': return parse_size(arg, &s->max_bytes);
    case 'f': s->factor = std::strtoull(arg, nullptr, 0); return true;
    case 'n': s->iters = std::atoi(arg); return true;
    case 'w': s->warmup = std::atoi(arg); return true;
    case 'r': s->rounds = std::atoi(arg); return true;
    default: return false;
  }
}

namespace {

// Long-only options get values past any short option letter.
constexpr int kStragglerOption = 1000;
constexpr int kSmallItersOption = 1001;
constexpr int kSmallBytesOption = 1002;

// How an error message names option `c`.
std::string option_name(int c) {
  switch (c) {
    case kStragglerOption: return "--straggler (RANK:DELAY_US)";
    case kSmallItersOption: return "--small_iters (a count >= 1)";
    case kSmallBytesOption: return "--small_bytes (a size)";
    default: return fmt::format("-{}", char(c));
  }
}

bool parse_int(const char* text, int* out) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 0);
  if (end == text || *end) return false;
  *out = int(v);
  return true;
}

// nccl-tests reads its numeric flags with strtol, which stops at the first
// character that is not part of a number: "-t 2x" is 2 threads and "-f 2.5"
// a factor of 2.  The same here, with a warning, so that its scripts run
// unchanged; a value with no leading number at all (nccl-tests: 0) is refused.
bool parse_count(int c, const char* text, int* out, std::vector<std::string>* warnings) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 0);
  if (end == text || errno == ERANGE || v < INT_MIN || v > INT_MAX) return false;
  if (*end) warnings->push_back(fmt::format("-{} {}: read as {}, as nccl-tests' strtol reads it", char(c), text, v));
  *out = int(v);
  return true;
}

}  // namespace

const char* usage() {
  return "USAGE: <tool>\n"
         "\t[-t,--nthreads <num threads>] \n"
         "\t[-g,--ngpus <gpus per thread>] (1: host buffers, one rank per thread)\n"
         "\t[-b,--minbytes <min size in bytes>] \n"
         "\t[-e,--maxbytes <max size in bytes>] \n"
         "\t[-i,--stepbytes <increment size>] \n"
         "\t[-f,--stepfactor <increment factor>] \n"
         "\t[-n,--iters <iteration count>] \n"
         "\t[-m,--agg_iters <aggregated iteration count>] \n"
         "\t[-w,--warmup_iters <warmup iteration count>] \n"
         "\t[--small_iters <iteration count>] rows of at most --small_bytes run this many iterations instead of -n\n"
         "\t[--small_bytes <size in bytes>] (default 1M)\n"
         "\t[-N,--run_cycles <cycle count> run & print each cycle (default: 1; 0=infinite)] \n"
         "\t[-p,--parallel_init <0/1>] \n"
         "\t[-c,--check <check iteration count>] \n"
         "\t[-o,--op <sum/prod/min/max/avg/mulsum/all>] \n"
         "\t[-d,--datatype <nccltype/all>] \n"
         "\t[-r,--root <root> (-1: every rank)] \n"
         "\t[-z,--blocking <0/1/2/3> 1=barrier after each inner iter (-m), 2=no barrier, 3=wait and barrier after "
         "each outer iter (-n)] \n"
         "\t[-y,--stream_null <0/1>] (device buffers: 1 runs the calls on the NULL stream)\n"
         "\t[-T,--timeout <time in seconds>] \n"
         "\t[-G,--cudagraph <num graph launches>] (device buffers only)\n"
         "\t[-C,--report_cputime <0/1>] \n"
         "\t[-S,--report_timestamps <0/1> report timestamps (default 0)] \n"
         "\t[-J,--output_file <file> write output to filepath (json)] \n"
         "\t[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>] \n"
         "\t[-R,--local_register <0/1/2> enable local (1) or symmetric (2) buffer registration] \n"
         "\t[-u,--unalign <index of first element> Misalign source and destination buffers (default: 0)] \n"
         "\t[-I,--per_iter_timing <0/1> per-iteration timing (i_min i_max i_p99 i_cv% columns; default: 0)] \n"
         "\t[-K,--per_iter_skip <count> exclude leading samples from -I summary stats (default: 0)] \n"
         "\t[--straggler <rank>:<delay us>] delay that rank before each call; time from its arrival\n"
         "\t[-h,--help]\n";
}

bool parse_options(int argc, char** argv, const Benchmark& b, bool mpi_peer, Options* o, std::string* error,
                   bool* help) {
  static const option long_opts[] = {
      {"nthreads", required_argument, nullptr, 't'},
      {"ngpus", required_argument, nullptr, 'g'},
      {"minbytes", required_argument, nullptr, 'b'},
      {"maxbytes", required_argument, nullptr, 'e'},
      {"stepbytes", required_argument, nullptr, 'i'},
      {"stepfactor", required_argument, nullptr, 'f'},
      {"iters", required_argument, nullptr, 'n'},
      {"agg_iters", required_argument, nullptr, 'm'},
      {"warmup_iters", required_argument, nullptr, 'w'},
      {"run_cycles", required_argument, nullptr, 'N'},
      {"parallel_init", required_argument, nullptr, 'p'},
      {"check", required_argument, nullptr, 'c'},
      {"op", required_argument, nullptr, 'o'},
      {"datatype", required_argument, nullptr, 'd'},
      {"root", required_argument, nullptr, 'r'},
      {"blocking", required_argument, nullptr, 'z'},
      {"stream_null", required_argument, nullptr, 'y'},
      {"timeout", required_argument, nullptr, 'T'},
      {"cudagraph", required_argument, nullptr, 'G'},
      {"report_cputime", required_argument, nullptr, 'C'},
      {"report_timestamps", required_argument, nullptr, 'S'},
      {"output_file", required_argument, nullptr, 'J'},
      {"average", required_argument, nullptr, 'a'},
      {"local_register", required_argument, nullptr, 'R'},
      {"cta_policy", required_argument, nullptr, 'x'},
      {"device_implementation", required_argument, nullptr, 'D'},
      {"device_cta_count", required_argument, nullptr, 'V'},
      {"memory", required_argument, nullptr, 'M'},
      {"unalign", required_argument, nullptr, 'u'},
      {"per_iter_timing", required_argument, nullptr, 'I'},
      {"per_iter_skip", required_argument, nullptr, 'K'},
      {"help", no_argument, nullptr, 'h'},
      {"straggler", required_argument, nullptr, kStragglerOption},
      {"small_iters", required_argument, nullptr, kSmallItersOption},
      {"small_bytes", required_argument, nullptr, kSmallBytesOption},
      {nullptr, 0, nullptr, 0}};
  optind = 1;
  opterr = 0;
  *help = false;
  int c, scratch = 0;
  std::vector<std::string>* warn = &o->warnings;
  while ((c = getopt_long(argc, argv, "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:", long_opts,
                          nullptr)) != -1) {
    bool ok = true;
    switch (c) {
      case 't': ok = parse_count(c, optarg, &o->threads, warn) && o->threads >= 1; break;
      case 'g': ok = parse_count(c, optarg, &o->gpus, warn); break;
      case 'b': ok = parse_size(optarg, &o->min_bytes); break;
      case 'e': ok = parse_size(optarg, &o->max_bytes); break;
      case 'i': ok = parse_size(optarg, &o->step_bytes); break;
      case 'f': ok = parse_count(c, optarg, &scratch, warn) && scratch >= 0; o->step_factor = size_t(scratch); break;
      case 'n': ok = parse_count(c, optarg, &o->iters, warn) && o->iters >= 1; break;
      case 'm': ok = parse_count(c, optarg, &o->agg, warn) && o->agg >= 1; break;
      case 'w': ok = parse_count(c, optarg, &o->warmup, warn) && o->warmup >= 0; break;
      case kSmallItersOption: ok = parse_int(optarg, &o->small_iters) && o->small_iters >= 1; break;
      case kSmallBytesOption: ok = parse_size(optarg, &o->small_max_bytes); break;
      case 'N': ok = parse_count(c, optarg, &o->cycles, warn) && o->cycles >= 0; break;
      case 'p': ok = parse_count(c, optarg, &o->parallel_init, warn); break;
      case 'c': ok = parse_count(c, optarg, &o->check, warn) && o->check >= 0; break;
      case 'o': o->op_arg = optarg; break;
      case 'd': o->type_arg = optarg; break;
      case 'r':
        if (std::string(optarg) == "all") o->root_arg = -1;
        else ok = parse_count(c, optarg, &o->root_arg, warn) && o->root_arg >= -1;
        break;
      case 'z': ok = parse_count(c, optarg, &o->blocking, warn) && o->blocking >= 0 && o->blocking <= 3; break;
      case 'y': ok = parse_count(c, optarg, &o->stream_null, warn); break;
      case 'T': ok = parse_count(c, optarg, &o->timeout_s, warn) && o->timeout_s >= 0; break;
      case 'G': ok = parse_count(c, optarg, &o->graph, warn) && o->graph >= 0; break;
      case 'C': ok = parse_count(c, optarg, &o->cputime, warn); break;
      case 'S': ok = parse_count(c, optarg, &o->timestamps, warn); break;
      case 'J': o->json_file = optarg; break;
      case 'a': ok = parse_count(c, optarg, &o->average, warn) && o->average >= 0 && o->average <= 3; break;
      case 'R':
        ok = parse_count(c, optarg, &o->local_register, warn) && o->local_register >= 0 && o->local_register <= 2;
        break;
      case 'u': ok = parse_count(c, optarg, &o->unalign, warn) && o->unalign >= 0; break;
      case 'I': ok = parse_count(c, optarg, &o->per_iter, warn); break;
      case 'K': ok = parse_count(c, optarg, &o->per_iter_skip, warn); break;
      case 'x': case 'V': case 'M':
        ok = parse_count(c, optarg, &scratch, warn);
        o->notes.push_back(fmt::format("-{} {}: GPU-only option, ignored", char(c), optarg));
        break;
      case 'D':
        ok = parse_count(c, optarg, &scratch, warn);
        if (ok && scratch != 0) {
          *error = "-D: device implementations need GPU buffers; the perf tools use host buffers (use -D 0)";
          return false;
        }
        break;
      case kStragglerOption: {
        char* end = nullptr;
        long rank = std::strtol(optarg, &end, 10);
        long long delay = *end == ':' ? std::strtoll(end + 1, &end, 10) : -1;
        ok = *end == '\0' && rank >= 0 && delay >= 0;
        o->straggler_rank = int(rank);
        o->straggler_delay_us = delay;
        break;
      }
      case 'h': *help = true; return false;
      default:
        *error = fmt::format("invalid option '{}'\n{}", argv[optind - 1], usage());
        return false;
    }
    if (!ok) {
      *error = fmt::format("bad value '{}' for {}", optarg ? optarg : "", option_name(c));
      return false;
    }
  }
  if (optind < argc) {
    *error = fmt::format("unexpected argument '{}'", argv[optind]);
    return false;
  }
  if (o->gpus != 1) {
    *error = fmt::format(
        "-g {}: braid's perf tools drive host buffers, one rank per thread; only -g 1 is supported "
        "(use -t <ranks> for more ranks per process, or mpirun -np <procs>)",
        o->gpus);
    return false;
  }
  if (o->graph > 0 && mpi_peer) {
    o->notes.push_back(fmt::format("-G {}: the MPI peer tool's calls are MPI's, not capturable; timing plain calls",
                                   o->graph));
    o->graph = 0;
  }
  // What nccl-tests' main() turns off with a message rather than refuses (its order).
  if (o->per_iter != 0 && o->per_iter != 1) {
    warn->push_back("per-iteration timing (-I) only supports 0=off or 1=on. Disabling.");
    o->per_iter = 0;
  }
  if (o->per_iter && o->graph >= 1) {
    warn->push_back("per-iteration timing (-I) is incompatible with CUDA graph mode (-G). Disabling.");
    o->per_iter = 0;
  }
  if (o->blocking == 3 && o->graph >= 1) {
    warn->push_back("blocking mode (-z 3) is incompatible with CUDA graph mode (-G). Disabling.");
    o->blocking = 0;
  }
  if (o->per_iter_skip < 0 || o->per_iter_skip >= o->iters) {
    warn->push_back(fmt::format("per-iteration skip (-K) must be between 0 and {}. Disabling.", o->iters - 1));
    o->per_iter_skip = 0;
  }
  if (o->per_iter_skip && !o->per_iter) {
    warn->push_back("per-iteration skip (-K) requires per-iteration timing (-I 1). Disabling.");
    o->per_iter_skip = 0;
  }
  if (o->per_iter && o->straggler_rank >= 0) {
    *error = "-I with --straggler: the straggler's rows time each iteration their own way; use one or the other";
    return false;
  }
  if (o->graph > 0 && o->blocking) {
    *error = fmt::format("-G {} with -z: a stream being captured into a CUDA graph cannot be waited for after each "
                         "call; use one or the other", o->graph);
    return false;
  }
  if (o->graph > 0 && o->stream_null) {
    *error = fmt::format("-G {} with -y 1: the legacy default (NULL) stream cannot be captured into a CUDA graph; use "
                         "one or the other", o->graph);
    return false;
  }
  if (o->graph > 0 && o->straggler_rank >= 0) {
    *error = fmt::format("-G {} with --straggler: the straggler sleeps on the host before each call, which the "
                         "launches of a graph do not have; use one or the other", o->graph);
    return false;
  }
  if (mpi_peer && o->threads != 1) {
    *error = "-t: the MPI peer tool runs one rank per process (launch more with mpirun -np)";
    return false;
  }
  if (mpi_peer && o->local_register) o->local_register = 0;
  if (o->straggler_rank >= 0)
    o->notes.push_back(fmt::format("--straggler {}:{}: rank {} sleeps {} us before each call; time is from its "
                                   "arrival to the last rank's completion (median over iterations)",
                                   o->straggler_rank, o->straggler_delay_us, o->straggler_rank, o->straggler_delay_us));
  if (o->small_iters > 0)
    o->notes.push_back(fmt::format("--small_iters {}: rows of at most {} bytes run {} iterations, larger ones {}",
                                   o->small_iters, o->small_max_bytes, o->small_iters, o->iters));
  if (o->min_bytes > o->max_bytes) {
    *error = fmt::format("invalid sizes for 'minbytes' and 'maxbytes': {} > {}", o->min_bytes, o->max_bytes);
    return false;
  }
  if (!parse_types(o->type_arg, mpi_peer, &o->types)) {
    *error = fmt::format("-d {}: unknown datatype{}", o->type_arg,
                         mpi_peer ? " (or none MPI has: int8, uint8, int32, uint32, int64, uint64, float, double)" : "");
    return false;
  }
  o->ops = {ncclSum};
  if (b.reduces || b.names_ops) {
    if (!parse_ops(o->op_arg, &o->ops)) {
      *error = fmt::format("-o {}: unknown reduction (sum, prod, min, max, avg, mulsum, all)", o->op_arg);
      return false;
    }
    if (mpi_peer) {
      o->ops.erase(std::remove_if(o->ops.begin(), o->ops.end(),
                                  [](ncclRedOp_t op) { return op == ncclAvg || op == kMulSum; }),
                   o->ops.end());
      if (o->ops.empty()) {
        *error = fmt::format("-o {}: MPI has no such predefined reduction", o->op_arg);
        return false;
      }
    }
  }
  return true;
}

void expand_roots(Options* o, const Benchmark& b, int nranks) {
  o->roots.clear();
  if (!b.rooted) {
    o->roots.push_back(-1);
  } else if (o->root_arg == -1) {
    for (int r = 0; r < nranks; ++r) o->roots.push_back(r);
  } else {
    o->roots.push_back(o->root_arg);
  }
}

}  // namespace perf
