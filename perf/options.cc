#include "perf/options.h"

#include <fmt/format.h>
#include <getopt.h>

#include <cstdlib>

#include "perf/values.h"
#include "perf/world.h"

namespace perf {
namespace {

// "64M" -> 67108864 (K, M, G suffixes, powers of 1024 like nccl-tests).
bool parse_size(const char* text, size_t* out) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (end == text || v < 0) return false;
  switch (*end) {
    case 'K': case 'k': v *= 1024; ++end; break;
    case 'M': case 'm': v *= 1024 * 1024; ++end; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; ++end; break;
    default: break;
  }
  if (*end) return false;
  *out = size_t(v);
  return true;
}

bool parse_int(const char* text, int* out) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 0);
  if (end == text || *end) return false;
  *out = int(v);
  return true;
}

const char* kUsage =
    "usage: [-t,--nthreads <n>] [-g,--ngpus 1] [-b,--minbytes <size>] [-e,--maxbytes <size>]\n"
    "       [-i,--stepbytes <size>] [-f,--stepfactor <f>] [-n,--iters <n>] [-w,--warmup_iters <n>]\n"
    "       [-m,--agg_iters <n>] [-c,--check <0/1>] [-o,--op <sum/prod/min/max/avg/all>]\n"
    "       [-d,--datatype <type/all>] [-r,--root <root/all>] [-a,--average <0/1/2/3>]\n"
    "       [-z,--blocking <0/1>] [-G,--cudagraph <0>] [-C,--report_cputime <0/1>] [-h,--help]";

}  // namespace

bool parse_options(int argc, char** argv, const Benchmark& b, bool mpi_peer, Options* o, std::string* error) {
  static const option long_opts[] = {
      {"nthreads", required_argument, nullptr, 't'},   {"ngpus", required_argument, nullptr, 'g'},
      {"minbytes", required_argument, nullptr, 'b'},   {"maxbytes", required_argument, nullptr, 'e'},
      {"stepbytes", required_argument, nullptr, 'i'},  {"stepfactor", required_argument, nullptr, 'f'},
      {"iters", required_argument, nullptr, 'n'},      {"warmup_iters", required_argument, nullptr, 'w'},
      {"agg_iters", required_argument, nullptr, 'm'},  {"check", required_argument, nullptr, 'c'},
      {"op", required_argument, nullptr, 'o'},         {"datatype", required_argument, nullptr, 'd'},
      {"root", required_argument, nullptr, 'r'},       {"average", required_argument, nullptr, 'a'},
      {"blocking", required_argument, nullptr, 'z'},   {"cudagraph", required_argument, nullptr, 'G'},
      {"report_cputime", required_argument, nullptr, 'C'}, {"parallel_init", required_argument, nullptr, 'p'},
      {"local_register", required_argument, nullptr, 'R'}, {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0}};
  optind = 1;
  int c, ignored;
  bool ok = true;
  while ((c = getopt_long(argc, argv, "t:g:b:e:i:f:n:w:m:c:o:d:r:a:z:G:C:p:R:h", long_opts, nullptr)) != -1) {
    switch (c) {
      case 't': ok = parse_int(optarg, &o->threads) && o->threads >= 1; break;
      case 'g': ok = parse_int(optarg, &o->gpus); break;
      case 'b': ok = parse_size(optarg, &o->min_bytes); break;
      case 'e': ok = parse_size(optarg, &o->max_bytes); break;
      case 'i': ok = parse_size(optarg, &o->step_bytes); o->step_factor = 1; break;
      case 'f': o->step_factor = std::strtod(optarg, nullptr); ok = o->step_factor >= 1; break;
      case 'n': ok = parse_int(optarg, &o->iters) && o->iters >= 0; break;
      case 'w': ok = parse_int(optarg, &o->warmup) && o->warmup >= 0; break;
      case 'm': ok = parse_int(optarg, &o->agg) && o->agg >= 1; break;
      case 'c': ok = parse_int(optarg, &o->check); break;
      case 'o': o->op_arg = optarg; break;
      case 'd': o->type_arg = optarg; break;
      case 'r':
        if (std::string(optarg) == "all") o->all_roots = true;
        else ok = parse_int(optarg, &o->root_arg);
        break;
      case 'a': ok = parse_int(optarg, &o->average) && o->average >= 0 && o->average <= 3; break;
      case 'z': ok = parse_int(optarg, &o->blocking); break;
      case 'G': ok = parse_int(optarg, &o->graph); break;
      case 'C': case 'p': case 'R': ok = parse_int(optarg, &ignored); break;
      case 'h': *error = kUsage; return false;
      default: *error = kUsage; return false;
    }
    if (!ok) {
      *error = fmt::format("bad value '{}' for -{}\n{}", optarg ? optarg : "", char(c), kUsage);
      return false;
    }
  }
  if (o->gpus != 1) {
    *error = "-g: the host backend runs one rank per thread; use -t for more ranks per process";
    return false;
  }
  if (o->graph != 0) {
    *error = "-G: CUDA graphs need the CUDA backend; the host backend supports -G 0 only";
    return false;
  }
  if (mpi_peer && o->threads != 1) {
    *error = "-t: the MPI peer tool runs one rank per process (launch more with mpirun -np)";
    return false;
  }
  if (o->min_bytes > o->max_bytes) {
    *error = fmt::format("-b {} is larger than -e {}", o->min_bytes, o->max_bytes);
    return false;
  }
  if (!parse_types(o->type_arg, mpi_peer, &o->types)) {
    *error = fmt::format("-d {}: unknown or unsupported datatype", o->type_arg);
    return false;
  }
  o->ops = {ncclSum};
  if (b.reduces && !parse_ops(o->op_arg, &o->ops)) {
    *error = fmt::format("-o {}: unknown reduction (sum, prod, min, max, avg, all)", o->op_arg);
    return false;
  }
  if (mpi_peer && std::find(o->ops.begin(), o->ops.end(), ncclAvg) != o->ops.end()) {
    *error = "-o avg: MPI has no average reduction";
    return false;
  }
  o->roots = {b.rooted ? o->root_arg : -1};
  return true;
}

void expand_roots(Options* o, int nranks) {
  if (!o->all_roots) return;
  o->roots.clear();
  for (int r = 0; r < nranks; ++r) o->roots.push_back(r);
}

void print_header(const Options& o, const Benchmark& b, const World& w) {
  fmt::print("# nThread {} nGpus {} minBytes {} maxBytes {} step: {}({}) warmup iters: {} iters: {} agg iters: {} "
             "validation: {} graph: {}\n#\n",
             o.threads, o.gpus, o.min_bytes, o.max_bytes,
             o.step_factor > 1 ? fmt::format("{:g}", o.step_factor) : std::to_string(o.step_bytes),
             o.step_factor > 1 ? "factor" : "bytes", o.warmup, o.iters, o.agg, o.check, o.graph);
  fmt::print("# Using devices\n");
  std::fflush(stdout);
}

}  // namespace perf
